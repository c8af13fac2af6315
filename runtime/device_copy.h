// Tensors onto the rank's device and back: the boundaries of a device rank's work.
//
// Host-made values (parameters initialized on the host, data batches, constants, checkpoint
// loads) go to the rank's device with OnRankDevice; values read on the host (a loss to print, a
// checkpoint to write) come back with OnHost. On a host rank both return the tensor itself.
//
//   MF_ASSIGN_OR_RETURN(DTensor batch_d, OnRankDevice(std::move(batch), ctx));   // copy on compute
//   MF_ASSIGN_OR_RETURN(Tensor loss_h, OnHost(loss.local()));                    // waits for it
//
// The copies are ordered on the rank's compute stream: the device value is valid in that stream's
// order; OnHost waits for the copy. Errors: allocation and copy errors; a tensor on another device
// than the rank's (INVALID_ARGUMENT).
#ifndef MESHFLOW_RUNTIME_DEVICE_COPY_H_
#define MESHFLOW_RUNTIME_DEVICE_COPY_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/runtime/rank_context.h"

namespace meshflow {

// `x` on ctx.device(): itself when it is there, a copy from the host otherwise.
StatusOr<Tensor> OnRankDevice(Tensor x, const RankContext& ctx);
StatusOr<DTensor> OnRankDevice(DTensor x, const RankContext& ctx);

// `x` on the host: itself (moved) when it is there, else a copy made on its home stream and waited for.
StatusOr<Tensor> OnHost(Tensor x);
StatusOr<DTensor> OnHost(DTensor x);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_DEVICE_COPY_H_
