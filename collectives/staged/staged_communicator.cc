#include "meshflow/collectives/staged/staged_communicator.h"

#include <new>
#include <string>
#include <utility>

#include "meshflow/collectives/call_check.h"

namespace meshflow {
namespace {

// "staged <what> on group [...]" in argument errors (collectives/call_check.h wording).
CallSite Site(const Communicator& c, const char* what) { return CallSite{"staged ", what, c.world_ranks(), c.rank()}; }

int64_t Sum(std::span<const int64_t> counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Creation, scratch

StatusOr<std::shared_ptr<StagedCommunicator>> StagedCommunicator::Create(std::shared_ptr<Communicator> inner,
                                                                         Device device) {
  if (inner == nullptr) return InvalidArgumentError("StagedCommunicator: null communicator");
  if (!inner->device().is_host()) {
    return InvalidArgumentError("StagedCommunicator: the " + inner->backend() + " communicator moves " +
                                inner->device().ToString() + " buffers; wrap a host communicator (threads, mpi)");
  }
  if (device.is_host()) {
    return InvalidArgumentError("StagedCommunicator: device host needs no staging; use the " + inner->backend() +
                                " communicator itself");
  }
  MF_ASSIGN_OR_RETURN(DeviceRuntime * runtime, GetDeviceRuntime(device));
  return std::shared_ptr<StagedCommunicator>(new StagedCommunicator(std::move(inner), device, runtime));
}

StatusOr<std::shared_ptr<StagedCommunicator>> StagedCommunicator::Create(Communicator& inner, Device device) {
  return Create(std::shared_ptr<Communicator>(&inner, [](Communicator*) {}), device);
}

StagedCommunicator::~StagedCommunicator() { (void)WaitForScratch(); }

Status StagedCommunicator::WaitForScratch() {
  if (scratch_in_use_ == nullptr) return Status::Ok();
  std::shared_ptr<Event> e = std::move(scratch_in_use_);
  scratch_in_use_ = nullptr;
  return e->Synchronize();
}

Status StagedCommunicator::ReleaseScratch() {
  Status s = WaitForScratch();
  scratch_.reset();
  scratch_capacity_ = 0;
  return s;
}

StatusOr<std::byte*> StagedCommunicator::AcquireScratch(int64_t bytes) {
  // A failed copy out of the scratch broke its stream (the error is the stream's); the scratch is
  // free either way.
  (void)WaitForScratch();
  if (bytes > scratch_capacity_) {
    scratch_.reset();
    scratch_capacity_ = 0;
    scratch_.reset(new (std::nothrow) std::byte[static_cast<size_t>(bytes)]);
    if (scratch_ == nullptr) {
      return ResourceExhaustedError("staged collective on " + device_.ToString() + ": no host memory for " +
                                    std::to_string(bytes) + " bytes of scratch");
    }
    scratch_capacity_ = bytes;
  }
  return scratch_.get();
}

Status StagedCommunicator::Stage(Stream& stream, int64_t scratch_bytes, std::span<const CopyIn> in,
                                 const std::function<Status(std::byte* scratch)>& run, std::span<const CopyOut> out) {
  MF_ASSIGN_OR_RETURN(std::byte* host, AcquireScratch(scratch_bytes));
  // A stream with a native handle queues the copies (they complete later, in its order); one
  // without runs them at once (runtime/device_runtime.h, ordering rule).
  const bool queued = stream.native_handle() != nullptr;
  bool copied_in = false;
  for (const CopyIn& c : in) {
    if (c.bytes == 0) continue;
    Status s = runtime_->Copy(host + c.offset, c.device, c.bytes, stream);
    if (!s.ok()) {
      if (queued && copied_in) (void)stream.Synchronize();  // earlier copies still write the scratch
      return s;
    }
    copied_in = true;
  }
  if (queued && copied_in) MF_RETURN_IF_ERROR(stream.Synchronize());
  MF_RETURN_IF_ERROR(run(host));
  bool copied_out = false;
  Status result;
  for (const CopyOut& c : out) {
    if (c.bytes == 0) continue;
    result = runtime_->Copy(c.device, host + c.offset, c.bytes, stream);
    if (!result.ok()) break;
    copied_out = true;
  }
  if (queued && copied_out) {
    StatusOr<std::shared_ptr<Event>> e = stream.RecordEvent();
    if (e.ok()) {
      scratch_in_use_ = std::move(*e);
    } else {
      (void)stream.Synchronize();  // no event: wait here instead
      if (result.ok()) result = e.status();
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Blocking forms: forwarded

Status StagedCommunicator::AllGatherV(const void* send, int64_t send_count, void* recv,
                                      std::span<const int64_t> recv_counts, DType dtype, CallerSite where) {
  return inner_->AllGatherV(send, send_count, recv, recv_counts, dtype, where);
}

Status StagedCommunicator::ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype,
                                          ReduceOp op, CallerSite where) {
  return inner_->ReduceScatterV(send, counts, recv, dtype, op, where);
}

Status StagedCommunicator::AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                     CallerSite where) {
  return inner_->AllReduce(send, recv, count, dtype, op, where);
}

Status StagedCommunicator::AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                                     std::span<const int64_t> recv_counts, DType dtype, CallerSite where) {
  return inner_->AllToAllV(send, send_counts, recv, recv_counts, dtype, where);
}

Status StagedCommunicator::AllToAllStrided(const void* send, std::span<const StridedBlock> send_blocks, void* recv,
                                           std::span<const StridedBlock> recv_blocks, DType dtype, CallerSite where) {
  return inner_->AllToAllStrided(send, send_blocks, recv, recv_blocks, dtype, where);
}

Status StagedCommunicator::Broadcast(void* buffer, int64_t count, DType dtype, int root, CallerSite where) {
  return inner_->Broadcast(buffer, count, dtype, root, where);
}

Status StagedCommunicator::Barrier(CallerSite where) { return inner_->Barrier(where); }

Status StagedCommunicator::SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) {
  return inner_->SendRecv(sends, recvs, dtype);
}

StatusOr<std::shared_ptr<Communicator>> StagedCommunicator::Split(int color, int key, CallerSite where) {
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> sub, inner_->Split(color, key, where));
  if (sub == nullptr) return sub;
  return std::shared_ptr<Communicator>(new StagedCommunicator(std::move(sub), device_, runtime_));
}

// ---------------------------------------------------------------------------------------------
// Stream-ordered forms: staged through the scratch

Status StagedCommunicator::AllGatherVOnStream(const void* send, int64_t send_count, void* recv,
                                              std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                                              CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_gather"));
  const CallSite site = Site(*this, "all_gather");
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  MF_RETURN_IF_ERROR(CheckSendCount(site, send_count, recv_counts));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, send_count));
  const int64_t es = DTypeSize(dtype);
  const int64_t send_bytes = send_count * es, recv_bytes = Sum(recv_counts) * es;
  const CopyIn in[] = {{send, 0, send_bytes}};
  const CopyOut out[] = {{recv, send_bytes, recv_bytes}};
  return Stage(stream, send_bytes + recv_bytes, in, [&](std::byte* host) {
    return inner_->AllGatherV(host, send_count, host + send_bytes, recv_counts, dtype, where);
  }, out);
}

Status StagedCommunicator::ReduceScatterVOnStream(const void* send, std::span<const int64_t> counts, void* recv,
                                                  DType dtype, ReduceOp op, Stream& stream, CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "reduce_scatter"));
  MF_RETURN_IF_ERROR(CheckCounts(Site(*this, "reduce_scatter"), "counts", counts));
  const int64_t es = DTypeSize(dtype);
  const int64_t send_bytes = Sum(counts) * es, recv_bytes = counts[static_cast<size_t>(rank())] * es;
  const CopyIn in[] = {{send, 0, send_bytes}};
  const CopyOut out[] = {{recv, send_bytes, recv_bytes}};
  return Stage(stream, send_bytes + recv_bytes, in, [&](std::byte* host) {
    return inner_->ReduceScatterV(host, counts, host + send_bytes, dtype, op, where);
  }, out);
}

Status StagedCommunicator::AllReduceOnStream(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                             Stream& stream, CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_reduce"));
  MF_RETURN_IF_ERROR(CheckBuffer(Site(*this, "all_reduce"), "send", send, count));
  const int64_t bytes = count * DTypeSize(dtype);
  const CopyIn in[] = {{send, 0, bytes}};
  const CopyOut out[] = {{recv, 0, bytes}};
  // In place on the scratch: one buffer whether or not send == recv.
  return Stage(stream, bytes, in, [&](std::byte* host) {
    return inner_->AllReduce(host, host, count, dtype, op, where);
  }, out);
}

Status StagedCommunicator::AllToAllVOnStream(const void* send, std::span<const int64_t> send_counts, void* recv,
                                             std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                                             CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_to_all"));
  const CallSite site = Site(*this, "all_to_all");
  MF_RETURN_IF_ERROR(CheckCounts(site, "send_counts", send_counts));
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  const int64_t es = DTypeSize(dtype);
  const int64_t send_bytes = Sum(send_counts) * es, recv_bytes = Sum(recv_counts) * es;
  const CopyIn in[] = {{send, 0, send_bytes}};
  const CopyOut out[] = {{recv, send_bytes, recv_bytes}};
  return Stage(stream, send_bytes + recv_bytes, in, [&](std::byte* host) {
    return inner_->AllToAllV(host, send_counts, host + send_bytes, recv_counts, dtype, where);
  }, out);
}

Status StagedCommunicator::BroadcastOnStream(void* buffer, int64_t count, DType dtype, int root, Stream& stream,
                                             CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "broadcast"));
  const CallSite site = Site(*this, "broadcast");
  MF_RETURN_IF_ERROR(CheckRoot(site, root));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "buffer", buffer, count));
  const int64_t bytes = count * DTypeSize(dtype);
  const bool is_root = rank() == root;
  // The root's buffer is the source and stays as it is; the others' is overwritten.
  const CopyIn in[] = {{buffer, 0, is_root ? bytes : 0}};
  const CopyOut out[] = {{buffer, 0, is_root ? 0 : bytes}};
  return Stage(stream, bytes, in, [&](std::byte* host) {
    return inner_->Broadcast(host, count, dtype, root, where);
  }, out);
}

Status StagedCommunicator::SendRecvOnStream(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                                            DType dtype, Stream& stream) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "send_recv"));
  const CallSite site = Site(*this, "send_recv");
  MF_RETURN_IF_ERROR(CheckSendRecv(
      site, sends, recvs,
      [&](const std::string& name, const void* buffer, int64_t count) {
        return CheckSpecBuffer(site, name, buffer, count);
      },
      nullptr));
  // Every send, then every receive, back to back in the scratch.
  const int64_t es = DTypeSize(dtype);
  std::vector<CopyIn> in;
  std::vector<CopyOut> out;
  std::vector<SendSpec> host_sends(sends.begin(), sends.end());
  std::vector<RecvSpec> host_recvs(recvs.begin(), recvs.end());
  int64_t offset = 0;
  for (const SendSpec& s : sends) {
    in.push_back({s.buffer, offset, s.count * es});
    offset += s.count * es;
  }
  for (const RecvSpec& r : recvs) {
    out.push_back({r.buffer, offset, r.count * es});
    offset += r.count * es;
  }
  return Stage(stream, offset, in, [&](std::byte* host) {
    for (size_t i = 0; i < sends.size(); ++i) host_sends[i].buffer = host + in[i].offset;
    for (size_t i = 0; i < recvs.size(); ++i) host_recvs[i].buffer = host + out[i].offset;
    return inner_->SendRecv(host_sends, host_recvs, dtype);
  }, out);
}

}  // namespace meshflow
