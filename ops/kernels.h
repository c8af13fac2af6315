// Local CPU kernels on Tensor: what every rank runs on its local shard (and what tests run on
// the global tensors as the single-rank reference).
//
// Supported dtypes: f32, f64 and bf16 (bf16 converts to float, computes, rounds back to nearest
// even). Integer dtypes give UNIMPLEMENTED. Shapes may be empty (zero-size dims) everywhere.
//
//   MF_ASSIGN_OR_RETURN(Tensor c, ops::MatmulKernel(a, b));          // [..., m, k] x [..., k, n]
//   MF_ASSIGN_OR_RETURN(Tensor y, ops::BinaryKernel(ops::BinaryOp::kAdd, x, bias));  // broadcast
//   MF_ASSIGN_OR_RETURN(Tensor s, ops::ReduceKernel(ops::ReduceKind::kMean, x, {1}, false));
//   MF_ASSIGN_OR_RETURN(Tensor p, ops::SoftmaxKernel(x, /*dim=*/-1, /*log=*/false));
//
// Matmul uses Eigen GEMM on row-major Eigen::Map views, one call per batch entry; batch dims
// broadcast like numpy. Sums accumulate in double. Softmax subtracts the row max first.
#ifndef MESHFLOW_OPS_KERNELS_H_
#define MESHFLOW_OPS_KERNELS_H_

#include <cstdint>
#include <span>

#include "base/status.h"
#include "dtensor/tensor.h"
#include "ops/sharding_rule.h"

namespace meshflow::ops {

// Batched matmul. Errors: dtype mismatch or unsupported, rank < 2, k mismatch, batch dims that
// do not broadcast (local shapes of a sharded op always broadcast: a sharded batch dim pairs
// with a size-1 dim or the same local size).
StatusOr<Tensor> MatmulKernel(const Tensor& a, const Tensor& b);

// Pointwise a (op) b with numpy broadcasting. Errors: dtype mismatch, shapes.
StatusOr<Tensor> BinaryKernel(BinaryOp op, const Tensor& a, const Tensor& b);

// Pointwise f(x); `alpha` is the factor of kScale (ignored otherwise). gelu is the tanh form.
StatusOr<Tensor> UnaryKernel(UnaryOp op, const Tensor& x, double alpha = 1.0);

// Reduction over `dims` (see NormalizeReduceDims). kMean divides the sum by `mean_count` when
// >= 0 (the eager API passes the global count so that local means on uneven shards sum to the
// global mean), else by the local count of reduced elements. Max/min of an empty local
// reduction give -inf/+inf (the identity of Partial(max/min)).
StatusOr<Tensor> ReduceKernel(ReduceKind kind, const Tensor& x, std::span<const int> dims, bool keepdim,
                              int64_t mean_count = -1);

// Numerically stable softmax (or log-softmax) along `dim` (negative counts from the end).
StatusOr<Tensor> SoftmaxKernel(const Tensor& x, int dim, bool log);

}  // namespace meshflow::ops

#endif  // MESHFLOW_OPS_KERNELS_H_
