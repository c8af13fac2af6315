// Local CPU kernels on Tensor: what every rank runs on its local shard (and what tests run on
// the global tensors as the single-rank reference).
//
// Supported dtypes: f32, f64 and bf16 (bf16 converts to float, computes, rounds back to nearest
// even). Integers (i32, i64): add/sub/mul, neg, sum/max/min (exact, int64 accumulation, wrapping
// like the C++ type on overflow), every data-movement kernel (permute, reshape, concat, slice),
// embedding tables, and the ids / targets operands; elsewhere UNIMPLEMENTED. Shapes may be empty
// (zero-size dims) everywhere.
//
//   MF_ASSIGN_OR_RETURN(Tensor c, MatmulKernel(a, b));          // [..., m, k] x [..., k, n]
//   MF_ASSIGN_OR_RETURN(Tensor y, BinaryKernel(BinaryOp::kAdd, x, bias));  // broadcast
//   MF_ASSIGN_OR_RETURN(Tensor s, ReduceKernel(ReduceKind::kMean, x, std::vector<int>{1}, false));
//   MF_ASSIGN_OR_RETURN(Tensor p, SoftmaxKernel(x, /*dim=*/-1, /*log=*/false));
//
// Matmul is one OpenBLAS GEMM per batch entry (ops/blas.h: one BLAS thread per rank by default);
// batch dims broadcast like numpy. Sums accumulate in double. Softmax subtracts the row max first.
// The per-element and per-row math is ops/elementwise.h, shared with the device kernels
// (ops/shared_kernels.h, ops/cuda/cuda_op_kernels.h).
#ifndef MESHFLOW_OPS_KERNELS_H_
#define MESHFLOW_OPS_KERNELS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {

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

// Result dim i is x's dim perm[i] (negative entries count from the end). Any dtype. Errors: perm
// not a permutation of x's dims.
StatusOr<Tensor> PermuteKernel(const Tensor& x, std::span<const int> perm);

// The same elements (row-major order) with another shape (one -1 inferred). Any dtype. Errors:
// see ResolveReshape.
StatusOr<Tensor> ReshapeKernel(const Tensor& x, std::span<const int64_t> shape);

// Layer norm ((x - mean) / sqrt(var + eps), biased variance) or RMS norm (x / sqrt(mean(x^2) +
// eps)) over the trailing `normalized_ndim` dims, then * weight + bias (each optional, nullptr:
// none). Statistics in double. Errors: dtypes (float; weight / bias the same), shapes.
StatusOr<Tensor> NormKernel(NormKind kind, const Tensor& x, int normalized_ndim, const Tensor* weight,
                            const Tensor* bias, double eps);

// out[..., :] = table[ids[...] - row_offset, :] when that row is local, else zeros (the rows of a
// row-sharded table; the sum over shards is the lookup). `global_rows` (V; -1: the local row
// count) bounds the ids. Errors: table rank != 2, ids not i32/i64, an id outside [0, V).
StatusOr<Tensor> EmbeddingKernel(const Tensor& table, const Tensor& ids, int64_t row_offset = 0,
                                 int64_t global_rows = -1);

// Concatenation along `dim` (negative counts from the end). Any dtype (all the same). Errors:
// no operands, dtypes, ranks or sizes outside `dim` that differ, dim out of range.
StatusOr<Tensor> ConcatKernel(std::span<const Tensor* const> xs, int dim);

// x[..., start:end:step, ...] along `dim` (python semantics, see NormalizeSlice). Any dtype.
StatusOr<Tensor> SliceKernel(const Tensor& x, int dim, int64_t start, int64_t end, int64_t step);

// Cross-entropy of logits [..., C] against targets [...] (i32/i64 in [0, C)): per row
// logsumexp(logits) - logits[target] (stable, double). kNone: [...]; kSum: [] sum; kMean: [] sum
// divided by `mean_count` when >= 0 (the global row count on sharded rows), else the local row
// count. Errors: dtypes, shapes, a target out of range.
StatusOr<Tensor> CrossEntropyKernel(const Tensor& logits, const Tensor& targets, LossReduction reduction,
                                    int64_t mean_count = -1);

// Vocab-parallel cross-entropy: the local logits hold classes [class_offset, class_offset + C_l)
// of `num_classes`. `all_reduce` reduces a per-row vector in place over the ranks holding the same
// rows and the other classes (first kMax, then kSum); every such rank must call it the same
// number of times. The result is this rank's term of a Partial(sum): the owner (the rank holding
// class 0) contributes logsumexp, every rank minus its local target logit (0 when the target is
// elsewhere). Errors: as CrossEntropyKernel (targets outside [0, num_classes)), all_reduce's.
struct VocabShard {
  int64_t class_offset = 0;
  int64_t num_classes = 0;
  bool owner = true;
  std::function<Status(std::vector<double>& rows, ReduceOp op)> all_reduce;
};
StatusOr<Tensor> CrossEntropyKernel(const Tensor& logits, const Tensor& targets, LossReduction reduction,
                                    int64_t mean_count, const VocabShard& vocab);

// Element-wise comparison (1 / 0 in the operands' dtype), with numpy broadcasting.
StatusOr<Tensor> CompareKernel(CompareOp op, const Tensor& a, const Tensor& b);
// a where cond != 0, else b (all three broadcast; a and b share a dtype; cond any dtype).
StatusOr<Tensor> WhereKernel(const Tensor& cond, const Tensor& a, const Tensor& b);
// x broadcast to `shape`.
StatusOr<Tensor> ExpandKernel(const Tensor& x, std::span<const int64_t> shape);
// The local [rows, D] block (global rows [row_offset, row_offset + rows) of a [global_rows, D]
// table gradient; global_rows -1: rows) of index-adding grad [ids..., D] at ids.
StatusOr<Tensor> EmbeddingGradKernel(const Tensor& grad, const Tensor& ids, int64_t rows, int64_t row_offset = 0,
                                     int64_t global_rows = -1);
// Zeros of input_shape with grad placed where slice(dim, start, end, step) took its elements.
StatusOr<Tensor> SliceGradKernel(const Tensor& grad, std::span<const int64_t> input_shape, int dim, int64_t start,
                                 int64_t end, int64_t step);
// (softmax(logits) - onehot(targets)) * grad (/ mean_count for kMean; -1: the local row count).
StatusOr<Tensor> CrossEntropyGradKernel(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                                        LossReduction reduction, int64_t mean_count = -1);
// Vocab-parallel: the local logits hold classes [class_offset, class_offset + C_l) of
// vocab.num_classes (VocabShard above); the row max and the row sum of exponentials are reduced
// over vocab.all_reduce (kMax, then kSum), and the result is this rank's classes of the
// gradient. Errors: as above (targets outside [0, num_classes)), all_reduce's.
StatusOr<Tensor> CrossEntropyGradKernel(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                                        LossReduction reduction, int64_t mean_count, const VocabShard& vocab);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_KERNELS_H_
