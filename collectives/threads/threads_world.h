// ThreadWorld: the in-process "threads" backend of Communicator.
//
// A ThreadWorld is a world of N ranks that run as N threads of this process. Run() starts one
// thread per rank, hands each its world communicator (group = all ranks, rank i = world rank i),
// and joins them. Collectives move data through shared memory: no serialization, no copies
// beyond the one into the destination buffer.
//
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(4));
//   MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
//     std::vector<float> x(8, static_cast<float>(comm.rank()));
//     MF_RETURN_IF_ERROR(comm.AllReduce(x.data(), x.data(), 8, DType::kF32, ReduceOp::kSum));
//     MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> row, comm.Split(comm.rank() / 2, comm.rank()));
//     return row->Barrier();
//   }));
//   ByteCounters c = world->counters(0);   // {bytes_sent = 48, bytes_received = 48}
//
// Protocol. Every collective is a rendezvous of the group: each rank posts its pointers, counts,
// collective kind, dtype, op and root and waits for all members (phase 1, with the timeout). Every
// rank then validates all posts (kind, dtype, op, root, counts agree pairwise), reads directly from
// its peers' buffers, and waits on a second barrier so that nobody returns (and frees or reuses its
// buffers) while peers still read them. The second barrier has no timeout: only ranks that all
// passed phase 1 reach it, and between the two barriers they run library code only.
// When a rank's destination buffer overlaps its own source buffer (in-place use), results are
// staged in a temporary and written after the second barrier, so in-place calls are always safe.
//
// Algorithms and byte counters (per world rank, es = dtype size, n = group size, me = group rank).
// A rank counts as received the bytes it reads from other ranks' buffers, and the peer that owned
// them counts the same bytes as sent; self-copies are not counted. Split and Barrier move no
// payload (0 bytes).
//   AllGatherV      received: sum over q != me of counts[q] * es
//   ReduceScatterV  received: (n-1) * counts[me] * es   (me reduces its block reading all peers)
//   AllReduce       reduce-scatter + all-gather over n torch.chunk chunks of the count
//                   (chunk = ceil(count/n), chunk c = [c*chunk, min(count, (c+1)*chunk))); the
//                   rank reduces its chunk reading all peers in rank order, then gathers the others:
//                   received (n-1)*|chunk me| + (count - |chunk me|) elements, as a ring algorithm
//                   (2(n-1)/n * count up to chunk rounding); equals planner/cost_model.h.
//   AllToAllV       received: sum over s != me of recv_counts[s] * es
//   Broadcast       non-root ranks receive count * es; the root sends count * es to each of them
//   SendRecv        bytes of each non-self receive / send
//
// SendRecv is point to point (only the ranks named as peers take part): every call first posts
// all its sends in per-(sender, receiver) FIFO mailboxes, then takes its receives in the order
// given (the k-th receive from peer p matches the k-th send to this rank by p), copying from the
// sender's buffer; the sender returns only after every one of its sends has been copied. Sends to
// self match receives from self in order.
//
// Errors. InvalidArgument for bad arguments (names the value). FailedPrecondition for a mismatch
// between members (names both ranks and both values). DeadlineExceeded when a wait exceeds
// ThreadWorldOptions::timeout: the message names the collective ("all_reduce", ...), the group (its
// world ranks) and the group ranks that did not arrive (or the SendRecv peer). After a timeout or a
// mismatch the group is broken: later calls on it fail fast with Aborted. When a rank's function
// returns an error, Run aborts the world: every group of this Run is broken, so peers blocked in
// (or later entering) a collective get Aborted naming the failing rank instead of waiting for the
// timeout.
//
// Call checks. Each collective posts its per-communicator sequence number and, with
// ThreadWorldOptions::check_call_sites (default), its call site (the `where` of the Communicator
// call); the members compare them with the arguments before any data moves, so a rank that
// skipped, repeated or reordered a collective fails every member with FailedPrecondition naming both
// call sites and sequence numbers (collectives/call_check.h), never with wrong values.
//
// Watchdog. A rank that does not reach a collective within the timeout is named (DeadlineExceeded,
// "group ranks [1] (world ranks [1]) did not arrive") on every member waiting for it. Once a Run
// has failed (a rank returned an error or threw, or a group broke on a timeout or a mismatch), the
// ranks still running get one more timeout to return; a rank that does not (stuck outside the
// library, e.g. in user code, where it cannot be interrupted) is abandoned: its thread is detached
// and keeps running until the function returns on its own (its later collectives fail at once with
// Aborted, since its groups are broken), Run returns DeadlineExceeded naming the stuck ranks and the
// first error, and the world is broken: every later Run fails with FailedPrecondition. Whatever the
// function uses by reference must outlive such a thread. A run whose ranks all return OK (no failure)
// waits for them however long they compute. An exception thrown by a rank's function is caught in
// its thread and becomes that rank's status (Internal, "the rank's function threw an exception:
// <what()>"), which aborts the world like any error.
//
// Thread safety: a Communicator is used by its own rank's thread only. Run calls on one world are
// serialized; counters() and ResetCounters() may be called at any time.
#ifndef MESHFLOW_COLLECTIVES_THREADS_THREADS_WORLD_H_
#define MESHFLOW_COLLECTIVES_THREADS_THREADS_WORLD_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"

namespace meshflow {

namespace threads_internal {
struct CounterTable;
}  // namespace threads_internal

struct ThreadWorldOptions {
  // Bound on every blocking wait (rendezvous of a collective, a SendRecv receive or completion).
  std::chrono::milliseconds timeout{30000};
  // Compare every member's call site (file:line of the Communicator call) before each collective;
  // a rank that skipped or reordered a collective then fails every member with FailedPrecondition
  // naming both call sites (communicator.h). Off: only sequence numbers and arguments are compared.
  bool check_call_sites = true;
};

class ThreadWorld {
 public:
  // Errors: n < 1, timeout <= 0 (InvalidArgument).
  static StatusOr<std::unique_ptr<ThreadWorld>> Create(int n, ThreadWorldOptions opts = {});

  ~ThreadWorld();
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;

  int size() const { return n_; }
  const ThreadWorldOptions& options() const { return options_; }

  // Runs fn on n threads, thread i with the world communicator of rank i (communicators from
  // Split are valid during this Run only). Returns OK, or the first non-OK status in rank order
  // with context "rank i: ...". A non-OK return of any rank aborts this Run's groups (see above).
  // Each Run starts with fresh, unbroken groups; byte counters persist across runs.
  // Errors: fn is empty (InvalidArgument); a rank did not return within the timeout after the run
  // failed (DeadlineExceeded naming it; the world is then broken, see "Watchdog"); the world is
  // broken by such an earlier Run (FailedPrecondition).
  Status Run(std::function<Status(Communicator& world_comm)> fn);

  // Bytes sent / received by `world_rank` since the last reset, over all communicators and runs.
  // Precondition: 0 <= world_rank < size() (asserted; returns zeros otherwise).
  ByteCounters counters(int world_rank) const;
  // Resets every rank's counters.
  void ResetCounters();

 private:
  ThreadWorld(int n, ThreadWorldOptions opts);

  int n_;
  ThreadWorldOptions options_;
  std::shared_ptr<threads_internal::CounterTable> counters_;
  std::mutex run_mu_;
  Status broken_;  // set (under run_mu_) when a Run abandoned a rank thread
};

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_THREADS_THREADS_WORLD_H_
