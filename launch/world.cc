#include "meshflow/launch/world.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "meshflow/base/parse.h"
#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/collectives/threads/threads_world.h"

namespace meshflow {
namespace {

struct LauncherVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
};

constexpr LauncherVars kLaunchers[] = {
    {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

StatusOr<int> IntVar(const EnvLookup& env, const char* name, const char* launcher) {
  const std::optional<std::string> v = env(name);
  if (!v) return InvalidArgumentError(std::string(launcher) + " launch: " + name + " is not set");
  StatusOr<int64_t> n = ParseInt64(*v, name);
  if (!n.ok() || *n < 0 || *n > (int64_t{1} << 30)) {
    return InvalidArgumentError(std::string(launcher) + " launch: " + name + "='" + *v +
                                "' is not a non-negative integer");
  }
  return static_cast<int>(*n);
}

struct FactoryRegistry {
  std::mutex mu;
  CudaWorldFactory factory;
};

FactoryRegistry& Registry() {
  static FactoryRegistry* r = new FactoryRegistry;  // never destroyed (static registration)
  return *r;
}

// The registered factory, or UNAVAILABLE saying how to get one.
StatusOr<CudaWorldFactory> CudaFactory() {
  FactoryRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.factory.run_in_process == nullptr || r.factory.process_world == nullptr) {
    return UnavailableError(
        "RunWorld: ranks on CUDA devices were asked for, but this program was built without CUDA support: link "
        "//launch:cuda_world (declared where a CUDA toolkit is found; third_party/cuda.bzl)");
  }
  return r.factory;
}

bool MpiStarted() {
  int init = 0;
  return MPI_Initialized(&init) == MPI_SUCCESS && init != 0;
}

std::string ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "thread level " + std::to_string(level);
  }
}

// FAILED_PRECONDITION when MPI provides less than MPI_THREAD_SERIALIZED (see the banner).
Status CheckMpiThreadLevel() {
  int level = MPI_THREAD_SINGLE;
  if (MPI_Query_thread(&level) != MPI_SUCCESS) return InternalError("RunWorld: MPI_Query_thread failed");
  if (level >= MPI_THREAD_SERIALIZED) return Status::Ok();
  return FailedPreconditionError("RunWorld: MPI provides " + ThreadLevelName(level) +
                                 ", but a rank's communication stream calls MPI from a worker thread: "
                                 "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE is needed");
}

Status RunInProcess(int nproc, const WorldOptions& options, const RankFunction& fn) {
  if (nproc < 1) return InvalidArgumentError("--nproc must be >= 1, got " + std::to_string(nproc));
  if (options.device == WorldDevice::kCuda) {
    MF_ASSIGN_OR_RETURN(CudaWorldFactory factory, CudaFactory());
    return factory.run_in_process(nproc, fn);
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(nproc));
  return world->Run([&](Communicator& comm) -> Status {
    const RankInfo me{comm.world_rank(), comm.size(), comm.world_rank(), true, Device::Host()};
    return fn(comm, me);
  });
}

// This process's world under a launcher: MPI (host), or the CUDA factory's.
StatusOr<ProcessWorld> ConnectProcess(const ExternalLaunch& e, const WorldOptions& options) {
  if (options.device == WorldDevice::kCuda) {
    MF_ASSIGN_OR_RETURN(CudaWorldFactory factory, CudaFactory());
    return factory.process_world(e);
  }
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> mpi, MpiWorld());
  return ProcessWorld{std::move(mpi), MpiThreadMultiple(), /*collectives_call_mpi=*/true};
}

// ConnectProcess, then the thread-level check. Errors before MPI is started are returned; later
// ones end the job.
StatusOr<ProcessWorld> StartProcessWorld(const ExternalLaunch& e, const WorldOptions& options) {
  const std::string rank = "rank " + std::to_string(e.rank);
  StatusOr<ProcessWorld> world = ConnectProcess(e, options);
  if (!world.ok()) {
    if (!MpiStarted()) return world.status().WithContext(rank);
    MpiAbort(world.status().WithContext(rank + ": starting the world"));
  }
  if (world->collectives_call_mpi) {
    const Status level = CheckMpiThreadLevel();
    if (!level.ok()) MpiAbort(level.WithContext(rank));
  }
  return world;
}

Status RunExternal(const ExternalLaunch& e, const WorldOptions& options, const RankFunction& fn) {
  MF_ASSIGN_OR_RETURN(ProcessWorld world, StartProcessWorld(e, options));
  Communicator& comm = *world.world;
  if (comm.rank() != e.rank || comm.size() != e.size) {
    MpiAbort(FailedPreconditionError("the " + e.launcher + " environment says rank " + std::to_string(e.rank) + " of " +
                                     std::to_string(e.size) + " but its " + comm.backend() + " world says rank " +
                                     std::to_string(comm.rank()) + " of " + std::to_string(comm.size())));
  }
  const RankInfo me{e.rank, e.size, e.local_rank, world.concurrent_communicators, comm.device()};
  const Status s = fn(comm, me);
  if (!s.ok()) MpiAbort(s.WithContext("rank " + std::to_string(e.rank)));
  world.world.reset();
  return MpiFinalize();
}

}  // namespace

std::string_view WorldDeviceName(WorldDevice device) {
  return device == WorldDevice::kCuda ? "cuda" : "host";
}

StatusOr<GpuPlacement> PlaceRanksOnGpus(int ranks, int visible_gpus) {
  if (ranks < 1) return InvalidArgumentError("PlaceRanksOnGpus: ranks must be >= 1, got " + std::to_string(ranks));
  if (visible_gpus < 1) {
    return UnavailableError("PlaceRanksOnGpus: no visible GPU for " + std::to_string(ranks) + " rank" +
                            (ranks == 1 ? "" : "s") + " (" + std::to_string(visible_gpus) + " visible)");
  }
  GpuPlacement p;
  p.kind = ranks <= visible_gpus ? GpuWorldKind::kNccl : GpuWorldKind::kStaged;
  p.ordinals.reserve(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) p.ordinals.push_back(r % visible_gpus);
  return p;
}

bool RegisterCudaWorldFactory(CudaWorldFactory factory) {
  FactoryRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.factory.run_in_process == nullptr) r.factory = factory;
  return true;
}

std::optional<std::string> SystemEnv(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

StatusOr<LaunchMode> DetectLaunch(const EnvLookup& env, int nproc, bool explicit_nproc) {
  if (nproc < 1) return InvalidArgumentError("--nproc must be >= 1, got " + std::to_string(nproc));
  for (const LauncherVars& l : kLaunchers) {
    if (!env(l.rank)) continue;
    MF_ASSIGN_OR_RETURN(int rank, IntVar(env, l.rank, l.launcher));
    MF_ASSIGN_OR_RETURN(int size, IntVar(env, l.size, l.launcher));
    int local = rank;
    if (env(l.local_rank)) {
      MF_ASSIGN_OR_RETURN(local, IntVar(env, l.local_rank, l.launcher));
    }
    if (size < 1) return InvalidArgumentError(std::string(l.launcher) + " launch: " + l.size + "=0");
    if (rank >= size) {
      return InvalidArgumentError(std::string(l.launcher) + " launch: " + l.rank + "=" + std::to_string(rank) +
                                  " is not below " + l.size + "=" + std::to_string(size));
    }
    if (local >= size) {
      return InvalidArgumentError(std::string(l.launcher) + " launch: " + l.local_rank + "=" + std::to_string(local) +
                                  " is not below " + l.size + "=" + std::to_string(size));
    }
    if (explicit_nproc && nproc != size) {
      return InvalidArgumentError("--nproc " + std::to_string(nproc) + " but the " + l.launcher + " launcher started " +
                                  std::to_string(size) + " process" + (size == 1 ? "" : "es") +
                                  " (under a launcher, leave --nproc out or make it equal)");
    }
    return LaunchMode(ExternalLaunch{l.launcher, rank, size, local});
  }
  return LaunchMode(InProcess{nproc});
}

std::string Describe(const LaunchMode& mode) {
  if (const InProcess* p = std::get_if<InProcess>(&mode)) {
    return "in-process world of " + std::to_string(p->nproc) + " thread" + (p->nproc == 1 ? "" : "s");
  }
  const ExternalLaunch& e = std::get<ExternalLaunch>(mode);
  return e.launcher + " job, rank " + std::to_string(e.rank) + " of " + std::to_string(e.size) + " (local rank " +
         std::to_string(e.local_rank) + ")";
}

Status RunWorld(const LaunchMode& mode, const RankFunction& fn) { return RunWorld(mode, WorldOptions{}, fn); }

Status RunWorld(const LaunchMode& mode, const WorldOptions& options, const RankFunction& fn) {
  if (const InProcess* p = std::get_if<InProcess>(&mode)) return RunInProcess(p->nproc, options, fn);
  return RunExternal(std::get<ExternalLaunch>(mode), options, fn);
}

}  // namespace meshflow
