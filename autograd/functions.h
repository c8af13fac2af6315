// The eager ops (runtime/eager.h) on Variables: each runs the sharded op and records it for Backward
// (autograd/variable.h). Same semantics, errors and collectiveness as the DTensor ops.
//
//   MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(x, w1, ctx));
//   MF_ASSIGN_OR_RETURN(Variable a, autograd::Gelu(h, ctx));
//   MF_ASSIGN_OR_RETURN(Variable logits, autograd::Matmul(a, w2, ctx));
//   MF_ASSIGN_OR_RETURN(Variable loss, autograd::CrossEntropy(logits, targets, LossReduction::kMean, ctx));
#ifndef MESHFLOW_AUTOGRAD_FUNCTIONS_H_
#define MESHFLOW_AUTOGRAD_FUNCTIONS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <vector>

#include "meshflow/autograd/variable.h"

namespace meshflow::autograd {

StatusOr<Variable> Matmul(const Variable& a, const Variable& b, RankContext& ctx);
StatusOr<Variable> Add(const Variable& a, const Variable& b, RankContext& ctx);
StatusOr<Variable> Sub(const Variable& a, const Variable& b, RankContext& ctx);
StatusOr<Variable> Mul(const Variable& a, const Variable& b, RankContext& ctx);
StatusOr<Variable> Div(const Variable& a, const Variable& b, RankContext& ctx);
StatusOr<Variable> Unary(UnaryOp op, const Variable& x, RankContext& ctx, double alpha = 1.0);
StatusOr<Variable> Neg(const Variable& x, RankContext& ctx);
StatusOr<Variable> Scale(const Variable& x, double alpha, RankContext& ctx);
StatusOr<Variable> Relu(const Variable& x, RankContext& ctx);
StatusOr<Variable> Gelu(const Variable& x, RankContext& ctx);
StatusOr<Variable> Silu(const Variable& x, RankContext& ctx);
StatusOr<Variable> Tanh(const Variable& x, RankContext& ctx);
StatusOr<Variable> Exp(const Variable& x, RankContext& ctx);
StatusOr<Variable> Sum(const Variable& x, std::vector<int> dims, bool keepdim, RankContext& ctx);
StatusOr<Variable> Mean(const Variable& x, std::vector<int> dims, bool keepdim, RankContext& ctx);
StatusOr<Variable> Max(const Variable& x, std::vector<int> dims, bool keepdim, RankContext& ctx);
StatusOr<Variable> Softmax(const Variable& x, int dim, RankContext& ctx);
StatusOr<Variable> LogSoftmax(const Variable& x, int dim, RankContext& ctx);
StatusOr<Variable> Transpose(const Variable& x, int dim0, int dim1, RankContext& ctx);
StatusOr<Variable> Permute(const Variable& x, std::vector<int> perm, RankContext& ctx);
StatusOr<Variable> Reshape(const Variable& x, std::vector<int64_t> shape, RankContext& ctx);
// weight / bias: undefined Variables for none.
StatusOr<Variable> LayerNorm(const Variable& x, int normalized_ndim, const Variable& weight, const Variable& bias,
                             double eps, RankContext& ctx);
StatusOr<Variable> RmsNorm(const Variable& x, int normalized_ndim, const Variable& weight, double eps,
                           RankContext& ctx);
StatusOr<Variable> Embedding(const Variable& table, const Variable& ids, RankContext& ctx);
StatusOr<Variable> Concat(const std::vector<Variable>& inputs, int dim, RankContext& ctx);
StatusOr<Variable> Slice(const Variable& x, int dim, int64_t start, int64_t end, int64_t step, RankContext& ctx);
StatusOr<Variable> CrossEntropy(const Variable& logits, const Variable& targets, LossReduction reduction,
                                RankContext& ctx);
StatusOr<Variable> Where(const Variable& cond, const Variable& a, const Variable& b, RankContext& ctx);
StatusOr<Variable> Expand(const Variable& x, std::vector<int64_t> shape, RankContext& ctx);
// RedistributeVariable (autograd/variable.h): x in `target`, differentiable (the gradient passes
// through in its own layout).
StatusOr<Variable> Redistribute(const Variable& x, const Layout& target, RankContext& ctx);

}  // namespace meshflow::autograd

#endif  // MESHFLOW_AUTOGRAD_FUNCTIONS_H_
