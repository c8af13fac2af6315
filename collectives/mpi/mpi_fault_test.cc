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
//   skip    rank 1 skips the second all_reduce (its third one matches the others' second): every
//           rank must fail with FailedPrecondition naming both call sites, before any data moves;
//           each prints its error and whether its buffer was written ("buffer untouched: yes")
//   skip_last  rank 1 skips the last all_reduce and returns from main (MpiFinalizeGuard): the others
//           time out naming it and abort; rank 1 must not sit in MPI_Finalize (mpirun must end)
//   late_finalize  rank 1 stalls outside MPI while the others return from main: their
//           MpiFinalizeGuard must give up after 2 x TIMEOUT_MS and abort the job (not hang)
// A rank whose collective fails prints the error and calls MpiAbort(status, 2), as any meshflow MPI
// program should. The wrapper checks that mpirun ends non-zero within a bounded time and, for
// stall, that the others report DEADLINE_EXCEEDED naming the collective and rank 1.
#include <unistd.h>

#include <algorithm>
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
    std::fprintf(stderr, "usage: %s exit|kill|stall|error|skip|skip_last|late_finalize TIMEOUT_MS\n", argv[0]);
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
  // Every all_reduce sums rank numbers: the exact result is n(n-1)/2.
  const float expected = static_cast<float>(world.size() * (world.size() - 1) / 2);
  // `where` passes the caller's line on, so that each call of reduce is its own call site.
  auto reduce = [&](const char* which, CallerSite where = CallerSite::Current()) {
    std::vector<float> y(1000, static_cast<float>(world.rank()));
    const Status st = world.AllReduce(y.data(), y.data(), 1000, DType::kF32, ReduceOp::kSum, where);
    if (!st.ok() && mode == "skip") {
      // Every rank refuses the same call: each says so, and whether its buffer was written, before
      // the first one aborts the job (the raw MPI barrier keeps mpirun from killing a rank that
      // has not printed yet).
      const bool untouched = std::all_of(y.begin(), y.end(), [&](float v) { return v == world.rank(); });
      std::printf("rank %d: refused the %s all_reduce: %s; buffer untouched: %s\n", world.rank(), which,
                  st.ToString().c_str(), untouched ? "yes" : "NO");
      std::fflush(stdout);
      MPI_Barrier(MPI_COMM_WORLD);
    }
    if (!st.ok()) MpiAbort(st, 2);
    for (float v : y) {
      if (v != expected) {
        std::printf("rank %d: wrong value %g (expected %g) after the %s all_reduce\n", world.rank(), v, expected,
                    which);
        std::fflush(stdout);
        MpiAbort(InternalError("wrong values"), 5);
      }
    }
  };
  if (mode == "late_finalize") {
    if (world.rank() == 1) {
      std::fprintf(stderr, "rank 1: stalling outside MPI instead of finalizing\n");
      std::fflush(stderr);
      sleep(600);
    }
    return 0;
  }
  if (mode == "skip" || mode == "skip_last") {
    if (mode == "skip_last" && world.rank() == 1) {
      std::fprintf(stderr, "rank 1: skipping the last all_reduce and finalizing\n");
      return 0;
    }
    if (mode == "skip" && world.rank() != 1) reduce("second");
    reduce("third");
    std::printf("rank %d: all_reduce after the skip completed (unexpected)\n", world.rank());
    return 0;
  }
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
