// CUDA worlds for RunWorld (launch/world.h): ranks on GPUs, in-process or under a launcher.
//
// Overview. Linking //launch:cuda_world (a cuda_cc_library, alwayslink: declared where a CUDA
// toolkit was found) registers these functions with RegisterCudaWorldFactory from a static
// initializer, so RunWorld(mode, WorldOptions{.device = WorldDevice::kCuda}, fn) starts a world
// whose communicators live on GPUs; //launch:world itself has no CUDA dependency. It also links the
// CUDA device runtime (//runtime/cuda:cuda_device), so RankContext::Create(world, mesh) finds the
// rank's GPU. Call RunWorld; these functions are what it calls. Where the ranks go
// (PlaceRanksOnGpus, launch/world.h):
//   - In-process, InProcess{nproc} with nproc <= visible GPUs: an NcclWorld (one thread per rank,
//     ncclCommInitAll), rank r on GPU r. Collectives are NCCL, GPU to GPU, enqueued on the rank's
//     communication stream without host synchronization.
//   - In-process with nproc > visible GPUs: NCCL refuses two ranks on one GPU ("Duplicate GPU
//     detected", NVIDIA/nccl#418), so a ThreadWorld whose ranks are StagedCommunicators
//     (collectives/staged/staged_communicator.h) on GPU r % GPUs. Cost per collective: the inputs
//     are copied to pageable host memory and the results back (a few GB/s, not NVLink), the rank's
//     stream is synchronized first (compute issued before a collective cannot overlap with it, and
//     the rank's thread blocks), and the threads backend moves the bytes between the ranks' host
//     scratch. It is for testing a plan of N ranks on fewer GPUs (e.g. 2 ranks on one GPU), not for
//     speed: its step times measure the staging, not NCCL.
//   - Under a launcher (ExternalLaunch): MPI is started, the processes of each host are counted
//     (MPI_Comm_split_type, shared memory) and every rank agrees (an all-reduce over MPI) on one
//     backend. When no host has more processes than visible GPUs: NCCL over MPI (NcclMpiWorld,
//     collectives/nccl/nccl_mpi.h: rank 0's unique id broadcast over MPI, ncclCommInitRank), the
//     node-local rank l on GPU l % GPUs. Otherwise: the MPI world wrapped in a StagedCommunicator
//     on GPU l % GPUs, with the staging costs above plus MPI's own transfer.
// RankInfo: rank, size and local rank as for host worlds; device = the rank's GPU (= the
// communicator's device()); concurrent_communicators false on NCCL (launch/world.h, "MPI thread
// level"), true on the staged threads world, MpiThreadMultiple() on staged MPI.
//
//   // BUILD: deps = ["//launch:world", "//launch:cuda_world", "//runtime:rank_context", ...]
//   MF_ASSIGN_OR_RETURN(LaunchMode mode, DetectLaunch(SystemEnv, /*nproc=*/2));
//   const WorldOptions gpus{.device = WorldDevice::kCuda};
//   MF_RETURN_IF_ERROR(RunWorld(mode, gpus, [&](Communicator& world, const RankInfo& me) -> Status {
//     MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({me.size}));
//     MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world, mesh));
//     // ctx.device() == me.device: "nccl" on 2+ GPUs, "threads+staged" on one (world.backend())
//     return Status::Ok();
//   }));
//
// Errors: no visible GPU (UNAVAILABLE: "RunWorld: ... no CUDA device: cudaGetDeviceCount returned
// cudaErrorNoDevice (...)" or "... reports 0 devices"), returned before MPI is started under a
// launcher; nproc < 1 (INVALID_ARGUMENT); NcclWorld / NcclMpiWorld / StagedCommunicator creation
// errors (CUDA and NCCL failures, MPI start-up); the rank functions' errors ("rank R: ...").
#ifndef MESHFLOW_LAUNCH_CUDA_WORLD_H_
#define MESHFLOW_LAUNCH_CUDA_WORLD_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include "meshflow/base/status.h"
#include "meshflow/launch/world.h"

namespace meshflow {

// In-process: fn on nproc ranks on GPUs (NCCL or staged, see above).
Status RunCudaWorldInProcess(int nproc, const RankFunction& fn);

// Under a launcher: this process's world communicator on its GPU (see above).
StatusOr<ProcessWorld> CudaProcessWorld(const ExternalLaunch& launch);

}  // namespace meshflow

#endif  // MESHFLOW_LAUNCH_CUDA_WORLD_H_
