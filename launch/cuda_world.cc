#include "meshflow/launch/cuda_world.h"

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/collectives/nccl/nccl_communicator.h"
#include "meshflow/collectives/nccl/nccl_mpi.h"
#include "meshflow/collectives/staged/staged_communicator.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/runtime/device.h"

namespace meshflow {
namespace {

// The visible GPUs; UNAVAILABLE naming cudaGetDeviceCount's result when there is none.
StatusOr<int> VisibleGpus(const std::string& who) {
  StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status().WithContext("RunWorld: " + who + ": counting CUDA devices");
  if (*count > 0) return *count;
  std::string why = NoCudaDeviceReason();
  if (why.empty()) why = "no CUDA device: cudaGetDeviceCount reports 0 devices";
  return UnavailableError("RunWorld: " + who + " asked for ranks on CUDA devices, but there is " + why);
}

std::string Ranks(int n) { return std::to_string(n) + " rank" + (n == 1 ? "" : "s"); }

// One GPU per rank: an NcclWorld over p.ordinals.
Status RunNcclInProcess(const GpuPlacement& p, const RankFunction& fn) {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<NcclWorld> world, NcclWorld::Create(p.ordinals));
  return world->Run([&](NcclCommunicator& comm) -> Status {
    const RankInfo me{comm.world_rank(), comm.size(), comm.world_rank(), /*concurrent_communicators=*/false,
                      comm.device()};
    return fn(comm, me);
  });
}

// Ranks sharing GPUs: a ThreadWorld whose ranks are StagedCommunicators on p.ordinals.
Status RunStagedInProcess(const GpuPlacement& p, const RankFunction& fn) {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(static_cast<int>(p.ordinals.size())));
  return world->Run([&](Communicator& comm) -> Status {
    const Device gpu = Device::Cuda(p.ordinals[static_cast<size_t>(comm.world_rank())]);
    MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged, StagedCommunicator::Create(comm, gpu));
    const RankInfo me{comm.world_rank(), comm.size(), comm.world_rank(), /*concurrent_communicators=*/true, gpu};
    return fn(*staged, me);
  });
}

struct NodeRank {
  int rank = 0;  // among the processes of this host
  int size = 1;
};

// This process's rank among the processes of its host (MPI_COMM_TYPE_SHARED), as NcclMpiWorld
// computes it. Collective over MPI_COMM_WORLD.
StatusOr<NodeRank> NodeLocalRank(int world_rank) {
  MPI_Comm local = MPI_COMM_NULL;
  const int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS) {
    return InternalError("RunWorld: MPI_Comm_split_type failed on rank " + std::to_string(world_rank) + " (code " +
                         std::to_string(rc) + ")");
  }
  NodeRank n;
  MPI_Comm_rank(local, &n.rank);
  MPI_Comm_size(local, &n.size);
  MPI_Comm_free(&local);
  return n;
}

}  // namespace

Status RunCudaWorldInProcess(int nproc, const RankFunction& fn) {
  if (nproc < 1) return InvalidArgumentError("--nproc must be >= 1, got " + std::to_string(nproc));
  MF_ASSIGN_OR_RETURN(int gpus, VisibleGpus("an in-process world of " + Ranks(nproc)));
  MF_ASSIGN_OR_RETURN(GpuPlacement p, PlaceRanksOnGpus(nproc, gpus));
  if (p.kind == GpuWorldKind::kNccl) return RunNcclInProcess(p, fn);
  return RunStagedInProcess(p, fn);
}

StatusOr<ProcessWorld> CudaProcessWorld(const ExternalLaunch& launch) {
  const std::string who = launch.launcher + " rank " + std::to_string(launch.rank);
  MF_ASSIGN_OR_RETURN(int gpus, VisibleGpus(who));  // before MPI starts: returned, not aborted
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> mpi, MpiWorld());
  MF_ASSIGN_OR_RETURN(NodeRank node, NodeLocalRank(mpi->rank()));
  MF_ASSIGN_OR_RETURN(GpuPlacement p, PlaceRanksOnGpus(node.size, gpus));
  // Every rank must join the same backend: staged as soon as one host has more processes than GPUs.
  int64_t staged = p.kind == GpuWorldKind::kStaged ? 1 : 0;
  MF_RETURN_IF_ERROR(mpi->AllReduce(&staged, &staged, 1, DType::kI64, ReduceOp::kMax));
  if (staged == 0) {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<NcclCommunicator> nccl, NcclMpiWorld());
    return ProcessWorld{std::move(nccl), /*concurrent_communicators=*/false, /*collectives_call_mpi=*/false};
  }
  const Device gpu = Device::Cuda(p.ordinals[static_cast<size_t>(node.rank)]);
  MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> world, StagedCommunicator::Create(std::move(mpi), gpu));
  return ProcessWorld{std::move(world), MpiThreadMultiple(), /*collectives_call_mpi=*/true};
}

namespace {

[[maybe_unused]] const bool kCudaWorldRegistered =
    RegisterCudaWorldFactory(CudaWorldFactory{&RunCudaWorldInProcess, &CudaProcessWorld});

}  // namespace
}  // namespace meshflow
