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
// has it), after checking that MPI agrees with the environment's rank and size. The same binary
// with the same flags therefore runs either way:
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
// NCCL worlds (GPUs) are not started here yet.
//
// Errors (INVALID_ARGUMENT naming the variable and value): a launcher variable that is not a
// non-negative integer, a rank >= size, a size < 1, a local rank >= size; --nproc < 1; --nproc
// given (explicit_nproc) under a launcher with another size than the launcher's ("--nproc 4 but
// mpirun started 2 processes"). RunWorld: MPI's rank or size differing from the environment's
// (FAILED_PRECONDITION), MPI start-up failures.
#ifndef MESHFLOW_LAUNCH_WORLD_H_
#define MESHFLOW_LAUNCH_WORLD_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"

namespace meshflow {

// Where a rank is and how big the world is.
struct RankInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes of this host (in-process: = rank)
  // Whether separate communicators (e.g. a Split for a background checkpoint writer) may be used
  // from different threads at the same time: always in-process; under MPI only with
  // MPI_THREAD_MULTIPLE (MpiThreadMultiple()).
  bool concurrent_communicators = true;
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

// Runs fn once per rank (see the banner).
Status RunWorld(const LaunchMode& mode, const std::function<Status(Communicator& world, const RankInfo& me)>& fn);

}  // namespace meshflow

#endif  // MESHFLOW_LAUNCH_WORLD_H_
