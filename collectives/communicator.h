// Communicator: the collective interface every backend implements (threads, MPI, NCCL).
//
// A Communicator is one rank's handle on an ordered group of ranks. Ranks inside it are
// numbered 0..size()-1 (the group order). All collectives are blocking on the CPU backends and
// must be called by every member in the same order with matching dtype, op and counts; a
// mismatch or a member that never arrives is reported as an error (never a hang: backends have a
// timeout whose message names the collective, the group and the missing ranks).
//
// Buffers are raw element arrays of `dtype`; counts are in elements. Variable-size ("V") forms
// take one count per group rank and lay blocks out back to back in group-rank order, so uneven
// and empty shards need no padding.
//
// Reductions are deterministic: element-wise in group-rank order (0, 1, ..., n-1); bf16 is
// reduced in float and rounded once; kAvg divides the sum by size() (integer division truncates
// toward zero for i32/i64).
//
// Sub-groups come from Split (MPI_Comm_split semantics: collective over this communicator;
// members with the same color form a new communicator ordered by (key, rank)).
//
// Desync detection: every collective (not SendRecv) takes a trailing `where`, the caller's
// CallerSite (file and line), captured by its default argument (pass it on explicitly from a wrapper
// whose callers should be named instead). Backends that validate calls across ranks (threads
// always, MPI with MpiOptions::validate) compare, before any payload moves, each member's
// per-communicator sequence number, collective kind and call site (file:line): a rank that skipped,
// repeated or reordered a collective makes every member return FailedPrecondition naming both call
// sites and sequence numbers, instead of matching the wrong call. A skip inside a loop at the same
// source line is invisible to this check (same site, same count): it shows up at the next call
// from another line, or as a timeout. ThreadWorldOptions / MpiOptions::check_call_sites = false
// turns the site comparison off (sequence numbers and arguments are still checked).
//
// Byte counters: every backend counts, per world rank, the payload bytes it sent to and
// received from other ranks (self-copies are not counted). See each backend for its algorithms.
#ifndef MESHFLOW_COLLECTIVES_COMMUNICATOR_H_
#define MESHFLOW_COLLECTIVES_COMMUNICATOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

// The file and line of a call, captured at the call site by a default argument written as
// `CallerSite where = CallerSite::Current()`: Current's own defaults (__builtin_FILE and
// __builtin_LINE) are evaluated where the outer defaulted call is made, as for
// std::source_location::current() (GCC and Clang). Not std::source_location: clang 14 (the fuzz
// build) cannot compile libstdc++ 12's <source_location>.
struct CallerSite {
  const char* file = "";
  unsigned line = 0;
  static constexpr CallerSite Current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return CallerSite{file, line};
  }
  constexpr const char* file_name() const { return file; }
};

struct ByteCounters {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  friend bool operator==(const ByteCounters&, const ByteCounters&) = default;
};

// One point-to-point transfer of a grouped SendRecv. `peer` is a rank of this communicator.
struct SendSpec {
  int peer = 0;
  const void* buffer = nullptr;
  int64_t count = 0;
};
struct RecvSpec {
  int peer = 0;
  void* buffer = nullptr;
  int64_t count = 0;
};

// A block of a buffer seen as `rows` runs of `run` elements, the runs `stride` elements apart, the
// first at element `offset`: rows * run elements in that (row-major) order. A dense block is
// {offset, 1, count, count}.
struct StridedBlock {
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t run = 0;
  int64_t stride = 0;
  int64_t count() const { return rows * run; }
  // Elements from `offset` to one past the last element of the block (0 when empty).
  int64_t extent() const { return count() == 0 ? 0 : (rows - 1) * stride + run; }
};

// AllToAllStrided's argument check, shared by its implementations: one block per member on each
// side (group_size), every block with fields >= 0 and runs that do not overlap (rows <= 1 or
// run <= stride); InvalidArgument naming the block otherwise. Fills the element counts per member.
Status CheckStridedBlocks(std::span<const StridedBlock> send_blocks, std::span<const StridedBlock> recv_blocks,
                          int group_size, std::vector<int64_t>& send_counts, std::vector<int64_t>& recv_counts);

// Copies the elements of block `from` of `src` into block `to` of `dst`, in order (from.count()
// must equal to.count(); es = bytes per element). Runs of different lengths are fine.
void CopyStridedBlock(const void* src, const StridedBlock& from, void* dst, const StridedBlock& to, int64_t es);

class Communicator {
 public:
  virtual ~Communicator() = default;

  // This rank's index in the group, and the group size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // World rank of this process/thread and the world ranks of the group (in group order).
  virtual int world_rank() const = 0;
  virtual const std::vector<int>& world_ranks() const = 0;
  // "threads", "mpi", "nccl".
  virtual std::string backend() const = 0;
  // Where the buffers of the stream-ordered forms below live: the host for threads and MPI, the
  // communicator's GPU for NCCL.
  virtual Device device() const { return Device::Host(); }

  // recv = concat over group ranks r of r's `send` (recv_counts[r] elements each).
  // Errors: recv_counts.size() != size(), send_count != recv_counts[rank()].
  virtual Status AllGatherV(const void* send, int64_t send_count, void* recv,
                            std::span<const int64_t> recv_counts, DType dtype,
                            CallerSite where = CallerSite::Current()) = 0;
  // send holds sum(counts) elements, block r being counts[r] long; rank r receives the reduction
  // over all ranks of block r (counts[rank()] elements).
  virtual Status ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype,
                                ReduceOp op, CallerSite where = CallerSite::Current()) = 0;
  // recv = reduction of every rank's send (count elements). send == recv is allowed (in place).
  virtual Status AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                           CallerSite where = CallerSite::Current()) = 0;
  // Rank r sends send_counts[s] elements (block s of send) to rank s; receives recv_counts[s]
  // elements from rank s into block s of recv. Counts must agree pairwise across ranks.
  virtual Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                           std::span<const int64_t> recv_counts, DType dtype,
                           CallerSite where = CallerSite::Current()) = 0;
  // AllToAllV on strided blocks: this rank sends send_blocks[s] of `send` to rank s and receives
  // the block from rank s into recv_blocks[s] of `recv` (counts: send_blocks[s].count() must equal
  // rank s's recv_blocks[me].count(), checked as AllToAllV's). Blocks of `recv` must not overlap
  // each other. Lets a caller exchange the strided pieces of a tensor (e.g. the column blocks of
  // S(0) -> S(1)) without packing them. Where strided_all_to_all_is_direct(), each element is
  // copied once, from the sender's block straight into the receiver's (the threads backend); the
  // base version packs the send blocks into a temporary, calls AllToAllV and unpacks (every
  // backend; it allocates the two temporaries per call).
  // Errors: AllToAllV's, and InvalidArgument for a block with negative fields or run > stride
  // with rows > 1.
  virtual Status AllToAllStrided(const void* send, std::span<const StridedBlock> send_blocks, void* recv,
                                 std::span<const StridedBlock> recv_blocks, DType dtype,
                                 CallerSite where = CallerSite::Current());
  virtual bool strided_all_to_all_is_direct() const { return false; }
  // buffer on `root` is copied to every rank's buffer.
  virtual Status Broadcast(void* buffer, int64_t count, DType dtype, int root,
                           CallerSite where = CallerSite::Current()) = 0;
  virtual Status Barrier(CallerSite where = CallerSite::Current()) = 0;
  // Grouped point-to-point: all sends and receives of this call are posted together, so any
  // pattern (including cycles) completes. A send to self must match a receive from self.
  virtual Status SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) = 0;

  // Collective: members with the same color form a new communicator, ordered by (key, rank).
  // A negative color opts out (returns nullptr on that rank).
  virtual StatusOr<std::shared_ptr<Communicator>> Split(
      int color, int key, CallerSite where = CallerSite::Current()) = 0;

  // Counters of this world rank, summed over all communicators of this rank.
  virtual ByteCounters counters() const = 0;
  virtual void ResetCounters() = 0;

  // ---- Stream-ordered forms (what the plan executor calls). The buffers are on device(); the
  // collective runs in `stream`'s order. On the host backends it must be called from inside work
  // running on `stream` (Stream::Enqueue) and runs at once, blocking, like the forms above (the
  // stream must be a host stream). On NCCL it is enqueued on the stream (a CUDA stream of the
  // communicator's device) and returns at once: the result is valid in the stream's order, no host
  // synchronization, no staging. Errors: the forms above's, and InvalidArgument for a stream on
  // another device.
  Status AllGatherV(const void* send, int64_t send_count, void* recv, std::span<const int64_t> recv_counts, DType dtype,
                    Stream& stream, CallerSite where = CallerSite::Current()) {
    return AllGatherVOnStream(send, send_count, recv, recv_counts, dtype, stream, where);
  }
  Status ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype, ReduceOp op,
                        Stream& stream, CallerSite where = CallerSite::Current()) {
    return ReduceScatterVOnStream(send, counts, recv, dtype, op, stream, where);
  }
  Status AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, Stream& stream,
                   CallerSite where = CallerSite::Current()) {
    return AllReduceOnStream(send, recv, count, dtype, op, stream, where);
  }
  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                   CallerSite where = CallerSite::Current()) {
    return AllToAllVOnStream(send, send_counts, recv, recv_counts, dtype, stream, where);
  }
  Status AllToAllStrided(const void* send, std::span<const StridedBlock> send_blocks, void* recv,
                         std::span<const StridedBlock> recv_blocks, DType dtype, Stream& stream,
                         CallerSite where = CallerSite::Current()) {
    MF_RETURN_IF_ERROR(CheckStream(stream, "all_to_all (strided)"));
    return AllToAllStrided(send, send_blocks, recv, recv_blocks, dtype, where);
  }
  Status Broadcast(void* buffer, int64_t count, DType dtype, int root, Stream& stream,
                   CallerSite where = CallerSite::Current()) {
    return BroadcastOnStream(buffer, count, dtype, root, stream, where);
  }
  Status SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype, Stream& stream) {
    return SendRecvOnStream(sends, recvs, dtype, stream);
  }

  // Even-size convenience forms.
  Status AllGather(const void* send, void* recv, int64_t count, DType dtype,
                   CallerSite where = CallerSite::Current()) {
    std::vector<int64_t> counts(static_cast<size_t>(size()), count);
    return AllGatherV(send, count, recv, counts, dtype, where);
  }
  Status ReduceScatter(const void* send, void* recv, int64_t count_per_rank, DType dtype, ReduceOp op,
                       CallerSite where = CallerSite::Current()) {
    std::vector<int64_t> counts(static_cast<size_t>(size()), count_per_rank);
    return ReduceScatterV(send, counts, recv, dtype, op, where);
  }
  Status AllToAll(const void* send, void* recv, int64_t count_per_rank, DType dtype,
                  CallerSite where = CallerSite::Current()) {
    std::vector<int64_t> counts(static_cast<size_t>(size()), count_per_rank);
    return AllToAllV(send, counts, recv, counts, dtype, where);
  }

 protected:
  // The stream-ordered forms. The defaults (host backends) check that `stream` is a host stream and
  // run the blocking form; a device backend overrides them to enqueue on the stream.
  virtual Status AllGatherVOnStream(const void* send, int64_t send_count, void* recv,
                                    std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                                    CallerSite where);
  virtual Status ReduceScatterVOnStream(const void* send, std::span<const int64_t> counts, void* recv, DType dtype,
                                        ReduceOp op, Stream& stream, CallerSite where);
  virtual Status AllReduceOnStream(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                   Stream& stream, CallerSite where);
  virtual Status AllToAllVOnStream(const void* send, std::span<const int64_t> send_counts, void* recv,
                                   std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                                   CallerSite where);
  virtual Status BroadcastOnStream(void* buffer, int64_t count, DType dtype, int root, Stream& stream,
                                   CallerSite where);
  virtual Status SendRecvOnStream(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype,
                                  Stream& stream);
  // OK when `stream` is on device(); InvalidArgument naming both otherwise.
  Status CheckStream(const Stream& stream, const char* what) const;
};

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_COMMUNICATOR_H_
