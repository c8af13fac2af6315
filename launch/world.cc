#include "meshflow/launch/world.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

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

}  // namespace

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

Status RunWorld(const LaunchMode& mode, const std::function<Status(Communicator& world, const RankInfo& me)>& fn) {
  if (const InProcess* p = std::get_if<InProcess>(&mode)) {
    if (p->nproc < 1) return InvalidArgumentError("--nproc must be >= 1, got " + std::to_string(p->nproc));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(p->nproc));
    return world->Run([&](Communicator& comm) -> Status {
      const RankInfo me{comm.world_rank(), comm.size(), comm.world_rank(), true};
      return fn(comm, me);
    });
  }
  const ExternalLaunch& e = std::get<ExternalLaunch>(mode);
  StatusOr<std::shared_ptr<Communicator>> world = MpiWorld();
  if (!world.ok()) MpiAbort(world.status().WithContext("rank " + std::to_string(e.rank) + ": starting MPI"));
  Communicator& comm = **world;
  if (comm.rank() != e.rank || comm.size() != e.size) {
    MpiAbort(FailedPreconditionError("the " + e.launcher + " environment says rank " + std::to_string(e.rank) + " of " +
                                     std::to_string(e.size) + " but MPI says rank " + std::to_string(comm.rank()) +
                                     " of " + std::to_string(comm.size())));
  }
  const RankInfo me{e.rank, e.size, e.local_rank, MpiThreadMultiple()};
  const Status s = fn(comm, me);
  if (!s.ok()) MpiAbort(s.WithContext("rank " + std::to_string(e.rank)));
  world->reset();
  return MpiFinalize();
}

}  // namespace meshflow
