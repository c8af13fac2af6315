// Fault injection for the MPI backend, run by mpi_fault_test.sh under mpirun:
//
//   mpi_fault_test_main MODE TIMEOUT_MS
//
// Every rank does a warm-up all_reduce, then rank 1 misbehaves while the others enter a second
// all_reduce on the world. MODE:
//   exit    rank 1 calls exit(3) without MPI_Finalize
//   kill    rank 1 kills itself with SIGKILL (a crash)
//   stall   rank 1 sleeps (outside MPI) far longer than TIMEOUT_MS
//   error   rank 1 hits an error and ends the job with MpiAbort(status, 4)
// A rank whose collective fails prints the error and calls MpiAbort(status, 2), as any meshflow MPI
// program should. The wrapper checks that mpirun ends non-zero within a bounded time and, for
// stall, that the others report DEADLINE_EXCEEDED naming the collective and rank 1.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "meshflow/collectives/mpi/mpi_communicator.h"

namespace meshflow {
namespace {

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s exit|kill|stall|error TIMEOUT_MS\n", argv[0]);
    return 64;
  }
  const std::string mode = argv[1];
  MpiOptions opts;
  opts.timeout = std::chrono::milliseconds(std::atoi(argv[2]));
  MpiFinalizeGuard finalize;
  auto world_or = MpiWorld(opts);
  if (!world_or.ok()) MpiAbort(world_or.status());
  Communicator& world = **world_or;
  std::vector<float> x(1000, static_cast<float>(world.rank()));
  Status s = world.AllReduce(x.data(), x.data(), 1000, DType::kF32, ReduceOp::kSum);
  if (!s.ok()) MpiAbort(s, 2);
  std::printf("rank %d: warm-up all_reduce ok\n", world.rank());
  std::fflush(stdout);
  if (world.rank() == 1) {
    if (mode == "exit") {
      std::fprintf(stderr, "rank 1: exiting with code 3 before the all_reduce\n");
      std::exit(3);
    } else if (mode == "kill") {
      std::fprintf(stderr, "rank 1: killing itself with SIGKILL\n");
      std::fflush(stderr);
      std::raise(SIGKILL);
    } else if (mode == "stall") {
      std::fprintf(stderr, "rank 1: stalling outside MPI\n");
      std::fflush(stderr);
      sleep(600);
    } else if (mode == "error") {
      MpiAbort(InternalError("rank 1: injected failure before the all_reduce"), 4);
    } else {
      MpiAbort(InvalidArgumentError("unknown mode " + mode), 64);
    }
  }
  s = world.AllReduce(x.data(), x.data(), 1000, DType::kF32, ReduceOp::kSum);
  if (!s.ok()) MpiAbort(s, 2);
  std::printf("rank %d: second all_reduce completed (unexpected)\n", world.rank());
  return 0;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
