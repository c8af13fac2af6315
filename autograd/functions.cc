#include "meshflow/autograd/functions.h"

#include <utility>

namespace meshflow::autograd {
namespace {

StatusOr<Variable> A(const OpSpec& op, std::initializer_list<Variable> in, RankContext& ctx) {
  return Apply(op, std::span<const Variable>(in.begin(), in.size()), ctx);
}

}  // namespace

StatusOr<Variable> Matmul(const Variable& a, const Variable& b, RankContext& c) { return A(OpSpec::Matmul(), {a, b}, c); }
StatusOr<Variable> Add(const Variable& a, const Variable& b, RankContext& c) {
  return A(OpSpec::Binary(BinaryOp::kAdd), {a, b}, c);
}
StatusOr<Variable> Sub(const Variable& a, const Variable& b, RankContext& c) {
  return A(OpSpec::Binary(BinaryOp::kSub), {a, b}, c);
}
StatusOr<Variable> Mul(const Variable& a, const Variable& b, RankContext& c) {
  return A(OpSpec::Binary(BinaryOp::kMul), {a, b}, c);
}
StatusOr<Variable> Div(const Variable& a, const Variable& b, RankContext& c) {
  return A(OpSpec::Binary(BinaryOp::kDiv), {a, b}, c);
}
StatusOr<Variable> Unary(UnaryOp op, const Variable& x, RankContext& c, double alpha) {
  return A(OpSpec::Unary(op, alpha), {x}, c);
}
StatusOr<Variable> Neg(const Variable& x, RankContext& c) { return Unary(UnaryOp::kNeg, x, c); }
StatusOr<Variable> Scale(const Variable& x, double alpha, RankContext& c) { return Unary(UnaryOp::kScale, x, c, alpha); }
StatusOr<Variable> Relu(const Variable& x, RankContext& c) { return Unary(UnaryOp::kRelu, x, c); }
StatusOr<Variable> Gelu(const Variable& x, RankContext& c) { return Unary(UnaryOp::kGelu, x, c); }
StatusOr<Variable> Silu(const Variable& x, RankContext& c) { return Unary(UnaryOp::kSilu, x, c); }
StatusOr<Variable> Tanh(const Variable& x, RankContext& c) { return Unary(UnaryOp::kTanh, x, c); }
StatusOr<Variable> Exp(const Variable& x, RankContext& c) { return Unary(UnaryOp::kExp, x, c); }
StatusOr<Variable> Sum(const Variable& x, std::vector<int> dims, bool keepdim, RankContext& c) {
  return A(OpSpec::Reduce(ReduceKind::kSum, std::move(dims), keepdim), {x}, c);
}
StatusOr<Variable> Mean(const Variable& x, std::vector<int> dims, bool keepdim, RankContext& c) {
  return A(OpSpec::Reduce(ReduceKind::kMean, std::move(dims), keepdim), {x}, c);
}
StatusOr<Variable> Max(const Variable& x, std::vector<int> dims, bool keepdim, RankContext& c) {
  return A(OpSpec::Reduce(ReduceKind::kMax, std::move(dims), keepdim), {x}, c);
}
StatusOr<Variable> Softmax(const Variable& x, int dim, RankContext& c) { return A(OpSpec::Softmax(dim, false), {x}, c); }
StatusOr<Variable> LogSoftmax(const Variable& x, int dim, RankContext& c) {
  return A(OpSpec::Softmax(dim, true), {x}, c);
}
StatusOr<Variable> Transpose(const Variable& x, int dim0, int dim1, RankContext& c) {
  return A(OpSpec::Transpose(dim0, dim1), {x}, c);
}
StatusOr<Variable> Permute(const Variable& x, std::vector<int> perm, RankContext& c) {
  return A(OpSpec::Permute(std::move(perm)), {x}, c);
}
StatusOr<Variable> Reshape(const Variable& x, std::vector<int64_t> shape, RankContext& c) {
  return A(OpSpec::Reshape(std::move(shape)), {x}, c);
}
StatusOr<Variable> LayerNorm(const Variable& x, int normalized_ndim, const Variable& weight, const Variable& bias,
                             double eps, RankContext& c) {
  std::vector<Variable> in = {x};
  if (weight.defined()) in.push_back(weight);
  if (bias.defined()) in.push_back(bias);
  return Apply(OpSpec::LayerNorm(normalized_ndim, weight.defined(), bias.defined(), eps), in, c);
}
StatusOr<Variable> RmsNorm(const Variable& x, int normalized_ndim, const Variable& weight, double eps,
                           RankContext& c) {
  std::vector<Variable> in = {x};
  if (weight.defined()) in.push_back(weight);
  return Apply(OpSpec::RmsNorm(normalized_ndim, weight.defined(), eps), in, c);
}
StatusOr<Variable> Embedding(const Variable& table, const Variable& ids, RankContext& c) {
  return A(OpSpec::Embedding(), {table, ids}, c);
}
StatusOr<Variable> Concat(const std::vector<Variable>& inputs, int dim, RankContext& c) {
  return Apply(OpSpec::Concat(dim, static_cast<int>(inputs.size())), inputs, c);
}
StatusOr<Variable> Slice(const Variable& x, int dim, int64_t start, int64_t end, int64_t step, RankContext& c) {
  return A(OpSpec::Slice(dim, start, end, step), {x}, c);
}
StatusOr<Variable> CrossEntropy(const Variable& logits, const Variable& targets, LossReduction reduction,
                                RankContext& c) {
  return A(OpSpec::CrossEntropy(reduction), {logits, targets}, c);
}
StatusOr<Variable> Where(const Variable& cond, const Variable& a, const Variable& b, RankContext& c) {
  return A(OpSpec::Where(), {cond, a, b}, c);
}
StatusOr<Variable> Expand(const Variable& x, std::vector<int64_t> shape, RankContext& c) {
  return A(OpSpec::Expand(std::move(shape)), {x}, c);
}

StatusOr<Variable> Redistribute(const Variable& x, const Layout& target, RankContext& ctx) {
  return RedistributeVariable(x, target, ctx);
}

}  // namespace meshflow::autograd
