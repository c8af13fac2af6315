// StagedCommunicator: collectives on device buffers through a host communicator, staged in host
// memory.
//
// Overview. NCCL needs one GPU per rank: since NCCL 2.5 a communicator with two ranks on one GPU
// fails with "Duplicate GPU detected" (NVIDIA/nccl#418). A StagedCommunicator serves ranks whose
// buffers live on a device but that cannot use NCCL, in particular several in-process ranks of a
// ThreadWorld sharing ONE GPU. It wraps a host communicator (threads or MPI) and a Device:
//   - device() is the wrapped device, so a RankContext on it (runtime/rank_context.h) runs on that
//     device: device tensors, the device's streams, allocator and byte operations;
//   - the blocking forms (host buffers) forward to the wrapped communicator, and so do Barrier and
//     the byte counters (the staged collectives move exactly the wrapped collectives' bytes);
//   - Split splits the wrapped communicator and wraps the result (same device);
//   - the stream-ordered forms (what the plan executor calls) stage: in the stream's order they
//     copy the device inputs into host scratch (DeviceRuntime::Copy on the stream), wait for the
//     stream (Stream::Synchronize; a stream that runs byte operations at once, such as the fake
//     GPU's host streams, needs no wait), run the wrapped blocking collective on host memory and
//     copy the results back to the device buffers (DeviceRuntime::Copy on the stream). Like the
//     host backends' stream-ordered forms they block and must be called from inside work running
//     on the stream (Stream::Enqueue / RunNow; on a CUDA stream that is any call, work runs at
//     once). Any pointer the device's Copy accepts works, host memory included.
// It uses only the Communicator, Stream and DeviceRuntime interfaces: no CUDA dependency.
//
//   // The ranks of a ThreadWorld all on one GPU (NCCL would refuse them); global: a host tensor,
//   // from / to: layouts on `mesh`; results: one host Tensor per rank.
//   MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
//     MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged,
//                         StagedCommunicator::Create(comm, Device::Cuda(0)));
//     MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(staged, mesh));
//     MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, comm.world_rank()));
//     MF_ASSIGN_OR_RETURN(Tensor dev, x.local().CopyTo(ctx.device(), ctx.compute_stream_ptr()));
//     MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, DType::kF32));
//     MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, dev));     // dev: this rank's part of `to`, on cuda:0
//     MF_ASSIGN_OR_RETURN(results[comm.world_rank()], dev.ToHost());
//     return Status::Ok();
//   }));
//
// Host scratch. Each communicator (the world's and every split's) owns one host buffer, grown to
// the largest staged collective it ran (inputs + outputs; scratch_bytes()) and reused. The copies
// back to the device read it after the call returned, so the next staged call, ReleaseScratch()
// and the destructor first wait for an event recorded after them (on a stream without a native
// handle they completed before the call returned). The caller keeps the device buffers alive
// until the stream ran past the call, as with any stream-ordered work.
//
// Costs, per stream-ordered collective: a device-to-host copy of the inputs and a host-to-device
// copy of the results through pageable host memory (the driver stages them through its own pinned
// buffers: a few GB/s, not NVLink speed); one host synchronization of the stream, which drains every
// device kernel enqueued before it (compute issued before a collective cannot overlap with it, and
// the rank's thread blocks meanwhile); the wrapped collective on the host (threads: memcpy between
// ranks' scratch; MPI: the network); host scratch as above. NCCL moves the same bytes GPU to GPU
// without any host synchronization, so use NCCL whenever every rank has a GPU of its own.
//
// When launch/ should use it: for a GPU world whose ranks share devices: an in-process world of
// --nproc threads with more ranks than visible GPUs (rank r on Device::Cuda(r % devices), e.g.
// testing a 4-rank plan on a 1-GPU machine), or processes of one host under mpirun/srun that share a
// GPU (NCCL refuses those too); and for ranks on GPUs when NCCL is unavailable. One rank per GPU:
// NcclCommunicator (collectives/nccl/nccl_communicator.h).
//
// Limits. Communicator::AllToAllStrided(..., Stream&) is not virtual: it runs the blocking
// AllToAllStrided on its buffers, which here must then be host memory. strided_all_to_all_is_direct()
// is false, so the plan executor packs strided pieces on the device and calls AllToAllV instead.
//
// Errors (Create): a null communicator, a communicator whose device() is not the host (e.g. NCCL),
// a host `device` (INVALID_ARGUMENT naming them); `device`'s runtime not linked in or absent
// (UNAVAILABLE, from GetDeviceRuntime). Stream-ordered calls: a stream of another device and bad
// counts (INVALID_ARGUMENT, collectives/call_check.h wording, "staged <collective> on group ..."),
// no host memory for the scratch (RESOURCE_EXHAUSTED), the stream's error, the wrapped
// collective's errors, the device runtime's copy errors.
//
// Threading: as the wrapped communicator's (one thread at a time); the stream-ordered calls of one
// communicator share its scratch, so they must not run concurrently (a rank's communication
// stream runs them in order).
#ifndef MESHFLOW_COLLECTIVES_STAGED_STAGED_COMMUNICATOR_H_
#define MESHFLOW_COLLECTIVES_STAGED_STAGED_COMMUNICATOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

class StagedCommunicator final : public Communicator {
 public:
  // Wraps `inner` (a host communicator) for buffers on `device`. Errors: see the file comment.
  static StatusOr<std::shared_ptr<StagedCommunicator>> Create(std::shared_ptr<Communicator> inner, Device device);
  // Does not own `inner` (e.g. ThreadWorld::Run's communicator): it must outlive the result.
  static StatusOr<std::shared_ptr<StagedCommunicator>> Create(Communicator& inner, Device device);

  // Waits for the copies that still read the scratch, then frees it.
  ~StagedCommunicator() override;
  StagedCommunicator(const StagedCommunicator&) = delete;
  StagedCommunicator& operator=(const StagedCommunicator&) = delete;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int world_rank() const override { return inner_->world_rank(); }
  const std::vector<int>& world_ranks() const override { return inner_->world_ranks(); }
  // The wrapped backend's name plus "+staged" (e.g. "threads+staged").
  std::string backend() const override { return inner_->backend() + "+staged"; }
  Device device() const override { return device_; }

  // The stream-ordered overloads of the base class (hidden by the overrides below otherwise).
  using Communicator::AllGatherV;
  using Communicator::AllReduce;
  using Communicator::AllToAllStrided;
  using Communicator::AllToAllV;
  using Communicator::Broadcast;
  using Communicator::ReduceScatterV;
  using Communicator::SendRecv;

  // ---- Blocking forms: host buffers, forwarded to the wrapped communicator ----
  Status AllGatherV(const void* send, int64_t send_count, void* recv, std::span<const int64_t> recv_counts,
                    DType dtype, CallerSite where = CallerSite::Current()) override;
  Status ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype, ReduceOp op,
                        CallerSite where = CallerSite::Current()) override;
  Status AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                   CallerSite where = CallerSite::Current()) override;
  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype,
                   CallerSite where = CallerSite::Current()) override;
  Status AllToAllStrided(const void* send, std::span<const StridedBlock> send_blocks, void* recv,
                         std::span<const StridedBlock> recv_blocks, DType dtype,
                         CallerSite where = CallerSite::Current()) override;
  // False: see Limits in the file comment.
  bool strided_all_to_all_is_direct() const override { return false; }
  Status Broadcast(void* buffer, int64_t count, DType dtype, int root,
                   CallerSite where = CallerSite::Current()) override;
  Status Barrier(CallerSite where = CallerSite::Current()) override;
  Status SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) override;
  // Splits the wrapped communicator and wraps the result (nullptr for a negative color).
  StatusOr<std::shared_ptr<Communicator>> Split(
      int color, int key, CallerSite where = CallerSite::Current()) override;

  ByteCounters counters() const override { return inner_->counters(); }
  void ResetCounters() override { inner_->ResetCounters(); }

  Communicator& inner() { return *inner_; }
  // Bytes of host scratch this communicator holds (its splits hold their own).
  int64_t scratch_bytes() const { return scratch_capacity_; }
  // Waits for the copies that read the scratch, then frees it; the next staged call allocates
  // again. Returns the error of those copies, if any.
  Status ReleaseScratch();

 protected:
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
  // A device range copied into the scratch at `offset` before the collective, or out of it after.
  struct CopyIn {
    const void* device;
    int64_t offset;
    int64_t bytes;
  };
  struct CopyOut {
    void* device;
    int64_t offset;
    int64_t bytes;
  };

  StagedCommunicator(std::shared_ptr<Communicator> inner, Device device, DeviceRuntime* runtime)
      : inner_(std::move(inner)), device_(device), runtime_(runtime) {}

  // One staged collective on `stream`: copies `in` into a scratch of `scratch_bytes`, waits for
  // them, runs `run` on the scratch, copies `out` back (see the file comment).
  Status Stage(Stream& stream, int64_t scratch_bytes, std::span<const CopyIn> in,
               const std::function<Status(std::byte* scratch)>& run, std::span<const CopyOut> out);
  // The scratch, at least `bytes` long, once no copy reads it any more.
  StatusOr<std::byte*> AcquireScratch(int64_t bytes);
  // Waits for the event of the last copies out of the scratch (if any); returns its error.
  Status WaitForScratch();

  std::shared_ptr<Communicator> inner_;
  Device device_;
  DeviceRuntime* runtime_;  // the device's runtime (never destroyed)
  std::unique_ptr<std::byte[]> scratch_;
  int64_t scratch_capacity_ = 0;
  // Completes once the copies of the last staged call out of the scratch ran (null: none pending).
  std::shared_ptr<Event> scratch_in_use_;
};

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_STAGED_STAGED_COMMUNICATOR_H_
