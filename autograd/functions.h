// The eager ops (ops/eager.h) on Variables: each runs the sharded op and records it for Backward
// (autograd/variable.h). Same semantics, errors and collectiveness as the DTensor ops.
//
//   MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(x, w1, comms));
//   MF_ASSIGN_OR_RETURN(Variable a, autograd::Gelu(h, comms));
//   MF_ASSIGN_OR_RETURN(Variable logits, autograd::Matmul(a, w2, comms));
//   MF_ASSIGN_OR_RETURN(Variable loss, autograd::CrossEntropy(logits, targets, LossReduction::kMean, comms));
#ifndef MESHFLOW_AUTOGRAD_FUNCTIONS_H_
#define MESHFLOW_AUTOGRAD_FUNCTIONS_H_

#include <cstdint>
#include <vector>

#include "meshflow/autograd/variable.h"

namespace meshflow::autograd {

StatusOr<Variable> Matmul(const Variable& a, const Variable& b, MeshComms& comms);
StatusOr<Variable> Add(const Variable& a, const Variable& b, MeshComms& comms);
StatusOr<Variable> Sub(const Variable& a, const Variable& b, MeshComms& comms);
StatusOr<Variable> Mul(const Variable& a, const Variable& b, MeshComms& comms);
StatusOr<Variable> Div(const Variable& a, const Variable& b, MeshComms& comms);
StatusOr<Variable> Unary(UnaryOp op, const Variable& x, MeshComms& comms, double alpha = 1.0);
StatusOr<Variable> Neg(const Variable& x, MeshComms& comms);
StatusOr<Variable> Scale(const Variable& x, double alpha, MeshComms& comms);
StatusOr<Variable> Relu(const Variable& x, MeshComms& comms);
StatusOr<Variable> Gelu(const Variable& x, MeshComms& comms);
StatusOr<Variable> Silu(const Variable& x, MeshComms& comms);
StatusOr<Variable> Tanh(const Variable& x, MeshComms& comms);
StatusOr<Variable> Exp(const Variable& x, MeshComms& comms);
StatusOr<Variable> Sum(const Variable& x, std::vector<int> dims, bool keepdim, MeshComms& comms);
StatusOr<Variable> Mean(const Variable& x, std::vector<int> dims, bool keepdim, MeshComms& comms);
StatusOr<Variable> Max(const Variable& x, std::vector<int> dims, bool keepdim, MeshComms& comms);
StatusOr<Variable> Softmax(const Variable& x, int dim, MeshComms& comms);
StatusOr<Variable> LogSoftmax(const Variable& x, int dim, MeshComms& comms);
StatusOr<Variable> Transpose(const Variable& x, int dim0, int dim1, MeshComms& comms);
StatusOr<Variable> Permute(const Variable& x, std::vector<int> perm, MeshComms& comms);
StatusOr<Variable> Reshape(const Variable& x, std::vector<int64_t> shape, MeshComms& comms);
// weight / bias: undefined Variables for none.
StatusOr<Variable> LayerNorm(const Variable& x, int normalized_ndim, const Variable& weight, const Variable& bias,
                             double eps, MeshComms& comms);
StatusOr<Variable> RmsNorm(const Variable& x, int normalized_ndim, const Variable& weight, double eps,
                           MeshComms& comms);
StatusOr<Variable> Embedding(const Variable& table, const Variable& ids, MeshComms& comms);
StatusOr<Variable> Concat(const std::vector<Variable>& inputs, int dim, MeshComms& comms);
StatusOr<Variable> Slice(const Variable& x, int dim, int64_t start, int64_t end, int64_t step, MeshComms& comms);
StatusOr<Variable> CrossEntropy(const Variable& logits, const Variable& targets, LossReduction reduction,
                                MeshComms& comms);
StatusOr<Variable> Where(const Variable& cond, const Variable& a, const Variable& b, MeshComms& comms);
StatusOr<Variable> Expand(const Variable& x, std::vector<int64_t> shape, MeshComms& comms);

}  // namespace meshflow::autograd

#endif  // MESHFLOW_AUTOGRAD_FUNCTIONS_H_
