// The op definitions: one small parameter struct per op (OpSpec is a std::variant of them), and
// in one place per op (op_spec.cc, one section each) its name, operand count, sharding rule,
// dtype contract and CPU kernel. Everything here is pure: no mesh, no communicator, no planner.
// The strategy choice (runtime/strategy.h), the eager runtime (runtime/eager.h), the graph IR
// (compiler/graph.h) and autograd (autograd/) build on it. Each op's backward (VJP) is a section
// of ops/op_vjp.cc (part of this target), written against a GradBuilder (below): the eager autograd
// runs the emitted ops at once (autograd/vjp.h), the graph autodiff appends them
// (compiler/graph_autodiff.h).
//
//   const OpSpec mm = OpSpec::Matmul();
//   const OpSpec ln = OpSpec::LayerNorm(/*normalized_ndim=*/1, /*has_weight=*/true, /*has_bias=*/false);
//   // mm.ToString() == "matmul"; ln.num_operands() == 2; ln.get<NormParams>()->eps == 1e-5
#ifndef MESHFLOW_OPS_OP_SPEC_H_
#define MESHFLOW_OPS_OP_SPEC_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {

// ---- Parameter structs (one per op). ----
struct MatmulParams {
  friend bool operator==(const MatmulParams&, const MatmulParams&) = default;
};
struct BinaryParams {
  BinaryOp op = BinaryOp::kAdd;
  friend bool operator==(const BinaryParams&, const BinaryParams&) = default;
};
struct UnaryParams {
  UnaryOp op = UnaryOp::kNeg;
  double alpha = 1.0;  // scale factor / pow exponent / add_scalar addend (HasAlpha); else unused
  friend bool operator==(const UnaryParams&, const UnaryParams&) = default;
};
struct CompareParams {
  CompareOp op = CompareOp::kEq;
  friend bool operator==(const CompareParams&, const CompareParams&) = default;
};
struct WhereParams {  // operands: cond, a, b
  friend bool operator==(const WhereParams&, const WhereParams&) = default;
};
struct ExpandParams {
  std::vector<int64_t> shape;  // the global result shape
  friend bool operator==(const ExpandParams&, const ExpandParams&) = default;
};
struct ReduceParams {
  ReduceKind kind = ReduceKind::kSum;
  std::vector<int> dims;  // empty: all dims
  bool keepdim = false;
  friend bool operator==(const ReduceParams&, const ReduceParams&) = default;
};
struct SoftmaxParams {
  int dim = -1;
  bool log = false;
  friend bool operator==(const SoftmaxParams&, const SoftmaxParams&) = default;
};
struct PermuteParams {
  std::vector<int> perm;  // result dim i is input dim perm[i]
  friend bool operator==(const PermuteParams&, const PermuteParams&) = default;
};
struct TransposeParams {
  int dim0 = -2;
  int dim1 = -1;
  friend bool operator==(const TransposeParams&, const TransposeParams&) = default;
};
struct ReshapeParams {
  std::vector<int64_t> shape;  // the global result shape (one -1 allowed)
  friend bool operator==(const ReshapeParams&, const ReshapeParams&) = default;
};
struct NormParams {  // operands: x, then weight if has_weight, then bias if has_bias
  NormKind kind = NormKind::kLayerNorm;
  int normalized_ndim = 1;
  bool has_weight = false;
  bool has_bias = false;
  double eps = 1e-5;
  friend bool operator==(const NormParams&, const NormParams&) = default;
};
struct EmbeddingParams {  // operands: table [V, D], ids [...] (i32/i64)
  friend bool operator==(const EmbeddingParams&, const EmbeddingParams&) = default;
};
struct EmbeddingGradParams {  // operands: grad [ids..., D], ids -> [num_rows, D]
  int64_t num_rows = 0;
  friend bool operator==(const EmbeddingGradParams&, const EmbeddingGradParams&) = default;
};
struct ConcatParams {
  int dim = 0;
  int num_inputs = 2;
  friend bool operator==(const ConcatParams&, const ConcatParams&) = default;
};
struct SliceParams {
  int dim = 0;
  int64_t start = 0;
  int64_t end = INT64_MAX;  // clamped like python
  int64_t step = 1;
  friend bool operator==(const SliceParams&, const SliceParams&) = default;
};
struct SliceGradParams {  // operand: grad of slice(input_shape) -> input_shape
  SliceParams slice;
  std::vector<int64_t> input_shape;  // global
  friend bool operator==(const SliceGradParams&, const SliceGradParams&) = default;
};
struct CrossEntropyParams {  // operands: logits [..., C], targets [...] (i32/i64)
  LossReduction reduction = LossReduction::kMean;
  friend bool operator==(const CrossEntropyParams&, const CrossEntropyParams&) = default;
};
struct CrossEntropyGradParams {  // operands: logits, targets, grad of the loss -> [..., C]
  LossReduction reduction = LossReduction::kMean;
  friend bool operator==(const CrossEntropyGradParams&, const CrossEntropyGradParams&) = default;
};

using OpParams = std::variant<MatmulParams, BinaryParams, UnaryParams, CompareParams, WhereParams, ExpandParams,
                              ReduceParams, SoftmaxParams, PermuteParams, TransposeParams, ReshapeParams, NormParams,
                              EmbeddingParams, EmbeddingGradParams, ConcatParams, SliceParams, SliceGradParams,
                              CrossEntropyParams, CrossEntropyGradParams>;

// One op with its parameters.
struct OpSpec {
  OpParams params;

  static OpSpec Matmul() { return OpSpec{MatmulParams{}}; }
  static OpSpec Binary(BinaryOp op) { return OpSpec{BinaryParams{op}}; }
  static OpSpec Unary(UnaryOp op, double alpha = 1.0) { return OpSpec{UnaryParams{op, alpha}}; }
  static OpSpec Compare(CompareOp op) { return OpSpec{CompareParams{op}}; }
  static OpSpec Where() { return OpSpec{WhereParams{}}; }
  static OpSpec Expand(std::vector<int64_t> shape) { return OpSpec{ExpandParams{std::move(shape)}}; }
  static OpSpec Reduce(ReduceKind kind, std::vector<int> dims, bool keepdim) {
    return OpSpec{ReduceParams{kind, std::move(dims), keepdim}};
  }
  static OpSpec Softmax(int dim, bool log) { return OpSpec{SoftmaxParams{dim, log}}; }
  static OpSpec Permute(std::vector<int> perm) { return OpSpec{PermuteParams{std::move(perm)}}; }
  static OpSpec Transpose(int dim0, int dim1) { return OpSpec{TransposeParams{dim0, dim1}}; }
  static OpSpec Reshape(std::vector<int64_t> shape) { return OpSpec{ReshapeParams{std::move(shape)}}; }
  static OpSpec Norm(NormKind norm, int normalized_ndim, bool has_weight, bool has_bias, double eps = 1e-5) {
    return OpSpec{NormParams{norm, normalized_ndim, has_weight, has_bias, eps}};
  }
  static OpSpec LayerNorm(int normalized_ndim, bool has_weight, bool has_bias, double eps = 1e-5) {
    return Norm(NormKind::kLayerNorm, normalized_ndim, has_weight, has_bias, eps);
  }
  static OpSpec RmsNorm(int normalized_ndim, bool has_weight, double eps = 1e-5) {
    return Norm(NormKind::kRmsNorm, normalized_ndim, has_weight, false, eps);
  }
  static OpSpec Embedding() { return OpSpec{EmbeddingParams{}}; }
  static OpSpec EmbeddingGrad(int64_t num_rows) { return OpSpec{EmbeddingGradParams{num_rows}}; }
  static OpSpec Concat(int dim, int num_inputs) { return OpSpec{ConcatParams{dim, num_inputs}}; }
  static OpSpec Slice(int dim, int64_t start, int64_t end, int64_t step = 1) {
    return OpSpec{SliceParams{dim, start, end, step}};
  }
  // The gradient of Slice(dim, start, end, step) of an input of `input_shape`.
  static OpSpec SliceGrad(std::vector<int64_t> input_shape, int dim, int64_t start, int64_t end, int64_t step = 1) {
    return OpSpec{SliceGradParams{SliceParams{dim, start, end, step}, std::move(input_shape)}};
  }
  static OpSpec CrossEntropy(LossReduction reduction) { return OpSpec{CrossEntropyParams{reduction}}; }
  static OpSpec CrossEntropyGrad(LossReduction reduction) { return OpSpec{CrossEntropyGradParams{reduction}}; }

  // The parameters if the op is a P (else nullptr).
  template <typename P>
  const P* get() const {
    return std::get_if<P>(&params);
  }

  int num_operands() const;
  // "matmul", "add", "scale(2)", "sum(dims=[0],keepdim)", "permute([1,0])", "reshape([6,-1])",
  // "layer_norm(ndim=1,weight,bias,eps=1e-05)", "embedding", "concat(dim=0,n=3)",
  // "slice(dim=1,1:5:2)", "cross_entropy(mean)", "where", "lt", "expand([2,3])", ...
  std::string ToString() const;
  friend bool operator==(const OpSpec&, const OpSpec&) = default;
};

// Equality and hash of the op without the parameters that never change a sharding strategy
// (unary alpha): the dispatch cache's key.
bool SameStructure(const OpSpec& a, const OpSpec& b);
uint64_t StructureHash(const OpSpec& op);

// The op's rule for the given global operand shapes. Errors: wrong operand count; rule errors.
StatusOr<ShardingRule> RuleFor(const OpSpec& op, std::span<const std::vector<int64_t>* const> shapes);

// The dtype contract of the op: float where it needs floats (UNIMPLEMENTED for integers, naming
// the op and dtype), integer ids / targets (INVALID_ARGUMENT), operands that must agree.
// Errors: wrong operand count.
Status CheckOperandDTypes(const OpSpec& op, std::span<const DType> dtypes);

// Per-rank facts a local kernel needs beyond its operands.
struct KernelContext {
  int64_t mean_count = -1;   // mean / cross_entropy(mean) and its grad: global count (-1: local)
  int64_t row_offset = 0;    // embedding, embedding_grad: global index of the local table's first row
  int64_t global_rows = -1;  // embedding, embedding_grad: V (-1: the local row count); ids outside error
  // reshape, expand, embedding_grad, slice_grad: the local result shape (nullopt: the op's global
  // shape, i.e. single rank).
  std::optional<std::vector<int64_t>> out_shape;
  // slice on a sharded dim: the local slice as (start, size) in local indices (nullopt: the op's).
  std::optional<std::pair<int64_t, int64_t>> slice_local;
};

// The local kernel of `op` on local operands (also the single-rank reference in tests). Runs a
// sharded choice's local step only together with its KernelContext, and never a vocab-parallel
// cross-entropy (logits sharded on C: needs collectives, the eager runtime does it).
StatusOr<Tensor> RunKernel(const OpSpec& op, std::span<const Tensor* const> operands, int64_t mean_count = -1);
StatusOr<Tensor> RunKernel(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx);

// ---- Backward (VJPs; ops/op_vjp.cc, one section per op in the order of op_spec.cc). ----

// Where a VJP emits the ops of a backward computation. Values are handles chosen by the builder:
// the eager autograd runs each op at once on DTensors (autograd/vjp.h), the graph autodiff appends
// nodes to a Graph (compiler/graph_autodiff.h). So a backward computation is made of ordinary ops,
// sharded by the same rules and planned by the same planner as the forward.
class GradBuilder {
 public:
  virtual ~GradBuilder() = default;
  // Applies `op` to `operands`; returns the result's handle.
  virtual StatusOr<int> Emit(const OpSpec& op, std::span<const int> operands) = 0;
  // The global shape of a value (a copy: a graph builder's value table grows with every Emit).
  virtual std::vector<int64_t> Shape(int v) const = 0;
};

// The gradients of op(inputs) = output w.r.t. each operand, given `grad` (d loss / d output, with
// the output's shape), emitted on `b`. One entry per operand; nullopt where the operand gets no
// gradient (integer ids / targets, a comparison's operands, where's cond, a zero derivative such
// as step's). Broadcast operands get their gradient summed back to their shape.
// Errors: operand count; a grad shape other than the output's (INVALID_ARGUMENT); UNIMPLEMENTED
// naming the op for matmul with a rank-1 operand and for the gradient ops themselves (double
// backward: *_deriv, fill, embedding_grad, slice_grad, cross_entropy_grad); builder errors.
StatusOr<std::vector<std::optional<int>>> Vjp(const OpSpec& op, GradBuilder& b, std::span<const int> inputs,
                                              int output, int grad);

// x summed over the dims it was broadcast along, to `shape` (numpy rules), emitted on `b`.
StatusOr<int> SumTo(GradBuilder& b, int x, std::vector<int64_t> shape);

// Whether the op has a derivative w.r.t. any operand (false: comparisons).
bool IsDifferentiable(const OpSpec& op);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_OP_SPEC_H_
