// Starting a world without boilerplate: one entry point for an in-process world of threads and
// for a job started by mpirun / srun / any PMI launcher (torchrun's role).
//
// DetectLaunch reads the environment the launchers set (first match wins):
//   OpenMPI mpirun      OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH / Hydra PMI   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
//   Slurm srun          SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// and returns ExternalLaunch{launcher, rank, size, local_rank}; without any of them the program
// was started plainly and gets InProcess{nproc} (the --nproc flag; default 1). RunWorld then runs
// `fn` once per rank: in-process, on `nproc` threads of a ThreadWorld
// (collectives/threads/threads_world.h); under a launcher, once in this process on the MPI world
// (collectives/mpi/mpi_communicator.h; MPI initialized with MPI_THREAD_MULTIPLE where the library
// has it; see "MPI thread level" below), after checking that MPI agrees with the environment's
// rank and size. The same binary with the same flags therefore runs either way:
//
//   ./train --nproc 4                      # 4 thread ranks in this process
//   mpirun -np 4 ./train                   # 4 processes, one rank each
//
//   MF_ASSIGN_OR_RETURN(LaunchMode mode, DetectLaunch(SystemEnv, /*nproc=*/4));
//   MF_RETURN_IF_ERROR(RunWorld(mode, [&](Communicator& world, const RankInfo& me) -> Status {
//     // me.rank, me.size, me.local_rank; world is the world communicator of this rank
//     return Status::Ok();
//   }));
//
// Under a launcher a failing rank cannot simply return: its peers would wait for it. RunWorld
// prints "rank R: <error>" and ends the job with MpiAbort (mpirun then stops every rank and exits
// non-zero); a successful run finalizes MPI (collectively) and returns OK. In-process, RunWorld
// returns the first failing rank's status with context "rank R", like ThreadWorld::Run.
//
// Ranks on GPUs. RunWorld(mode, WorldOptions{.device = WorldDevice::kCuda}, fn) puts every rank on
// a CUDA device: the communicator handed to fn has device() == me.device, so
// RankContext::Create(world, mesh) (runtime/rank_context.h) runs the rank on its GPU. Where the
// ranks go (PlaceRanksOnGpus; launch/cuda_world.h has the details and the costs):
//   in-process, nproc <= visible GPUs   NcclWorld, rank r on GPU r (backend "nccl")
//   in-process, nproc > visible GPUs    ThreadWorld whose ranks are StagedCommunicators on GPU
//                                       r % GPUs ("threads+staged": NCCL refuses two ranks on one GPU)
//   launcher, no host has more          NCCL over MPI (the unique id broadcast over MPI), node-local
//   processes than GPUs                 rank l on GPU l % GPUs ("nccl")
//   launcher, some host has more        MPI + StagedCommunicator on GPU l % GPUs ("mpi+staged")
// The CUDA worlds come from //launch:cuda_world, which registers itself when linked (a
// cuda_cc_library, declared where a CUDA toolkit was found); //launch:world has no CUDA
// dependency. In a program built without it, a CUDA world is UNAVAILABLE:
//
//   // BUILD: deps = ["//launch:world"] + if_cuda(["//launch:cuda_world"])   (third_party/cuda.bzl)
//   const WorldOptions gpus{.device = WorldDevice::kCuda};
//   MF_RETURN_IF_ERROR(RunWorld(mode, gpus, [&](Communicator& world, const RankInfo& me) -> Status {
//     // me.device: this rank's GPU (cuda:N), world.device() == me.device
//     return Status::Ok();
//   }));
//
// MPI thread level. Under a launcher, host ranks call MPI from more than one thread, never at
// once: the rank's communication stream is a worker thread on the host (runtime/rank_context.h),
// and the rank's thread uses the communicator directly between collectives. That needs
// MPI_THREAD_SERIALIZED (FUNNELED is not enough). Staged ranks call MPI from the rank's thread (a
// CUDA stream runs its work on the caller's thread), where FUNNELED would do; RunWorld asks
// SERIALIZED of both: MPI is initialized asking for MPI_THREAD_MULTIPLE, and RunWorld ends the job
// (FAILED_PRECONDITION) when the library provides less than MPI_THREAD_SERIALIZED.
// RankInfo::concurrent_communicators (a background checkpoint writer on its own communicator)
// needs MPI_THREAD_MULTIPLE. NCCL ranks enqueue their NCCL calls from the rank's thread and use MPI
// only on the main thread (start-up, the unique id, MPI_Finalize), so any level does; their
// concurrent_communicators is false: NCCL collectives of two communicators on the same GPUs issued
// concurrently by two threads can deadlock (their kernels wait for each other across ranks), so
// checkpoint saves are synchronous there.
//
// Errors (INVALID_ARGUMENT naming the variable and value): a launcher variable that is not a
// non-negative integer, a rank >= size, a size < 1, a local rank >= size; --nproc < 1; --nproc
// given (explicit_nproc) under a launcher with another size than the launcher's ("--nproc 4 but
// mpirun started 2 processes"). RunWorld: MPI's rank or size differing from the environment's
// (FAILED_PRECONDITION), an MPI thread level below MPI_THREAD_SERIALIZED (FAILED_PRECONDITION),
// MPI start-up failures. CUDA worlds: a program without //launch:cuda_world (UNAVAILABLE "built
// without CUDA support: link //launch:cuda_world"), no visible GPU (UNAVAILABLE naming
// cudaGetDeviceCount's result), NCCL / CUDA start-up failures.
#ifndef MESHFLOW_LAUNCH_WORLD_H_
#define MESHFLOW_LAUNCH_WORLD_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/runtime/device.h"

namespace meshflow {

// Where a rank is and how big the world is.
struct RankInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes of this host (in-process: = rank)
  // Whether separate communicators (e.g. a Split for a background checkpoint writer) may be used
  // from different threads at the same time: always in-process; under MPI only with
  // MPI_THREAD_MULTIPLE (MpiThreadMultiple()); never on NCCL (see "MPI thread level").
  bool concurrent_communicators = true;
  // Where the rank's buffers live: the host, or its GPU (= the world communicator's device()).
  Device device = Device::Host();
};

// Where the ranks of a world run.
enum class WorldDevice {
  kHost,  // threads in-process, MPI under a launcher (host buffers)
  kCuda,  // one CUDA device per rank, shared when there are fewer GPUs than ranks (see the banner)
};

// "host" / "cuda".
std::string_view WorldDeviceName(WorldDevice device);

struct WorldOptions {
  WorldDevice device = WorldDevice::kHost;
};

struct InProcess {
  int nproc = 1;
};

struct ExternalLaunch {
  std::string launcher;  // "OpenMPI", "PMI", "Slurm"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
};

using LaunchMode = std::variant<InProcess, ExternalLaunch>;

// Environment lookup: the value of a variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;
// std::getenv.
std::optional<std::string> SystemEnv(std::string_view name);

// See the banner. `nproc` is the --nproc value; `explicit_nproc` says whether the user gave it
// (only then must it match a launcher's size).
StatusOr<LaunchMode> DetectLaunch(const EnvLookup& env, int nproc, bool explicit_nproc = false);

// "in-process world of 4 threads" / "OpenMPI job, rank 1 of 4 (local rank 1)".
std::string Describe(const LaunchMode& mode);

// What RunWorld calls once per rank.
using RankFunction = std::function<Status(Communicator& world, const RankInfo& me)>;

// Runs fn once per rank (see the banner). The first form is RunWorld(mode, WorldOptions{}, fn):
// ranks on the host.
Status RunWorld(const LaunchMode& mode, const RankFunction& fn);
Status RunWorld(const LaunchMode& mode, const WorldOptions& options, const RankFunction& fn);

// ---- Placement of ranks on GPUs (pure; applied by //launch:cuda_world) ----

enum class GpuWorldKind {
  kNccl,    // one GPU per rank: NCCL
  kStaged,  // ranks share GPUs: a host communicator wrapped in StagedCommunicators
};

struct GpuPlacement {
  GpuWorldKind kind = GpuWorldKind::kNccl;
  std::vector<int> ordinals;  // CUDA ordinal of (local) rank r: r % visible GPUs
};

// The placement of `ranks` ranks (in-process: the world; under a launcher: the processes of one
// host) on `visible_gpus` GPUs: NCCL when ranks <= visible_gpus, else staged. Errors: ranks < 1
// (INVALID_ARGUMENT), visible_gpus < 1 (UNAVAILABLE).
StatusOr<GpuPlacement> PlaceRanksOnGpus(int ranks, int visible_gpus);

// ---- For //launch:cuda_world (static registration, like RegisterCudaRuntimeFactory) ----

// This process's world communicator under a launcher, on its GPU.
struct ProcessWorld {
  std::shared_ptr<Communicator> world;
  bool concurrent_communicators = false;  // RankInfo::concurrent_communicators
  // The rank's collectives call MPI (host or staged ranks; not NCCL): RunWorld then requires
  // MPI_THREAD_SERIALIZED (see "MPI thread level").
  bool collectives_call_mpi = true;
};

struct CudaWorldFactory {
  // In-process: runs fn on nproc ranks on GPUs (InProcess{nproc}; nproc >= 1).
  Status (*run_in_process)(int nproc, const RankFunction& fn) = nullptr;
  // Under a launcher: this process's world. An error before MPI is started is returned by RunWorld;
  // after, it ends the job (MpiAbort).
  StatusOr<ProcessWorld> (*process_world)(const ExternalLaunch& launch) = nullptr;
};

// Installs the factory of CUDA worlds (one per process; later calls are ignored). Returns true
// (for static registration).
bool RegisterCudaWorldFactory(CudaWorldFactory factory);

}  // namespace meshflow

#endif  // MESHFLOW_LAUNCH_WORLD_H_
