// MpiCommunicator: the "mpi" backend of Communicator (one rank per process, OpenMPI or any MPI-3).
//
// Overview. MpiWorld() initializes MPI (MPI_Init_thread asking for MPI_THREAD_MULTIPLE, if the
// program has not done so), sets MPI_ERRORS_RETURN on MPI_COMM_WORLD and returns a communicator over a
// duplicate of MPI_COMM_WORLD (so meshflow's traffic never matches the program's own messages).
// Split() is MPI_Comm_split. A process finalizes with MpiFinalize() or an MpiFinalizeGuard in
// main, and ends a failed job with MpiAbort() (MPI_Abort on MPI_COMM_WORLD).
//
//   int main() {
//     meshflow::MpiFinalizeGuard finalize;  // MPI_Finalize when main returns
//     auto world = meshflow::MpiWorld();
//     if (!world.ok()) meshflow::MpiAbort(world.status());
//     std::vector<float> x(8, static_cast<float>((*world)->rank()));
//     meshflow::Status s = (*world)->AllReduce(x.data(), x.data(), 8, meshflow::DType::kF32,
//                                              meshflow::ReduceOp::kSum);
//     if (!s.ok()) meshflow::MpiAbort(s);   // the other ranks must not wait for this one
//   }
//   // mpirun -np 4 ./prog   (as root: mpirun --allow-run-as-root --oversubscribe -np 4 ./prog)
//
// Mapping to MPI (every collective is nonblocking MPI + an MPI_Test polling loop with a deadline):
//   AllGatherV      MPI_Iallgatherv
//   AllToAllV       MPI_Ialltoallv
//   Broadcast       MPI_Ibcast
//   Barrier         MPI_Ibarrier (implied by the header exchange when validation is on, see below)
//   ReduceScatterV  MPI_Ialltoallv (rank q receives block q of every other rank), then every rank
//                   reduces its block locally with ReduceBuffers (collectives/reduce.h) in
//                   group-rank order, reading its own block straight from `send`: deterministic
//                   always, and ~3x faster than OpenMPI 4.1's MPI_Reduce_scatter(_block) at 4-64 MiB
//                   on np 2 and 4 (bench/README.md), so there is no native variant
//   AllReduce       native (default): MPI_Iallreduce. deterministic: the threads backend's
//                   algorithm: MPI_Ialltoallv of torch.chunk chunks (chunk = ceil(count/n); the own
//                   chunk is not sent to itself), local rank-order reduction of chunk `rank()`
//                   straight into recv, MPI_Iallgatherv with MPI_IN_PLACE
//   SendRecv        MPI_Irecv for every receive, MPI_Isend for every send, one polling wait;
//                   transfers to self are local copies
//   Split           header exchange (below), then MPI_Comm_split (every member has arrived, so the
//                   blocking call cannot wait for an absent rank)
// Native and deterministic all-reduce. MPI's own MPI_Iallreduce is the fastest all-reduce on a
// given machine but uses implementation-chosen association orders (trees, rings), so float sums
// differ from the threads backend in the last bits. MpiOptions::deterministic = true makes it a
// rank-order fold with collectives/reduce.h (the threads backend's bits; bytes moved exactly as
// its header counts; planner/cost_model.h), for tests that compare backends bitwise and for
// reproducible runs. Native covers f32, f64, i32 and i64 with sum, max and min, and avg of f32 /
// f64 (an MPI sum divided by the group size, as ReduceBuffers divides its sum); bf16 (no MPI type)
// and integer avg (truncation of the wide sum) always take the rank-order path. Integer sums, max
// and min are equal either way (modular sums do not depend on the order); NaN propagation in
// native max / min follows the MPI library. ReduceScatterV is always the rank-order fold (above).
//
// Validation (MpiOptions::validate, on by default). Before its payload, every collective exchanges a
// small header with every other member (MPI_Isend/MPI_Irecv, tag kHeaderTag): a per-communicator
// sequence number, the collective kind, dtype, op, root / count, and the count vectors. Every rank
// checks all headers the same way, so every rank returns the same FailedPrecondition on a mismatch
// (naming both ranks and values) instead of corrupting memory or hanging in MPI; a rank that skipped a
// collective shows up as a mismatch with its next collective, or as a timeout (headers also carry a
// per-communicator sequence number, checked as a guard). Because each rank knows whose header
// arrived, a timeout names the group ranks that did not arrive. Header bytes are not payload and are not
// counted. With validate = false, mismatches are undefined (as in plain MPI) and timeouts cannot name
// the missing ranks. SendRecv is point to point and has no header (a count mismatch is detected by
// the receiver through MPI_Get_count; a dtype mismatch with equal byte sizes is not detected).
//
// Byte counters (per process = per world rank, summed over all MpiCommunicators of the process),
// identical to the threads backend (es = dtype size, n = group size, me = group rank; self-copies
// are not counted; Split and Barrier count 0):
//   AllGatherV      received sum_{q != me} counts[q]*es; sent (n-1)*counts[me]*es
//   ReduceScatterV  received (n-1)*counts[me]*es; sent sum_{q != me} counts[q]*es
//   AllReduce       received (n-1)*|chunk me| + (count - |chunk me|) elements (2(n-1)/n * count up
//                   to chunk rounding); sent sum_{c != me} |chunk c| + (n-1)*|chunk me| elements
//   AllToAllV       received sum_{s != me} recv_counts[s]*es; sent sum_{s != me} send_counts[s]*es
//   Broadcast       non-root: received count*es; root: sent (n-1)*count*es
//   SendRecv        bytes of each non-self receive / send
// Counters are updated when a call succeeds.
//
// Errors. InvalidArgument for bad arguments (checked locally, before any communication): wrong
// count-vector sizes, negative counts, null buffers with non-zero counts, bad roots or peers, and any
// element count or displacement above INT_MAX (MPI counts are int; the message says so: split such
// transfers). FailedPrecondition for a mismatch between members (header check, or a SendRecv whose
// sender and receiver disagree on the size). DeadlineExceeded when a wait exceeds MpiOptions::timeout:
// the message names the collective ("all_reduce", ...), the group (its world ranks), the waiting rank
// and the ranks that did not arrive (or, after the headers, the MPI call that did not complete).
// Internal for any other failing MPI call; every MPI return code is checked and the message names the
// MPI function, the MPI error string, the collective and the group. After a timeout or a mismatch the
// communicator is broken: later calls fail fast with Aborted naming the first error.
//
// Failure model. MPI cannot cancel a pending collective, so after a DeadlineExceeded the collective's
// requests stay posted: its internal buffers are deliberately leaked, and MPI may still read the
// caller's send buffer or write the caller's receive buffer if the missing peer arrives later. The
// caller must treat any error from this backend as fatal for the job and end it with MpiAbort() (what
// the tests do), which makes mpirun kill every rank. What the others see when one rank fails:
//   - it calls MpiAbort / MPI_Abort: mpirun kills the whole job at once (exit code = the abort code);
//   - it exits (exit(), a crash, a signal) without MPI_Finalize: mpirun detects it and kills the job
//     (exit code = that rank's code), usually within a second;
//   - it stalls outside MPI (or skips collectives): the others fail with DeadlineExceeded naming the
//     collective and the absent ranks after MpiOptions::timeout, then MpiAbort.
// No path waits forever: every wait in this file has a deadline. MpiFinalize enters MPI_Finalize
// only after an agreement with a deadline that every rank is finalizing (else it aborts the job), so
// a finalizing rank never races a peer's MPI_Abort: on any fatal error the job ends by MPI_Abort.
//
// Call sites. With validate and MpiOptions::check_call_sites (defaults), the header also carries the
// call site of the Communicator call (`where`: the last 40 characters of the file name and the line)
// and the sequence number: a rank that skipped, repeated or reordered a collective makes every member
// return FailedPrecondition naming both call sites ("mismatched call sites: group rank 0 (world 0) is
// at its collective #3 all_reduce called at train.cc:40, but group rank 1 (world 1) at #3 all_reduce
// called at train.cc:42; ...") before any payload moves; then every rank aborts (MpiAbort).
//
// Threading: MPI is initialized with MPI_THREAD_SERIALIZED; a communicator must be used by one thread
// at a time, and calls on different communicators must not overlap. counters() and ResetCounters()
// are atomic and may be called from any thread.
//
// Debugging: with MESHFLOW_MPI_TRACE set (mpirun -x MESHFLOW_MPI_TRACE=1 ...), every call prints its
// collective, group, sequence number and result to stderr.
//
// Launch: mpirun -np N prog; as root add --allow-run-as-root; with more ranks than cores add
// --oversubscribe (OpenMPI then yields while idle). The polling loop calls MPI_Test back to back and
// yields the core between tests (OpenMPI progresses nonblocking collectives only inside MPI calls,
// so sleeping would stall the transfer); after 20 ms of waiting for a late or stalled peer (the
// header exchange, or any wait with validation off) it sleeps with back-off up to 200 us so that
// oversubscribed ranks leave the cores to the ranks doing work. Once every member's header has
// arrived, the payload's wait only yields, however long the transfer takes.
// Staging buffers (ReduceScatterV, AllReduce, aliased inputs, headers) are pooled per
// communicator: steady-state calls allocate and zero nothing.
#ifndef MESHFLOW_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_
#define MESHFLOW_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"

namespace meshflow {

struct CallSite;  // collectives/call_check.h

struct MpiOptions {
  // Bound on every blocking wait of a call (header exchange + payload together).
  std::chrono::milliseconds timeout{60000};
  // Exchange and check a header before every collective (see the file comment).
  bool validate = true;
  // With validate: the header also carries the call site (the last 40 characters of the file name
  // and the line of the Communicator call), compared across ranks (communicator.h). Must be the
  // same on every rank.
  bool check_call_sites = true;
  // AllReduce bit-identical to the threads backend (a rank-order fold; see "Native and
  // deterministic all-reduce" above). Off: MPI_Iallreduce where it applies. Must be the same on
  // every rank.
  bool deterministic = false;
};

class MpiCommunicator final : public Communicator {
 public:
  // MPI tags used on meshflow's own communicators.
  static constexpr int kHeaderTag = 0x4d46;  // "MF"
  static constexpr int kDataTag = 0x4d47;

  // A communicator over a duplicate of `comm` (MPI_Comm_idup; collective over comm, bounded by
  // opts.timeout). The caller keeps ownership of `comm`. Requires MPI to be initialized.
  // Errors: MPI not initialized or finalized (FailedPrecondition), timeout <= 0 (InvalidArgument),
  // MPI failures (Internal), the duplication did not complete in time (DeadlineExceeded).
  static StatusOr<std::shared_ptr<MpiCommunicator>> Create(MPI_Comm comm, MpiOptions opts = {});

  // Frees the owned MPI communicator (unless MPI is already finalized).
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  int world_rank() const override { return world_ranks_[static_cast<size_t>(rank_)]; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::string backend() const override { return "mpi"; }
  // The stream-ordered overloads of the base class (hidden by the overrides below otherwise).
  using Communicator::AllGatherV;
  using Communicator::AllReduce;
  using Communicator::AllToAllStrided;
  using Communicator::AllToAllV;
  using Communicator::Broadcast;
  using Communicator::ReduceScatterV;
  using Communicator::SendRecv;

  Status AllGatherV(const void* send, int64_t send_count, void* recv, std::span<const int64_t> recv_counts,
                    DType dtype, CallerSite where = CallerSite::Current()) override;
  Status ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype, ReduceOp op,
                        CallerSite where = CallerSite::Current()) override;
  Status AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                   CallerSite where = CallerSite::Current()) override;
  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype,
                   CallerSite where = CallerSite::Current()) override;
  Status Broadcast(void* buffer, int64_t count, DType dtype, int root,
                   CallerSite where = CallerSite::Current()) override;
  Status Barrier(CallerSite where = CallerSite::Current()) override;
  Status SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) override;
  // The new communicator inherits this one's options.
  StatusOr<std::shared_ptr<Communicator>> Split(int color, int key,
                                                CallerSite where = CallerSite::Current()) override;

  ByteCounters counters() const override;
  void ResetCounters() override;

  // The owned MPI communicator (for interoperation; do not free it).
  MPI_Comm comm() const { return comm_; }
  const MpiOptions& options() const { return options_; }
  // OK, or the error that broke this communicator.
  const Status& broken() const { return broken_; }

 private:
  struct Header;
  class Call;
  // A staging buffer (uninitialized bytes). Calls take them from pool_ and give them back when they
  // complete, so steady-state collectives allocate nothing; buffers of a timed-out call are never
  // returned (MPI may still write them).
  struct Staging {
    std::unique_ptr<std::byte[]> data;
    int64_t bytes = 0;
  };
  static constexpr size_t kMaxPooledBuffers = 4;
  Staging TakeStaging(int64_t bytes) const;
  void ReturnStaging(Staging s) const;

  MpiCommunicator(MPI_Comm owned, int rank, std::vector<int> world_ranks, MpiOptions opts);

  // Names a call of this rank in messages ("mpi <what> on group [...] (world ranks)").
  CallSite Site(const char* what) const;
  std::string Describe(const char* what) const;
  std::string RankName(int r) const;
  // Runs `body` (a call's communication) unless this communicator is broken; errors break it.
  template <typename Body>
  Status Guarded(const char* what, Body&& body);
  // Posts this rank's header (assigning its sequence number), receives everyone's and checks them
  // (same verdict on every rank). `all` (optional) receives the headers in group-rank order.
  Status ExchangeHeaders(Call& call, Header& mine, const CallerSite& where, std::vector<Header>* all);
  Status Validate(const char* what, const std::vector<Header>& all) const;

  MPI_Comm comm_;
  int rank_;
  std::vector<int> world_ranks_;
  MpiOptions options_;
  int64_t sequence_ = 0;
  Status broken_;
  mutable std::vector<Staging> pool_;  // used by one thread at a time, like the communicator
};

// Initializes MPI if needed (MPI_Init_thread asking for MPI_THREAD_MULTIPLE, accepting whatever
// level the library provides; an MPI initialized by the program is accepted at any thread level)
// and sets MPI_ERRORS_RETURN on MPI_COMM_WORLD. Idempotent. Each communicator is used by one
// thread at a time; several communicators may be used from several threads at once only when
// MpiThreadMultiple() is true (e.g. a background checkpoint writer on its own Split communicator).
// Errors: MPI already finalized (FailedPrecondition); MPI failures (Internal).
Status MpiInit();

// True when MPI is initialized with MPI_THREAD_MULTIPLE (MPI_Query_thread); false otherwise.
bool MpiThreadMultiple();

// MpiInit() + MpiCommunicator::Create(MPI_COMM_WORLD, opts): group rank i = world rank i.
StatusOr<std::shared_ptr<Communicator>> MpiWorld(MpiOptions opts = {});

// MPI_Finalize if MPI is initialized and not finalized (whoever initialized it). Collective over the
// job. Communicators still alive afterwards are inert (their destructors skip MPI_Comm_free).
// MPI_Finalize is entered only once every rank is known to be in MpiFinalize (an MPI_Ibarrier on
// MPI_COMM_WORLD polled against twice the longest MpiOptions::timeout of the process's communicators,
// 60 s without any):
// when a rank does not arrive in time (it aborts, died, stalled or skipped a collective), this rank
// calls MpiAbort (DeadlineExceeded "not every rank reached MpiFinalize within T ms") instead, so that
// no MPI_Finalize races a peer's MPI_Abort (which can hang mpirun in PMIx) and mpirun always ends.
Status MpiFinalize();

// Calls MpiFinalize() on destruction (ignoring its status; put it first in main).
class MpiFinalizeGuard {
 public:
  MpiFinalizeGuard() = default;
  ~MpiFinalizeGuard();
  MpiFinalizeGuard(const MpiFinalizeGuard&) = delete;
  MpiFinalizeGuard& operator=(const MpiFinalizeGuard&) = delete;
};

// Prints "rank R: aborting the MPI job: <why>" to stderr and calls MPI_Abort(MPI_COMM_WORLD,
// exit_code), which makes mpirun end every rank. Without an initialized MPI it calls std::exit.
[[noreturn]] void MpiAbort(const Status& why, int exit_code = 1);

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_
