#include "meshflow/collectives/nccl/nccl_communicator.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <thread>
#include <utility>

#include "meshflow/collectives/call_check.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/runtime/cuda/device_kernels.h"

namespace meshflow {

namespace {

using Clock = std::chrono::steady_clock;

// Open NcclGroup scopes on this thread.
thread_local int g_group_depth = 0;

std::string NcclErrorString(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += " (" + std::string(last) + ")";
  return s;
}

StatusOr<ncclDataType_t> NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  return InvalidArgumentError("no NCCL type for dtype " + std::to_string(static_cast<int>(t)));
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

int64_t Sum(std::span<const int64_t> v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

bool AllEqual(std::span<const int64_t> counts) {
  return std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
}

std::vector<int64_t> Offsets(std::span<const int64_t> counts) {
  std::vector<int64_t> off(counts.size());
  int64_t o = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    off[i] = o;
    o += counts[i];
  }
  return off;
}

bool Overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  if (a_bytes <= 0 || b_bytes <= 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}

const std::byte* At(const void* p, int64_t bytes) { return static_cast<const std::byte*>(p) + bytes; }
std::byte* At(void* p, int64_t bytes) { return static_cast<std::byte*>(p) + bytes; }

// Polling back-off: spin, then yield, then sleep up to 200 us.
void Pause(int iteration) {
  if (iteration < 16) return;
  if (iteration < 64) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(200, 2 * (iteration - 63))));
}

// torch.chunk chunks of `count` over n ranks (AllReduce's reduce-scatter + all-gather).
std::vector<int64_t> ChunkCounts(int64_t count, int n) {
  std::vector<int64_t> c(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) c[static_cast<size_t>(r)] = ChunkOf(Interval{0, count}, n, r).size();
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Stream-ordered device temporaries of one call (cudaMallocAsync / cudaFreeAsync on the call's
// stream, so no host synchronization). When the communicator is broken (an abort may have left
// NCCL work referencing them) they are leaked instead of freed.
class NcclCommunicator::Staging {
 public:
  Staging(NcclCommunicator& comm, cudaStream_t stream, const char* what) : comm_(comm), stream_(stream), what_(what) {}
  ~Staging() {
    if (!comm_.broken_.ok()) return;
    for (void* p : ptrs_) (void)cudaFreeAsync(p, stream_);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  StatusOr<std::byte*> Alloc(int64_t bytes) {
    if (bytes <= 0) return static_cast<std::byte*>(nullptr);
    void* p = nullptr;
    MF_RETURN_IF_ERROR(
        comm_.CheckCudaCall(cudaMallocAsync(&p, static_cast<size_t>(bytes), stream_), "cudaMallocAsync", what_));
    ptrs_.push_back(p);
    return static_cast<std::byte*>(p);
  }
  // cudaMemcpyAsync (cudaMemcpyDefault: host or device on either side) of `bytes` (none if 0).
  Status Copy(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || dst == src) return Status();
    return comm_.CheckCudaCall(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_),
                               "cudaMemcpyAsync", what_);
  }

 private:
  NcclCommunicator& comm_;
  cudaStream_t stream_;
  const char* what_;
  std::vector<void*> ptrs_;
};

// ---------------------------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, int rank, std::vector<int> world_ranks,
                                   NcclOptions opts, std::shared_ptr<nccl_internal::WorldState> state)
    : comm_(comm),
      device_(device),
      rank_(rank),
      world_ranks_(std::move(world_ranks)),
      options_(opts),
      state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() {
  (void)cudaSetDevice(device_);
  if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

Status NcclCommunicator::Init() {
  const char* what = "create";
  MF_RETURN_IF_ERROR(CheckCudaCall(cudaSetDevice(device_), "cudaSetDevice", what));
  MF_RETURN_IF_ERROR(CheckCudaCall(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                   "cudaStreamCreateWithFlags", what));
  // Keep freed staging memory in the device's default pool (the default threshold 0 would return it
  // to the driver at every synchronization, turning each host-API call into fresh cudaMallocs).
  cudaMemPool_t pool = nullptr;
  MF_RETURN_IF_ERROR(
      CheckCudaCall(cudaDeviceGetDefaultMemPool(&pool, device_), "cudaDeviceGetDefaultMemPool", what));
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  return CheckCudaCall(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                       "cudaMemPoolSetAttribute", what);
}

StatusOr<std::shared_ptr<NcclCommunicator>> NcclCommunicator::CreateFromUniqueId(const ncclUniqueId& id, int nranks,
                                                                                 int rank, int device,
                                                                                 NcclOptions opts) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return InvalidArgumentError("NcclCommunicator::CreateFromUniqueId: rank " + std::to_string(rank) +
                                " outside [0, nranks = " + std::to_string(nranks) + ")");
  }
  if (opts.timeout.count() <= 0) {
    return InvalidArgumentError("NcclCommunicator::CreateFromUniqueId: timeout " +
                                std::to_string(opts.timeout.count()) + " ms must be positive");
  }
  MF_ASSIGN_OR_RETURN(int devices, CudaDeviceCount());
  if (device < 0 || device >= devices) {
    return InvalidArgumentError("NcclCommunicator::CreateFromUniqueId: device " + std::to_string(device) +
                                " outside [0, " + std::to_string(devices) + ") (visible CUDA devices)");
  }
  const std::string where = "nccl create (rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                            ", device " + std::to_string(device) + ")";
  MF_RETURN_IF_ERROR(CheckCuda(cudaSetDevice(device), "cudaSetDevice", where));
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  if (r != ncclSuccess) {
    return InternalError("ncclCommInitRank failed: " + NcclErrorString(r, nullptr) + " in " + where);
  }
  std::vector<int> world(static_cast<size_t>(nranks));
  for (int i = 0; i < nranks; ++i) world[static_cast<size_t>(i)] = i;
  std::shared_ptr<NcclCommunicator> c(new NcclCommunicator(comm, device, rank, std::move(world), opts,
                                                           std::make_shared<nccl_internal::WorldState>(nranks)));
  MF_RETURN_IF_ERROR(c->Init());
  return c;
}

CallSite NcclCommunicator::Site(const char* what) const { return CallSite{"nccl ", what, world_ranks_, rank_}; }
std::string NcclCommunicator::Describe(const char* what) const { return Site(what).Describe(); }
std::string NcclCommunicator::RankName(int r) const { return Site("").RankName(r); }

Status NcclCommunicator::Break(Status s) {
  if (broken_.ok() && !s.ok()) broken_ = s;
  return s;
}

Status NcclCommunicator::CheckNcclCall(ncclResult_t r, const char* call, const char* what) {
  if (r == ncclSuccess) return Status();
  return Break(InternalError(std::string(call) + " failed: " + NcclErrorString(r, comm_) + " in " + Describe(what) +
                             " at " + RankName(rank_)));
}

Status NcclCommunicator::CheckCudaCall(cudaError_t e, const char* call, const char* what) {
  if (e == cudaSuccess) return Status();
  return Break(CheckCuda(e, call, Describe(what) + " at " + RankName(rank_)));
}

Status NcclCommunicator::Enter(const char* what) {
  if (!broken_.ok()) {
    return AbortedError(Describe(what) + ": the communicator is broken by an earlier error: " + broken_.ToString());
  }
  if (comm_ == nullptr) return AbortedError(Describe(what) + ": the NCCL communicator was aborted");
  return CheckCudaCall(cudaSetDevice(device_), "cudaSetDevice", what);
}

Status NcclCommunicator::Counted(const ByteCounters& bytes) {
  const size_t w = static_cast<size_t>(world_rank());
  if (w >= state_->sent.size()) return Status();
  if (bytes.bytes_sent != 0) state_->sent[w].fetch_add(bytes.bytes_sent, std::memory_order_relaxed);
  if (bytes.bytes_received != 0) state_->received[w].fetch_add(bytes.bytes_received, std::memory_order_relaxed);
  return Status();
}

ByteCounters NcclCommunicator::counters() const {
  const size_t w = static_cast<size_t>(world_rank());
  if (w >= state_->sent.size()) return {};
  return ByteCounters{state_->sent[w].load(std::memory_order_relaxed),
                      state_->received[w].load(std::memory_order_relaxed)};
}

void NcclCommunicator::ResetCounters() {
  const size_t w = static_cast<size_t>(world_rank());
  if (w >= state_->sent.size()) return;
  state_->sent[w].store(0, std::memory_order_relaxed);
  state_->received[w].store(0, std::memory_order_relaxed);
}

Status NcclCommunicator::Synchronize(cudaStream_t stream, const char* what) {
  MF_RETURN_IF_ERROR(Enter(what));
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  auto abort = [&](Status s) -> Status {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    return Break(std::move(s));
  };
  for (int it = 0;; ++it) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return Status();
    if (e != cudaErrorNotReady) return abort(CheckCuda(e, "cudaStreamQuery", Describe(what) + " at " + RankName(rank_)));
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
    if (r != ncclSuccess) {
      return abort(InternalError("ncclCommGetAsyncError failed: " + NcclErrorString(r, comm_) + " in " +
                                 Describe(what) + " at " + RankName(rank_)));
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      return abort(InternalError(Describe(what) + ": NCCL reported an asynchronous error at " + RankName(rank_) +
                                 ": " + NcclErrorString(async, comm_) + "; the communicator was aborted"));
    }
    const int failed = state_->failed_rank.load(std::memory_order_relaxed);
    if (failed >= 0 && failed != world_rank()) {
      return abort(AbortedError(Describe(what) + ": world rank " + std::to_string(failed) +
                                " failed; aborting the communicator at " + RankName(rank_)));
    }
    if (Clock::now() >= deadline) {
      return abort(DeadlineExceededError(
          Describe(what) + ": timed out after " + std::to_string(options_.timeout.count()) + " ms at " +
          RankName(rank_) +
          ": the NCCL work did not complete (a member did not make the matching call, died or stalled); the "
          "communicator was aborted (ncclCommAbort)"));
    }
    Pause(it);
  }
}

// ---------------------------------------------------------------------------------------------
// Argument checks and byte counts shared by the host and device forms.

namespace {

Status CheckAllGather(const CallSite& site, const void* send, int64_t send_count, const void* recv,
                      std::span<const int64_t> recv_counts) {
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  MF_RETURN_IF_ERROR(CheckSendCount(site, send_count, recv_counts));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, send_count));
  return CheckBuffer(site, "recv", recv, Sum(recv_counts));
}

Status CheckReduceScatter(const CallSite& site, const void* send, std::span<const int64_t> counts, const void* recv) {
  MF_RETURN_IF_ERROR(CheckCounts(site, "counts", counts));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, Sum(counts)));
  return CheckBuffer(site, "recv", recv, counts[static_cast<size_t>(site.rank)]);
}

Status CheckAllReduce(const CallSite& site, const void* send, const void* recv, int64_t count) {
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, count));
  return CheckBuffer(site, "recv", recv, count);
}

Status CheckAllToAll(const CallSite& site, const void* send, std::span<const int64_t> send_counts, const void* recv,
                     std::span<const int64_t> recv_counts) {
  MF_RETURN_IF_ERROR(CheckCounts(site, "send_counts", send_counts));
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  const size_t me = static_cast<size_t>(site.rank);
  if (send_counts[me] != recv_counts[me]) {
    return InvalidArgumentError(site.Describe() + ": " + site.RankName(site.rank) + " sends " +
                                std::to_string(send_counts[me]) + " elements to itself but receives " +
                                std::to_string(recv_counts[me]));
  }
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, Sum(send_counts)));
  return CheckBuffer(site, "recv", recv, Sum(recv_counts));
}

Status CheckBroadcast(const CallSite& site, const void* buffer, int64_t count, int root) {
  MF_RETURN_IF_ERROR(CheckRoot(site, root));
  return CheckBuffer(site, "buffer", buffer, count);
}

Status CheckSendRecvArgs(const CallSite& site, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) {
  return CheckSendRecv(
      site, sends, recvs,
      [&](const std::string& name, const void* buffer, int64_t count) {
        return CheckSpecBuffer(site, name, buffer, count);
      },
      nullptr);
}

ByteCounters AllGatherBytes(std::span<const int64_t> counts, int me, int64_t es) {
  const int64_t n = static_cast<int64_t>(counts.size());
  const int64_t mine = counts[static_cast<size_t>(me)];
  return ByteCounters{(n - 1) * mine * es, (Sum(counts) - mine) * es};
}
ByteCounters ReduceScatterBytes(std::span<const int64_t> counts, int me, int64_t es) {
  const int64_t n = static_cast<int64_t>(counts.size());
  const int64_t mine = counts[static_cast<size_t>(me)];
  return ByteCounters{(Sum(counts) - mine) * es, (n - 1) * mine * es};
}
ByteCounters AllReduceBytes(int64_t count, int n, int me, int64_t es) {
  const int64_t mine = ChunkOf(Interval{0, count}, n, me).size();
  const int64_t others = count - mine;
  return ByteCounters{(others + (n - 1) * mine) * es, ((n - 1) * mine + others) * es};
}
ByteCounters AllToAllBytes(std::span<const int64_t> sc, std::span<const int64_t> rc, int me, int64_t es) {
  const size_t m = static_cast<size_t>(me);
  return ByteCounters{(Sum(sc) - sc[m]) * es, (Sum(rc) - rc[m]) * es};
}
ByteCounters BroadcastBytes(int64_t count, int n, int me, int root, int64_t es) {
  return me == root ? ByteCounters{(n - 1) * count * es, 0} : ByteCounters{0, count * es};
}
ByteCounters SendRecvBytes(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, int me, int64_t es) {
  ByteCounters b;
  for (const SendSpec& s : sends) b.bytes_sent += s.peer == me ? 0 : s.count * es;
  for (const RecvSpec& r : recvs) b.bytes_received += r.peer == me ? 0 : r.count * es;
  return b;
}

Status RejectInGroup(const CallSite& site) {
  if (g_group_depth == 0) return Status();
  return FailedPreconditionError(site.Describe() +
                                 ": the host-buffer API blocks until completion and cannot run inside an NcclGroup; "
                                 "use the Device* calls");
}

Status RejectExactInGroup(const CallSite& site) {
  if (g_group_depth <= 0) return Status();
  return FailedPreconditionError(site.Describe() +
                                 ": exact reductions cannot run inside an NcclGroup (a kernel runs between two NCCL "
                                 "steps); call it outside the group or use NcclReduction::kNative");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Shared steps of the calls.

Status NcclCommunicator::NcclGrouped(const char* what, const std::function<Status()>& body) {
  MF_RETURN_IF_ERROR(CheckNcclCall(ncclGroupStart(), "ncclGroupStart", what));
  const Status s = body();
  const Status end = CheckNcclCall(ncclGroupEnd(), "ncclGroupEnd", what);
  return s.ok() ? end : s;
}

Status NcclCommunicator::Begin(const char* what, const Status& checked, bool host) {
  MF_RETURN_IF_ERROR(checked);
  if (host) MF_RETURN_IF_ERROR(RejectInGroup(Site(what)));
  return Enter(what);
}

Status NcclCommunicator::RunStaged(const char* what, const void* send, int64_t send_bytes, void* recv,
                                   int64_t recv_bytes, bool in_place,
                                   const std::function<Status(std::byte* dsend, std::byte* drecv)>& enqueue) {
  {
    Staging st(*this, stream_, what);
    MF_ASSIGN_OR_RETURN(std::byte* dsend, st.Alloc(in_place ? std::max(send_bytes, recv_bytes) : send_bytes));
    std::byte* drecv = dsend;
    if (!in_place) {
      MF_ASSIGN_OR_RETURN(drecv, st.Alloc(recv_bytes));
    }
    MF_RETURN_IF_ERROR(st.Copy(dsend, send, send_bytes));
    MF_RETURN_IF_ERROR(enqueue(dsend, drecv));
    MF_RETURN_IF_ERROR(Synchronize(stream_, what));
    MF_RETURN_IF_ERROR(st.Copy(recv, drecv, recv_bytes));
  }
  return Synchronize(stream_, what);
}

// ---------------------------------------------------------------------------------------------
// Enqueue helpers (device pointers, arguments already checked).

Status NcclCommunicator::EnqueueAllGatherV(const char* what, const void* send, int64_t send_count, void* recv,
                                           std::span<const int64_t> counts, DType dtype, cudaStream_t stream) {
  const int n = size();
  const int64_t es = DTypeSize(dtype);
  const std::vector<int64_t> off = Offsets(counts);
  const int64_t total = Sum(counts);
  if (total == 0) return Status();
  Staging st(*this, stream, what);
  const void* src = send;
  void* const my_block = At(recv, off[static_cast<size_t>(rank_)] * es);
  if (send != my_block && Overlap(send, send_count * es, recv, total * es)) {
    if (g_group_depth > 0) {
      return InvalidArgumentError(Describe(what) +
                                  ": send overlaps recv inside an NcclGroup (only the in-place form send == recv + "
                                  "offset of this rank's block is allowed there)");
    }
    MF_ASSIGN_OR_RETURN(std::byte* copy, st.Alloc(send_count * es));
    MF_RETURN_IF_ERROR(st.Copy(copy, send, send_count * es));
    src = copy;
  }
  if (n == 1) return st.Copy(recv, src, send_count * es);
  if (AllEqual(counts)) {
    return CheckNcclCall(ncclAllGather(src, recv, static_cast<size_t>(counts[0] * es), ncclUint8, comm_, stream),
                         "ncclAllGather", what);
  }
  return NcclGrouped(what, [&]() -> Status {
    for (int r = 0; r < n; ++r) {
      const int64_t c = counts[static_cast<size_t>(r)];
      if (c == 0) continue;
      void* block = At(recv, off[static_cast<size_t>(r)] * es);
      MF_RETURN_IF_ERROR(CheckNcclCall(
          ncclBroadcast(r == rank_ ? src : block, block, static_cast<size_t>(c * es), ncclUint8, r, comm_, stream),
          "ncclBroadcast", what));
    }
    return Status();
  });
}

Status NcclCommunicator::EnqueueReduceScatterV(const char* what, const void* send, std::span<const int64_t> counts,
                                               void* recv, DType dtype, ReduceOp op, cudaStream_t stream) {
  const int n = size();
  const int64_t es = DTypeSize(dtype);
  const std::vector<int64_t> off = Offsets(counts);
  const int64_t mine = counts[static_cast<size_t>(rank_)];
  if (Sum(counts) == 0) return Status();
  if (options_.reduction == NcclReduction::kNative) {
    MF_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    if (AllEqual(counts)) {
      return CheckNcclCall(ncclReduceScatter(send, recv, static_cast<size_t>(mine), type, NcclOp(op), comm_, stream),
                           "ncclReduceScatter", what);
    }
    return NcclGrouped(what, [&]() -> Status {
      for (int r = 0; r < n; ++r) {
        const int64_t c = counts[static_cast<size_t>(r)];
        if (c == 0) continue;
        const void* block = At(send, off[static_cast<size_t>(r)] * es);
        // recvbuff is only used on the root; others pass their send block (never null).
        void* dst = r == rank_ ? recv : const_cast<void*>(block);
        MF_RETURN_IF_ERROR(CheckNcclCall(
            ncclReduce(block, dst, static_cast<size_t>(c), type, NcclOp(op), r, comm_, stream), "ncclReduce", what));
      }
      return Status();
    });
  }
  MF_RETURN_IF_ERROR(RejectExactInGroup(Site(what)));
  Staging st(*this, stream, what);
  // Block q of every rank goes to rank q; rank me folds the n blocks in rank order.
  MF_ASSIGN_OR_RETURN(std::byte* gathered, st.Alloc(n * mine * es));
  MF_RETURN_IF_ERROR(NcclGrouped(what, [&]() -> Status {
    for (int q = 0; q < n; ++q) {
      if (q == rank_) continue;
      const int64_t c = counts[static_cast<size_t>(q)];
      if (c > 0) {
        MF_RETURN_IF_ERROR(CheckNcclCall(ncclSend(At(send, off[static_cast<size_t>(q)] * es),
                                                  static_cast<size_t>(c * es), ncclUint8, q, comm_, stream),
                                         "ncclSend", what));
      }
      if (mine > 0) {
        MF_RETURN_IF_ERROR(CheckNcclCall(
            ncclRecv(gathered + q * mine * es, static_cast<size_t>(mine * es), ncclUint8, q, comm_, stream),
            "ncclRecv", what));
      }
    }
    return Status();
  }));
  if (mine == 0) return Status();
  MF_RETURN_IF_ERROR(st.Copy(gathered + rank_ * mine * es, At(send, off[static_cast<size_t>(rank_)] * es), mine * es));
  const Status red = ReduceOnDevice(gathered, n, mine, mine, recv, dtype, op, stream);
  return red.ok() ? red : Break(red.WithContext(Describe(what)));
}

Status NcclCommunicator::EnqueueAllReduce(const char* what, const void* send, void* recv, int64_t count, DType dtype,
                                          ReduceOp op, cudaStream_t stream) {
  if (count == 0) return Status();
  const int n = size();
  const int64_t es = DTypeSize(dtype);
  if (options_.reduction == NcclReduction::kNative) {
    MF_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    return CheckNcclCall(ncclAllReduce(send, recv, static_cast<size_t>(count), type, NcclOp(op), comm_, stream),
                         "ncclAllReduce", what);
  }
  MF_RETURN_IF_ERROR(RejectExactInGroup(Site(what)));
  Staging st(*this, stream, what);
  if (n == 1) {
    // A fold over one input is the identity for every op (x / 1 == x; bf16 round trip is exact).
    return st.Copy(recv, send, count * es);
  }
  const std::vector<int64_t> chunks = ChunkCounts(count, n);
  const int64_t mine = chunks[static_cast<size_t>(rank_)];
  MF_ASSIGN_OR_RETURN(std::byte* reduced, st.Alloc(mine * es));
  MF_RETURN_IF_ERROR(EnqueueReduceScatterV(what, send, chunks, reduced, dtype, op, stream));
  return EnqueueAllGatherV(what, reduced, mine, recv, chunks, dtype, stream);
}

Status NcclCommunicator::EnqueueAllToAllV(const char* what, const void* send, std::span<const int64_t> send_counts,
                                          void* recv, std::span<const int64_t> recv_counts, DType dtype,
                                          cudaStream_t stream) {
  const int n = size();
  const int64_t es = DTypeSize(dtype);
  const std::vector<int64_t> soff = Offsets(send_counts), roff = Offsets(recv_counts);
  const int64_t send_total = Sum(send_counts), recv_total = Sum(recv_counts);
  Staging st(*this, stream, what);
  const void* src = send;
  if (Overlap(send, send_total * es, recv, recv_total * es)) {
    if (g_group_depth > 0) {
      return InvalidArgumentError(Describe(what) + ": send overlaps recv inside an NcclGroup");
    }
    MF_ASSIGN_OR_RETURN(std::byte* copy, st.Alloc(send_total * es));
    MF_RETURN_IF_ERROR(st.Copy(copy, send, send_total * es));
    src = copy;
  }
  const size_t me = static_cast<size_t>(rank_);
  MF_RETURN_IF_ERROR(st.Copy(At(recv, roff[me] * es), At(src, soff[me] * es), recv_counts[me] * es));
  if (n == 1) return Status();
  return NcclGrouped(what, [&]() -> Status {
    for (int q = 0; q < n; ++q) {
      if (q == rank_) continue;
      const size_t qi = static_cast<size_t>(q);
      if (send_counts[qi] > 0) {
        MF_RETURN_IF_ERROR(CheckNcclCall(
            ncclSend(At(src, soff[qi] * es), static_cast<size_t>(send_counts[qi] * es), ncclUint8, q, comm_, stream),
            "ncclSend", what));
      }
      if (recv_counts[qi] > 0) {
        MF_RETURN_IF_ERROR(CheckNcclCall(
            ncclRecv(At(recv, roff[qi] * es), static_cast<size_t>(recv_counts[qi] * es), ncclUint8, q, comm_, stream),
            "ncclRecv", what));
      }
    }
    return Status();
  });
}

Status NcclCommunicator::EnqueueSendRecv(const char* what, std::span<const SendSpec> sends,
                                         std::span<const RecvSpec> recvs, DType dtype, cudaStream_t stream) {
  const int64_t es = DTypeSize(dtype);
  Staging st(*this, stream, what);
  // Transfers to self pair up in order (CheckSendRecv verified the counts).
  std::vector<const SendSpec*> self_sends;
  std::vector<const RecvSpec*> self_recvs;
  for (const SendSpec& s : sends) {
    if (s.peer == rank_) self_sends.push_back(&s);
  }
  for (const RecvSpec& r : recvs) {
    if (r.peer == rank_) self_recvs.push_back(&r);
  }
  for (size_t k = 0; k < self_sends.size() && k < self_recvs.size(); ++k) {
    MF_RETURN_IF_ERROR(st.Copy(self_recvs[k]->buffer, self_sends[k]->buffer, self_sends[k]->count * es));
  }
  bool any = false;
  for (const SendSpec& s : sends) any = any || (s.peer != rank_ && s.count > 0);
  for (const RecvSpec& r : recvs) any = any || (r.peer != rank_ && r.count > 0);
  if (!any) return Status();
  return NcclGrouped(what, [&]() -> Status {
    for (const SendSpec& x : sends) {
      if (x.peer == rank_ || x.count == 0) continue;
      MF_RETURN_IF_ERROR(CheckNcclCall(
          ncclSend(x.buffer, static_cast<size_t>(x.count * es), ncclUint8, x.peer, comm_, stream), "ncclSend", what));
    }
    for (const RecvSpec& x : recvs) {
      if (x.peer == rank_ || x.count == 0) continue;
      MF_RETURN_IF_ERROR(CheckNcclCall(
          ncclRecv(x.buffer, static_cast<size_t>(x.count * es), ncclUint8, x.peer, comm_, stream), "ncclRecv", what));
    }
    return Status();
  });
}

Status NcclCommunicator::EnqueueBroadcast(const char* what, void* buffer, int64_t count, DType dtype, int root,
                                          cudaStream_t stream) {
  if (count <= 0 || size() <= 1) return Status();
  return CheckNcclCall(
      ncclBroadcast(buffer, buffer, static_cast<size_t>(count * DTypeSize(dtype)), ncclUint8, root, comm_, stream),
      "ncclBroadcast", what);
}

// ---------------------------------------------------------------------------------------------
// Device API.

Status NcclCommunicator::DeviceAllGatherV(const void* send, int64_t send_count, void* recv,
                                          std::span<const int64_t> recv_counts, DType dtype, cudaStream_t stream) {
  const char* what = "all_gather";
  MF_RETURN_IF_ERROR(Begin(what, CheckAllGather(Site(what), send, send_count, recv, recv_counts), /*host=*/false));
  MF_RETURN_IF_ERROR(EnqueueAllGatherV(what, send, send_count, recv, recv_counts, dtype, stream));
  return Counted(AllGatherBytes(recv_counts, rank_, DTypeSize(dtype)));
}

Status NcclCommunicator::DeviceReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv,
                                              DType dtype, ReduceOp op, cudaStream_t stream) {
  const char* what = "reduce_scatter";
  MF_RETURN_IF_ERROR(Begin(what, CheckReduceScatter(Site(what), send, counts, recv), /*host=*/false));
  MF_RETURN_IF_ERROR(EnqueueReduceScatterV(what, send, counts, recv, dtype, op, stream));
  return Counted(ReduceScatterBytes(counts, rank_, DTypeSize(dtype)));
}

Status NcclCommunicator::DeviceAllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                         cudaStream_t stream) {
  const char* what = "all_reduce";
  MF_RETURN_IF_ERROR(Begin(what, CheckAllReduce(Site(what), send, recv, count), /*host=*/false));
  MF_RETURN_IF_ERROR(EnqueueAllReduce(what, send, recv, count, dtype, op, stream));
  return Counted(AllReduceBytes(count, size(), rank_, DTypeSize(dtype)));
}

Status NcclCommunicator::DeviceAllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                                         std::span<const int64_t> recv_counts, DType dtype, cudaStream_t stream) {
  const char* what = "all_to_all";
  MF_RETURN_IF_ERROR(Begin(what, CheckAllToAll(Site(what), send, send_counts, recv, recv_counts), /*host=*/false));
  MF_RETURN_IF_ERROR(EnqueueAllToAllV(what, send, send_counts, recv, recv_counts, dtype, stream));
  return Counted(AllToAllBytes(send_counts, recv_counts, rank_, DTypeSize(dtype)));
}

Status NcclCommunicator::DeviceBroadcast(void* buffer, int64_t count, DType dtype, int root, cudaStream_t stream) {
  const char* what = "broadcast";
  MF_RETURN_IF_ERROR(Begin(what, CheckBroadcast(Site(what), buffer, count, root), /*host=*/false));
  MF_RETURN_IF_ERROR(EnqueueBroadcast(what, buffer, count, dtype, root, stream));
  return Counted(BroadcastBytes(count, size(), rank_, root, DTypeSize(dtype)));
}

Status NcclCommunicator::DeviceSendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype,
                                        cudaStream_t stream) {
  const char* what = "send_recv";
  MF_RETURN_IF_ERROR(Begin(what, CheckSendRecvArgs(Site(what), sends, recvs), /*host=*/false));
  MF_RETURN_IF_ERROR(EnqueueSendRecv(what, sends, recvs, dtype, stream));
  return Counted(SendRecvBytes(sends, recvs, rank_, DTypeSize(dtype)));
}

// ---------------------------------------------------------------------------------------------
// Host API: stage through device memory on the comm stream, wait with the timeout, copy out, wait.
// The first wait runs before the device-to-host copies because a copy into pageable host memory
// blocks the host until the stream reaches it, which would bypass the timeout.

Status NcclCommunicator::AllGatherV(const void* send, int64_t send_count, void* recv,
                                    std::span<const int64_t> recv_counts, DType dtype, CallerSite) {
  const char* what = "all_gather";
  MF_RETURN_IF_ERROR(Begin(what, CheckAllGather(Site(what), send, send_count, recv, recv_counts), /*host=*/true));
  const int64_t es = DTypeSize(dtype);
  MF_RETURN_IF_ERROR(RunStaged(what, send, send_count * es, recv, Sum(recv_counts) * es, /*in_place=*/false,
                               [&](std::byte* dsend, std::byte* drecv) {
                                 return EnqueueAllGatherV(what, dsend, send_count, drecv, recv_counts, dtype, stream_);
                               }));
  return Counted(AllGatherBytes(recv_counts, rank_, es));
}

Status NcclCommunicator::ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype,
                                        ReduceOp op, CallerSite) {
  const char* what = "reduce_scatter";
  MF_RETURN_IF_ERROR(Begin(what, CheckReduceScatter(Site(what), send, counts, recv), /*host=*/true));
  const int64_t es = DTypeSize(dtype);
  const int64_t mine = counts[static_cast<size_t>(rank_)];
  MF_RETURN_IF_ERROR(RunStaged(what, send, Sum(counts) * es, recv, mine * es, /*in_place=*/false,
                               [&](std::byte* dsend, std::byte* drecv) {
                                 return EnqueueReduceScatterV(what, dsend, counts, drecv, dtype, op, stream_);
                               }));
  return Counted(ReduceScatterBytes(counts, rank_, es));
}

Status NcclCommunicator::AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                   CallerSite) {
  const char* what = "all_reduce";
  MF_RETURN_IF_ERROR(Begin(what, CheckAllReduce(Site(what), send, recv, count), /*host=*/true));
  const int64_t es = DTypeSize(dtype);
  MF_RETURN_IF_ERROR(RunStaged(what, send, count * es, recv, count * es, /*in_place=*/true,
                               [&](std::byte* dbuf, std::byte*) {
                                 return EnqueueAllReduce(what, dbuf, dbuf, count, dtype, op, stream_);
                               }));
  return Counted(AllReduceBytes(count, size(), rank_, es));
}

Status NcclCommunicator::AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                                   std::span<const int64_t> recv_counts, DType dtype, CallerSite) {
  const char* what = "all_to_all";
  MF_RETURN_IF_ERROR(Begin(what, CheckAllToAll(Site(what), send, send_counts, recv, recv_counts), /*host=*/true));
  const int64_t es = DTypeSize(dtype);
  MF_RETURN_IF_ERROR(RunStaged(what, send, Sum(send_counts) * es, recv, Sum(recv_counts) * es, /*in_place=*/false,
                               [&](std::byte* dsend, std::byte* drecv) {
                                 return EnqueueAllToAllV(what, dsend, send_counts, drecv, recv_counts, dtype, stream_);
                               }));
  return Counted(AllToAllBytes(send_counts, recv_counts, rank_, es));
}

Status NcclCommunicator::Broadcast(void* buffer, int64_t count, DType dtype, int root, CallerSite) {
  const char* what = "broadcast";
  MF_RETURN_IF_ERROR(Begin(what, CheckBroadcast(Site(what), buffer, count, root), /*host=*/true));
  const int64_t es = DTypeSize(dtype);
  // One device buffer of count elements: the root copies its buffer in, the others copy the result out.
  const int64_t in_bytes = rank_ == root ? count * es : 0, out_bytes = rank_ == root ? 0 : count * es;
  MF_RETURN_IF_ERROR(RunStaged(what, buffer, in_bytes, buffer, out_bytes, /*in_place=*/true,
                               [&](std::byte* dbuf, std::byte*) {
                                 return EnqueueBroadcast(what, dbuf, count, dtype, root, stream_);
                               }));
  return Counted(BroadcastBytes(count, size(), rank_, root, es));
}

Status NcclCommunicator::Barrier(CallerSite) {
  const char* what = "barrier";
  MF_RETURN_IF_ERROR(Begin(what, Status(), /*host=*/true));
  if (size() == 1) return Synchronize(stream_, what);
  {
    Staging st(*this, stream_, what);
    MF_ASSIGN_OR_RETURN(std::byte* d, st.Alloc(sizeof(int32_t)));
    MF_RETURN_IF_ERROR(CheckCudaCall(cudaMemsetAsync(d, 0, sizeof(int32_t), stream_), "cudaMemsetAsync", what));
    MF_RETURN_IF_ERROR(
        CheckNcclCall(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce", what));
  }
  return Synchronize(stream_, what);
}

Status NcclCommunicator::SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) {
  const char* what = "send_recv";
  MF_RETURN_IF_ERROR(Begin(what, CheckSendRecvArgs(Site(what), sends, recvs), /*host=*/true));
  const int64_t es = DTypeSize(dtype);
  int64_t send_total = 0, recv_total = 0;
  for (const SendSpec& s : sends) send_total += s.count;
  for (const RecvSpec& r : recvs) recv_total += r.count;
  {
    Staging st(*this, stream_, what);
    MF_ASSIGN_OR_RETURN(std::byte* dsend, st.Alloc(send_total * es));
    MF_ASSIGN_OR_RETURN(std::byte* drecv, st.Alloc(recv_total * es));
    std::vector<SendSpec> dsends(sends.begin(), sends.end());
    std::vector<RecvSpec> drecvs(recvs.begin(), recvs.end());
    int64_t off = 0;
    for (SendSpec& s : dsends) {
      MF_RETURN_IF_ERROR(st.Copy(dsend + off * es, s.buffer, s.count * es));
      s.buffer = dsend + off * es;
      off += s.count;
    }
    off = 0;
    for (RecvSpec& r : drecvs) {
      r.buffer = drecv + off * es;
      off += r.count;
    }
    MF_RETURN_IF_ERROR(EnqueueSendRecv(what, dsends, drecvs, dtype, stream_));
    MF_RETURN_IF_ERROR(Synchronize(stream_, what));
    for (size_t i = 0; i < recvs.size(); ++i) {
      MF_RETURN_IF_ERROR(st.Copy(recvs[i].buffer, drecvs[i].buffer, recvs[i].count * es));
    }
  }
  MF_RETURN_IF_ERROR(Synchronize(stream_, what));
  return Counted(SendRecvBytes(sends, recvs, rank_, es));
}

StatusOr<std::shared_ptr<Communicator>> NcclCommunicator::Split(int color, int key, CallerSite) {
  const char* what = "split";
  MF_RETURN_IF_ERROR(Begin(what, Status(), /*host=*/true));
  const int n = size();
  // 1. Every member's (color, key): proves that all members arrived (bounded by the timeout) before
  //    the blocking ncclCommSplit, and gives the new group's world ranks.
  std::vector<int64_t> all(static_cast<size_t>(2 * n));
  const int64_t mine[2] = {color, key};
  const std::vector<int64_t> counts(static_cast<size_t>(n), 2);
  MF_RETURN_IF_ERROR(RunStaged(what, mine, sizeof(mine), all.data(), 2 * n * static_cast<int64_t>(sizeof(int64_t)),
                               /*in_place=*/false, [&](std::byte* dmine, std::byte* dall) {
                                 return EnqueueAllGatherV(what, dmine, 2, dall, counts, DType::kI64, stream_);
                               }));
  std::vector<int> members;  // group ranks of this color, ordered by (key, rank)
  if (color >= 0) {
    for (int r = 0; r < n; ++r) {
      if (all[static_cast<size_t>(2 * r)] == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all[static_cast<size_t>(2 * a + 1)] < all[static_cast<size_t>(2 * b + 1)];
    });
  }
  // 2. ncclCommSplit (NCCL orders the new ranks by (key, parent rank) too).
  ncclComm_t nc = nullptr;
  MF_RETURN_IF_ERROR(
      CheckNcclCall(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, nullptr), "ncclCommSplit",
                    what));
  if (color < 0) {
    if (nc != nullptr) (void)ncclCommDestroy(nc);
    return std::shared_ptr<Communicator>();
  }
  int new_rank = -1, new_size = 0;
  Status s = CheckNcclCall(ncclCommUserRank(nc, &new_rank), "ncclCommUserRank", what);
  if (s.ok()) s = CheckNcclCall(ncclCommCount(nc, &new_size), "ncclCommCount", what);
  std::vector<int> world;
  for (int r : members) world.push_back(world_ranks_[static_cast<size_t>(r)]);
  if (s.ok() && (new_size != static_cast<int>(members.size()) || new_rank < 0 || new_rank >= new_size ||
                 members[static_cast<size_t>(new_rank)] != rank_)) {
    s = Break(InternalError(Describe(what) + ": ncclCommSplit gave rank " + std::to_string(new_rank) + " of " +
                            std::to_string(new_size) + " but (color, key) ordering gives world ranks " +
                            ListString(world) + " with " + RankName(rank_) + " in it"));
  }
  if (!s.ok()) {
    (void)ncclCommDestroy(nc);
    return s;
  }
  std::shared_ptr<NcclCommunicator> child(
      new NcclCommunicator(nc, device_, new_rank, std::move(world), options_, state_));
  MF_RETURN_IF_ERROR(child->Init());
  return std::shared_ptr<Communicator>(std::move(child));
}

// ---------------------------------------------------------------------------------------------

NcclGroup::NcclGroup() {
  const ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) {
    ++g_group_depth;
  } else {
    start_ = InternalError(std::string("ncclGroupStart failed: ") + NcclErrorString(r, nullptr));
  }
}

NcclGroup::~NcclGroup() {
  if (!ended_) (void)End();
}

Status NcclGroup::End() {
  if (ended_) return FailedPreconditionError("NcclGroup::End called twice");
  ended_ = true;
  if (!start_.ok()) return start_;
  --g_group_depth;
  const ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess) return InternalError(std::string("ncclGroupEnd failed: ") + NcclErrorString(r, nullptr));
  return Status();
}

int NcclGroup::Depth() { return g_group_depth; }

// ---------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<NcclWorld>> NcclWorld::Create(std::vector<int> devices, NcclOptions opts) {
  if (opts.timeout.count() <= 0) {
    return InvalidArgumentError("NcclWorld::Create: timeout " + std::to_string(opts.timeout.count()) +
                                " ms must be positive");
  }
  MF_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (count == 0) return UnavailableError("NcclWorld::Create: " + NoCudaDeviceReason());
  if (devices.empty()) {
    for (int d = 0; d < count; ++d) devices.push_back(d);
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0 || devices[i] >= count) {
      return InvalidArgumentError("NcclWorld::Create: device " + std::to_string(devices[i]) + " (rank " +
                                  std::to_string(i) + ") outside [0, " + std::to_string(count) +
                                  ") (visible CUDA devices)");
    }
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) {
        return InvalidArgumentError("NcclWorld::Create: device " + std::to_string(devices[i]) +
                                    " is listed for ranks " + std::to_string(j) + " and " + std::to_string(i) +
                                    "; NCCL does not support two ranks of one communicator on one GPU");
      }
    }
  }
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const ncclResult_t r = ncclCommInitAll(comms.data(), n, devices.data());
  if (r != ncclSuccess) {
    return InternalError("ncclCommInitAll failed: " + NcclErrorString(r, nullptr) + " (devices " +
                         ListString(devices) + ")");
  }
  std::unique_ptr<NcclWorld> world(new NcclWorld());
  world->devices_ = devices;
  world->state_ = std::make_shared<nccl_internal::WorldState>(n);
  std::vector<int> ranks(devices.size());
  for (int i = 0; i < n; ++i) ranks[static_cast<size_t>(i)] = i;
  for (int i = 0; i < n; ++i) {
    world->comms_.push_back(std::shared_ptr<NcclCommunicator>(
        new NcclCommunicator(comms[static_cast<size_t>(i)], devices[static_cast<size_t>(i)], i, ranks, opts,
                             world->state_)));
  }
  for (auto& c : world->comms_) MF_RETURN_IF_ERROR(c->Init());
  return world;
}

NcclWorld::~NcclWorld() = default;

Status NcclWorld::Run(std::function<Status(NcclCommunicator& world_comm)> fn) {
  if (!fn) return InvalidArgumentError("NcclWorld::Run: fn is empty");
  std::lock_guard<std::mutex> lock(run_mu_);
  state_->failed_rank.store(-1);
  const int n = size();
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      NcclCommunicator& comm = *comms_[static_cast<size_t>(i)];
      Status s = CheckCuda(cudaSetDevice(comm.cuda_ordinal()), "cudaSetDevice", "NcclWorld::Run");
      if (s.ok()) s = fn(comm);
      if (!s.ok()) {
        int expected = -1;
        state_->failed_rank.compare_exchange_strong(expected, i);
      }
      results[static_cast<size_t>(i)] = std::move(s);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    if (!results[static_cast<size_t>(i)].ok()) {
      return results[static_cast<size_t>(i)].WithContext("rank " + std::to_string(i));
    }
  }
  return Status();
}

ByteCounters NcclWorld::counters(int world_rank) const {
  if (world_rank < 0 || world_rank >= size()) return {};
  return ByteCounters{state_->sent[static_cast<size_t>(world_rank)].load(),
                      state_->received[static_cast<size_t>(world_rank)].load()};
}

void NcclWorld::ResetCounters() {
  for (int i = 0; i < size(); ++i) {
    state_->sent[static_cast<size_t>(i)].store(0);
    state_->received[static_cast<size_t>(i)].store(0);
  }
}

// ---- Stream-ordered forms: the device API on the stream's cudaStream_t ----

namespace {
// The stream's cudaStream_t after CheckStream; InvalidArgument for a stream of the GPU without one
// (a host stream: the NCCL work would go to the legacy default stream, outside the stream's order).
StatusOr<cudaStream_t> CudaStreamOf(const Stream& stream, const char* what) {
  if (stream.native_handle() != nullptr) return static_cast<cudaStream_t>(stream.native_handle());
  return InvalidArgumentError(std::string("nccl ") + what + ": stream '" + stream.name() + "' of " +
                              stream.device().ToString() + " is not a CUDA stream (runtime/cuda/cuda_device.h)");
}
}  // namespace

Status NcclCommunicator::AllGatherVOnStream(const void* send, int64_t send_count, void* recv,
                                            std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                                            CallerSite) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_gather"));
  MF_ASSIGN_OR_RETURN(cudaStream_t s, CudaStreamOf(stream, "all_gather"));
  return DeviceAllGatherV(send, send_count, recv, recv_counts, dtype, s);
}

Status NcclCommunicator::ReduceScatterVOnStream(const void* send, std::span<const int64_t> counts, void* recv,
                                                DType dtype, ReduceOp op, Stream& stream, CallerSite) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "reduce_scatter"));
  MF_ASSIGN_OR_RETURN(cudaStream_t s, CudaStreamOf(stream, "reduce_scatter"));
  return DeviceReduceScatterV(send, counts, recv, dtype, op, s);
}

Status NcclCommunicator::AllReduceOnStream(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                           Stream& stream, CallerSite) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_reduce"));
  MF_ASSIGN_OR_RETURN(cudaStream_t s, CudaStreamOf(stream, "all_reduce"));
  return DeviceAllReduce(send, recv, count, dtype, op, s);
}

Status NcclCommunicator::AllToAllVOnStream(const void* send, std::span<const int64_t> send_counts, void* recv,
                                           std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                                           CallerSite) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_to_all"));
  MF_ASSIGN_OR_RETURN(cudaStream_t s, CudaStreamOf(stream, "all_to_all"));
  return DeviceAllToAllV(send, send_counts, recv, recv_counts, dtype, s);
}

Status NcclCommunicator::BroadcastOnStream(void* buffer, int64_t count, DType dtype, int root, Stream& stream,
                                           CallerSite) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "broadcast"));
  MF_ASSIGN_OR_RETURN(cudaStream_t s, CudaStreamOf(stream, "broadcast"));
  return DeviceBroadcast(buffer, count, dtype, root, s);
}

Status NcclCommunicator::SendRecvOnStream(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                                          DType dtype, Stream& stream) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "send_recv"));
  MF_ASSIGN_OR_RETURN(cudaStream_t s, CudaStreamOf(stream, "send_recv"));
  return DeviceSendRecv(sends, recvs, dtype, s);
}

}  // namespace meshflow
