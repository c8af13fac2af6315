// The optimizer's elementwise math on a device rank's local shards, through the device's op kernels
// (ops/device_op_kernels.h), op by op in the order of the host loops of optim/optimizer.cc: each
// op rounds in the compute dtype exactly as the host loop does, so with kernels that compute like
// the CPU's (the shared bodies of ops/elementwise.h) the updates have the host's bits. A fused
// update kernel would save the intermediate tensors; this keeps one home for the math.
//
// Internal to optim/ (target //optim:device_math).
#ifndef MESHFLOW_OPTIM_DEVICE_MATH_H_
#define MESHFLOW_OPTIM_DEVICE_MATH_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/runtime/stream.h"

namespace meshflow::optim_internal {

// The hyperparameters the updates read (AdamWOptions / SgdOptions of optim/optimizer.h).
struct AdamWHyper {
  double lr, beta1, beta2, eps, weight_decay;
};
struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

// p, m, v updated in place (their tensors replaced) by one AdamW step t with gradient g (device
// tensors of one dtype, f32 or f64, the same shape), issued on `stream`.
Status AdamWOnDevice(const AdamWHyper& o, int64_t t, Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                     const std::shared_ptr<Stream>& stream);
// p (and the momentum buffer `buf` when momentum != 0) updated by one SGD step t.
Status SgdOnDevice(const SgdHyper& o, int64_t t, Tensor& p, const Tensor& g, Tensor* buf,
                   const std::shared_ptr<Stream>& stream);
// x * coef (in x's dtype), replacing x.
Status ScaleOnDevice(Tensor& x, double coef, const std::shared_ptr<Stream>& stream);
// The sum of squares of x's elements (squares in x's dtype, summed in double), read to the host.
StatusOr<double> SumOfSquaresOnDevice(const Tensor& x, const std::shared_ptr<Stream>& stream);

}  // namespace meshflow::optim_internal

#endif  // MESHFLOW_OPTIM_DEVICE_MATH_H_
