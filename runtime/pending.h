// PendingTensor: the result of communication running asynchronously on a rank's communication
// stream (ExecutePlanAsync, runtime/executor.h; RedistributeAsync, runtime/redistribute.h).
//
//   MF_ASSIGN_OR_RETURN(PendingTensor p, ExecutePlanAsync(plan, ctx, std::move(local)));
//   ...                                   // compute; the plan runs on the communication stream
//   MF_ASSIGN_OR_RETURN(Tensor result, p.Wait());
//
// Wait orders the compute stream after the communication (host compute: the caller blocks, and the
// block is on the compute stream's timeline as a "wait") and hands the tensor to compute.
#ifndef MESHFLOW_RUNTIME_PENDING_H_
#define MESHFLOW_RUNTIME_PENDING_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <atomic>
#include <memory>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

// What the communication work and the handle share.
struct PendingTensorState {
  Tensor local;
  Status status;
  // Set by the work once its host part ran: at once on a device stream (the work only enqueues),
  // later on a host worker stream.
  std::atomic<bool> ran{false};
  std::shared_ptr<Event> done;      // null: nothing was enqueued (an empty plan)
  std::shared_ptr<Stream> compute;  // the stream that waits
  bool taken = false;
};

class PendingTensor {
 public:
  PendingTensor() = default;
  explicit PendingTensor(std::shared_ptr<PendingTensorState> state) : state_(std::move(state)) {}
  bool valid() const { return state_ != nullptr; }
  // True once the communication ran (Wait will not block the host).
  bool Ready() const { return state_ != nullptr && (state_->done == nullptr || state_->done->Query()); }
  // Makes the compute stream wait for the communication and returns the result. Errors: the
  // communication's; FailedPrecondition when called twice or on an empty handle.
  StatusOr<Tensor> Wait();

 private:
  std::shared_ptr<PendingTensorState> state_;
};

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_PENDING_H_
