#include "meshflow/runtime/pending.h"

#include <utility>

namespace meshflow {

StatusOr<Tensor> PendingTensor::Wait() {
  if (state_ == nullptr) return FailedPreconditionError("PendingTensor::Wait on an empty handle");
  PendingTensorState& st = *state_;
  if (st.taken) return FailedPreconditionError("PendingTensor::Wait called twice");
  st.taken = true;
  if (st.done != nullptr) {
    // Host compute (an inline stream): the wait blocks the caller (and is on its timeline). A device
    // stream's work has run at enqueue (it enqueued the device work): the compute stream waits for
    // the device work. A host worker's work still to run holds `local`: wait for it on the host.
    if (!st.compute->is_inline() && !st.ran.load(std::memory_order_acquire)) {
      MF_RETURN_IF_ERROR(st.done->Synchronize());
    }
    MF_RETURN_IF_ERROR(st.compute->WaitEvent(st.done));
  }
  MF_RETURN_IF_ERROR(st.status);
  if (!st.local.is_host()) st.local.mutable_buffer().Rehome(st.compute);
  return std::move(st.local);
}

}  // namespace meshflow
