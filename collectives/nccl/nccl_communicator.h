// NcclCommunicator: the "nccl" backend of Communicator (one rank per GPU), with a device-pointer API.
//
// Overview. A rank owns one ncclComm_t, its CUDA device and one CUDA stream (the "comm stream").
// Worlds come from:
//   - NcclWorld::Create(devices): several GPUs driven by one process (ncclCommInitAll); Run() starts
//     one thread per rank, like ThreadWorld (collectives/threads/threads_world.h);
//   - NcclMpiWorld() (collectives/nccl/nccl_mpi.h): one process per GPU under mpirun; the NCCL
//     unique id is broadcast over MPI and every rank calls ncclCommInitRank;
//   - NcclCommunicator::CreateFromUniqueId for any other launcher.
// Split() is ncclCommSplit, after an all-gather of every member's (color, key) so that the new
// communicator knows its members' world ranks. Several ranks on one GPU are not supported: NCCL
// rejects duplicate devices in a communicator (NcclWorld::Create returns InvalidArgument for them);
// such ranks use a StagedCommunicator (collectives/staged/staged_communicator.h) instead.
//
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<NcclWorld> world, NcclWorld::Create({0, 1}));
//   MF_RETURN_IF_ERROR(world->Run([&](NcclCommunicator& comm) -> Status {
//     std::vector<float> x(8, 1.0f);                                      // host memory
//     MF_RETURN_IF_ERROR(comm.AllReduce(x.data(), x.data(), 8, DType::kF32, ReduceOp::kSum));
//     MF_RETURN_IF_ERROR(comm.DeviceAllReduce(d_x, d_x, n, DType::kF32, ReduceOp::kSum, stream));
//     return comm.Synchronize(stream, "my step");                        // polled, with timeout
//   }));
//
// Two APIs.
//  1. The Communicator interface (what the plan executor calls, unchanged) takes HOST buffers (any
//     pointer cudaMemcpyDefault accepts: pageable or pinned host memory, or device/managed memory).
//     Each call is blocking: it allocates device staging buffers (stream-ordered, cudaMallocAsync),
//     copies the inputs in with cudaMemcpyAsync on the comm stream, enqueues the NCCL work, polls
//     until it completes (timeout, see Errors), copies the results out and waits again. Host
//     staging costs two PCIe copies per call: use it to run host-Tensor code (the executor,
//     DTensor API) on GPUs, not for speed.
//  2. The device API (Device*): the same operations on DEVICE pointers, enqueued on a caller-given
//     cudaStream_t with no host synchronization (returns once enqueued; argument errors and failed
//     NCCL/CUDA calls are reported immediately). Synchronize(stream) waits with the timeout. Several
//     device operations can be fused into one NCCL group with an NcclGroup scope (see below).
//
// Algorithms (n = group size, me = group rank; counts in elements, NCCL moves bytes as ncclUint8
// except native reductions):
//   AllGatherV      equal counts: ncclAllGather; uneven: one ncclBroadcast per non-empty block (root =
//                   its owner) in one NCCL group. Exact, no padding.
//   AllToAllV       ncclSend/ncclRecv of every non-empty non-self block in one group; self block by
//                   cudaMemcpyAsync.
//   SendRecv        ncclSend/ncclRecv in one group; transfers to self by cudaMemcpyAsync (in order).
//   Broadcast       ncclBroadcast. Barrier: ncclAllReduce of one int32 (host API only).
//   ReduceScatterV  exact (NcclReduction::kExact, default): the all-to-all of blocks (block q of every
//                   rank to rank q, grouped ncclSend/ncclRecv) into a device buffer, then one kernel
//                   (runtime/cuda/device_kernels.h) folds the n blocks in group-rank order with ReduceBuffers'
//                   semantics: bit-identical to the threads and MPI backends (bf16 in float rounded
//                   once, kAvg truncating integers). Native (NcclReduction::kNative): equal counts
//                   ncclReduceScatter, uneven one ncclReduce per block in a group; NCCL's
//                   association order, ncclAvg, bf16 rounded per step.
//   AllReduce       exact: reduce-scatter of torch.chunk chunks (chunk = ceil(count/n)) + all-gather
//                   (the threads backend's algorithm and bytes); native: ncclAllReduce.
// Empty transfers issue no NCCL call. Overlapping send/receive buffers (in-place use) are staged in
// a temporary device buffer.
//
// NcclGroup. An NcclGroup object calls ncclGroupStart and End() (or the destructor) ncclGroupEnd, so
// device-API calls made in between on this thread are launched as one NCCL group (e.g. all-gathers
// on several communicators, or a send/recv exchange built from several calls). Inside a group the
// host API and exact reductions (which need a kernel between two NCCL steps) return
// FailedPrecondition, and overlapping send/recv buffers are rejected (no temporaries can be freed
// before the group is launched).
//
// Byte counters: per world rank, the formulas of the threads backend (threads_world.h), counted when
// a call succeeds (device API: when enqueued). Native reductions count the same modelled bytes.
//
// Errors. Every CUDA and NCCL call is checked; the Status names the call, the CUDA/NCCL error string
// (and ncclGetLastError), the collective, the group (world ranks) and the rank. Argument errors are
// InvalidArgument (collectives/call_check.h wording). Blocking waits poll cudaStreamQuery and
// ncclCommGetAsyncError with back-off; past NcclOptions::timeout (default 300 s) or on an
// asynchronous NCCL error the rank calls ncclCommAbort and returns DeadlineExceeded (Internal for an
// async error) naming the collective, the group and the rank; the communicator is then broken and
// later calls fail fast with Aborted. In an NcclWorld, a rank whose function fails makes the other
// ranks' waits abort (Aborted naming the failed world rank) instead of waiting for the timeout.
// NCCL cannot check that members made matching calls: mismatched counts or kinds are undefined
// behaviour in NCCL (usually a hang, which the timeout turns into an error). ncclCommInitAll,
// ncclCommInitRank and ncclCommSplit are blocking NCCL calls bounded by NCCL's own bootstrap
// timeouts, not by NcclOptions::timeout (Split enters ncclCommSplit only after an all-gather that
// proves every member arrived).
//
// Threading: a communicator is used by one thread at a time (its rank's); every call first makes the
// communicator's device current on the calling thread. counters() may be called from any thread.
#ifndef MESHFLOW_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
#define MESHFLOW_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"

namespace meshflow {

struct CallSite;  // collectives/call_check.h

// How ReduceScatterV / AllReduce reduce (see the file comment).
enum class NcclReduction {
  kExact,   // rank-order fold in a meshflow kernel: same bits as the threads / MPI backends
  kNative,  // NCCL's own reduction (fastest; NCCL's order and rounding)
};

struct NcclOptions {
  // Bound on every blocking wait (host API calls, Split, Synchronize).
  std::chrono::milliseconds timeout{300000};
  NcclReduction reduction = NcclReduction::kExact;
};

namespace nccl_internal {
// State shared by the communicators of one world: byte counters per world rank, and the world rank
// whose NcclWorld::Run function failed (-1: none), which makes the others' waits abort.
struct WorldState {
  explicit WorldState(int n) : sent(static_cast<size_t>(n)), received(static_cast<size_t>(n)) {}
  std::vector<std::atomic<int64_t>> sent, received;
  std::atomic<int> failed_rank{-1};
};
}  // namespace nccl_internal

class NcclCommunicator final : public Communicator {
 public:
  // ncclCommInitRank on `device` (made current on this thread) with an id every member received
  // (rank 0 makes it with ncclGetUniqueId). World rank = rank, world size = nranks.
  // Errors: bad rank/nranks/device, timeout <= 0 (InvalidArgument); CUDA/NCCL failures.
  static StatusOr<std::shared_ptr<NcclCommunicator>> CreateFromUniqueId(const ncclUniqueId& id, int nranks, int rank,
                                                                        int device, NcclOptions opts = {});

  // Destroys the NCCL communicator (ncclCommDestroy; nothing if aborted) and the comm stream.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  int world_rank() const override { return world_ranks_[static_cast<size_t>(rank_)]; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::string backend() const override { return "nccl"; }
  // The stream-ordered overloads of the base class (hidden by the overrides below otherwise).
  using Communicator::AllGatherV;
  using Communicator::AllReduce;
  using Communicator::AllToAllStrided;
  using Communicator::AllToAllV;
  using Communicator::Broadcast;
  using Communicator::ReduceScatterV;
  using Communicator::SendRecv;

  // ---- Communicator interface: host buffers, blocking (staged through the device; see above) ----
  // `where` (the call site) is not checked across ranks by this backend (no header exchange).
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
  // The new communicator inherits this one's options and world state; it gets its own stream.
  StatusOr<std::shared_ptr<Communicator>> Split(int color, int key,
                                                CallerSite where = CallerSite::Current()) override;

  ByteCounters counters() const override;
  void ResetCounters() override;

  // ---- Device API: device pointers, enqueued on `stream`, no host synchronization ----
  // Same semantics and argument rules as the interface calls above.
  Status DeviceAllGatherV(const void* send, int64_t send_count, void* recv, std::span<const int64_t> recv_counts,
                          DType dtype, cudaStream_t stream);
  Status DeviceReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype, ReduceOp op,
                              cudaStream_t stream);
  Status DeviceAllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, cudaStream_t stream);
  Status DeviceAllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                         std::span<const int64_t> recv_counts, DType dtype, cudaStream_t stream);
  Status DeviceBroadcast(void* buffer, int64_t count, DType dtype, int root, cudaStream_t stream);
  Status DeviceSendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype,
                        cudaStream_t stream);
  Status DeviceAllGather(const void* send, void* recv, int64_t count, DType dtype, cudaStream_t stream) {
    std::vector<int64_t> counts(static_cast<size_t>(size()), count);
    return DeviceAllGatherV(send, count, recv, counts, dtype, stream);
  }
  Status DeviceReduceScatter(const void* send, void* recv, int64_t count_per_rank, DType dtype, ReduceOp op,
                             cudaStream_t stream) {
    std::vector<int64_t> counts(static_cast<size_t>(size()), count_per_rank);
    return DeviceReduceScatterV(send, counts, recv, dtype, op, stream);
  }
  Status DeviceAllToAll(const void* send, void* recv, int64_t count_per_rank, DType dtype, cudaStream_t stream) {
    std::vector<int64_t> counts(static_cast<size_t>(size()), count_per_rank);
    return DeviceAllToAllV(send, counts, recv, counts, dtype, stream);
  }

  // Waits until all work enqueued on `stream` so far completes, polling cudaStreamQuery and
  // ncclCommGetAsyncError; on timeout or an async NCCL error aborts the communicator (see Errors).
  // `what` names the operation in messages.
  Status Synchronize(cudaStream_t stream, const char* what = "synchronize");

  // The CUDA ordinal of this rank's GPU (device() is Device::Cuda of it).
  int cuda_ordinal() const { return device_; }
  Device device() const override { return Device::Cuda(device_); }
  // The comm stream used by the host API (valid while the communicator lives).
  cudaStream_t stream() const { return stream_; }
  // The NCCL communicator (null once aborted). Do not destroy it.
  ncclComm_t nccl_comm() const { return comm_; }
  const NcclOptions& options() const { return options_; }
  // OK, or the error that broke this communicator.
  const Status& broken() const { return broken_; }

 protected:
  // The stream-ordered forms: device pointers, enqueued on the CUDA stream (`stream` must be a CUDA
  // stream of this communicator's device: runtime/cuda/), no host synchronization, no staging.
  Status AllGatherVOnStream(const void* send, int64_t send_count, void* recv, std::span<const int64_t> recv_counts,
                            DType dtype, Stream& stream, CallerSite where) override;
  Status ReduceScatterVOnStream(const void* send, std::span<const int64_t> counts, void* recv, DType dtype, ReduceOp op,
                                Stream& stream, CallerSite where) override;
  Status AllReduceOnStream(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, Stream& stream,
                           CallerSite where) override;
  Status AllToAllVOnStream(const void* send, std::span<const int64_t> send_counts, void* recv,
                           std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                           CallerSite where) override;
  Status BroadcastOnStream(void* buffer, int64_t count, DType dtype, int root, Stream& stream,
                           CallerSite where) override;
  Status SendRecvOnStream(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype,
                          Stream& stream) override;

 private:
  friend class NcclWorld;
  class Staging;

  NcclCommunicator(ncclComm_t comm, int device, int rank, std::vector<int> world_ranks, NcclOptions opts,
                   std::shared_ptr<nccl_internal::WorldState> state);
  // Creates the comm stream; called once after construction.
  Status Init();

  CallSite Site(const char* what) const;
  std::string Describe(const char* what) const;
  std::string RankName(int r) const;
  // Makes the device current; fails fast when broken.
  Status Enter(const char* what);
  // Records an error that breaks the communicator and returns it.
  Status Break(Status s);
  // Adds a successful call's bytes to this rank's counters; returns OK.
  Status Counted(const ByteCounters& bytes);
  // Start of every public call: `checked` (its argument check), then for the host API (`host`)
  // FailedPrecondition inside an NcclGroup, then Enter.
  Status Begin(const char* what, const Status& checked, bool host);
  // ncclGroupStart, `body`, ncclGroupEnd (always, once started); the first error.
  Status NcclGrouped(const char* what, const std::function<Status()>& body);
  // Host API staging on the comm stream: device buffers dsend (send_bytes) and drecv (recv_bytes;
  // with `in_place` one buffer of the larger size serves as both), copy send in, `enqueue`, wait,
  // copy drecv out to recv, free the buffers, wait.
  Status RunStaged(const char* what, const void* send, int64_t send_bytes, void* recv, int64_t recv_bytes,
                   bool in_place, const std::function<Status(std::byte* dsend, std::byte* drecv)>& enqueue);

  // Enqueue the operations (arguments already checked; device pointers).
  Status EnqueueAllGatherV(const char* what, const void* send, int64_t send_count, void* recv,
                           std::span<const int64_t> counts, DType dtype, cudaStream_t stream);
  Status EnqueueReduceScatterV(const char* what, const void* send, std::span<const int64_t> counts, void* recv,
                               DType dtype, ReduceOp op, cudaStream_t stream);
  Status EnqueueAllReduce(const char* what, const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                          cudaStream_t stream);
  Status EnqueueAllToAllV(const char* what, const void* send, std::span<const int64_t> send_counts, void* recv,
                          std::span<const int64_t> recv_counts, DType dtype, cudaStream_t stream);
  Status EnqueueSendRecv(const char* what, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                         DType dtype, cudaStream_t stream);
  Status EnqueueBroadcast(const char* what, void* buffer, int64_t count, DType dtype, int root, cudaStream_t stream);
  Status CheckNcclCall(ncclResult_t r, const char* call, const char* what);
  Status CheckCudaCall(cudaError_t e, const char* call, const char* what);

  ncclComm_t comm_;
  int device_;
  int rank_;
  std::vector<int> world_ranks_;
  NcclOptions options_;
  std::shared_ptr<nccl_internal::WorldState> state_;
  cudaStream_t stream_ = nullptr;
  Status broken_;
};

// Fuses the device-API calls made on this thread while it lives into one NCCL group
// (ncclGroupStart / ncclGroupEnd). Nestable. Always call End() and check its status; the destructor
// ends a group that was not ended (ignoring the error).
//
//   NcclGroup group;
//   MF_RETURN_IF_ERROR(tp.DeviceAllGather(a, b, n, DType::kF32, stream));
//   MF_RETURN_IF_ERROR(dp.DeviceAllGather(c, d, n, DType::kF32, stream));
//   MF_RETURN_IF_ERROR(group.End());   // both are launched here
class NcclGroup {
 public:
  NcclGroup();
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  // ncclGroupEnd. Errors: ncclGroupStart or ncclGroupEnd failed (Internal, naming the call), or
  // End() called twice (FailedPrecondition).
  Status End();
  // Open groups on this thread.
  static int Depth();

 private:
  Status start_;
  bool ended_ = false;
};

// Several GPUs driven by one process: one rank per device (ncclCommInitAll).
class NcclWorld {
 public:
  // devices: CUDA device ordinals, one per rank (rank i on devices[i]); empty = every visible device.
  // Errors: no device (Unavailable), a device out of range or listed twice (InvalidArgument: NCCL
  // does not support two ranks on one GPU), timeout <= 0, CUDA/NCCL failures.
  static StatusOr<std::unique_ptr<NcclWorld>> Create(std::vector<int> devices = {}, NcclOptions opts = {});

  ~NcclWorld();
  NcclWorld(const NcclWorld&) = delete;
  NcclWorld& operator=(const NcclWorld&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  const std::vector<int>& devices() const { return devices_; }

  // Runs fn on size() threads, thread i with rank i's world communicator (its device current).
  // Returns OK or the first error in rank order ("rank i: ..."). A failing rank makes the other
  // ranks' waits abort (their communicators are then broken; create a new world to continue).
  // Errors: fn empty (InvalidArgument).
  Status Run(std::function<Status(NcclCommunicator& world_comm)> fn);

  // Rank i's world communicator (for single-threaded device-API use with NcclGroup, e.g. one thread
  // driving every GPU: enqueue on every rank inside one NcclGroup, then Synchronize each).
  NcclCommunicator& comm(int rank) { return *comms_[static_cast<size_t>(rank)]; }

  ByteCounters counters(int world_rank) const;
  void ResetCounters();

 private:
  NcclWorld() = default;
  std::vector<int> devices_;
  std::vector<std::shared_ptr<NcclCommunicator>> comms_;
  std::shared_ptr<nccl_internal::WorldState> state_;
  std::mutex run_mu_;
};

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
