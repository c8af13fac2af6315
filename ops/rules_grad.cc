// Sharding rules of comparison, where, expand and the gradient ops (embedding_grad, slice_grad,
// cross_entropy_grad). Declared in ops/sharding_rule.h; see the comments there.
#include <algorithm>
#include <string>

#include "meshflow/base/strings.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {

std::string_view CompareOpName(CompareOp op) {
  switch (op) {
    case CompareOp::kEq: return "eq";
    case CompareOp::kNe: return "ne";
    case CompareOp::kLt: return "lt";
    case CompareOp::kLe: return "le";
    case CompareOp::kGt: return "gt";
    case CompareOp::kGe: return "ge";
  }
  return "?";
}

StatusOr<ShardingRule> CompareRule(CompareOp op, std::span<const int64_t> a, std::span<const int64_t> b) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(CompareOpName(op), a, b));
  return RuleBuilder(std::string(CompareOpName(op)), {static_cast<int>(a.size()), static_cast<int>(b.size())}, out)
      .AddBroadcastFactors("d", out, std::vector<std::span<const int64_t>>{a, b})
      .Build();
}

StatusOr<ShardingRule> WhereRule(std::span<const int64_t> cond, std::span<const int64_t> a,
                                 std::span<const int64_t> b) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> ab, BroadcastShapes("where", a, b));
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes("where", cond, ab));
  return RuleBuilder("where", {static_cast<int>(cond.size()), static_cast<int>(a.size()), static_cast<int>(b.size())},
                     out)
      .AddBroadcastFactors("d", out, std::vector<std::span<const int64_t>>{cond, a, b})
      .AddPartialRule(PartialRule{{std::nullopt, ReduceOp::kSum, ReduceOp::kSum}, ReduceOp::kSum})
      .Build();
}

StatusOr<ShardingRule> ExpandRule(std::span<const int64_t> x, std::span<const int64_t> shape) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes("expand", x, shape));
  if (!std::equal(out.begin(), out.end(), shape.begin(), shape.end())) {
    return InvalidArgumentError("expand: shape " + ShapeString(x) + " does not broadcast to " + ShapeString(shape));
  }
  return RuleBuilder("expand", {static_cast<int>(x.size())}, out)
      .AddBroadcastFactors("d", out, std::vector<std::span<const int64_t>>{x})
      .AddSelectPartialRules()
      .Build();
}

StatusOr<ShardingRule> EmbeddingGradRule(std::span<const int64_t> grad, std::span<const int64_t> ids,
                                         int64_t num_rows) {
  if (num_rows < 0) return InvalidArgumentError("embedding_grad: num_rows " + std::to_string(num_rows) + " < 0");
  if (grad.size() != ids.size() + 1 || !std::equal(ids.begin(), ids.end(), grad.begin(), grad.end() - 1)) {
    return InvalidArgumentError("embedding_grad: grad shape " + ShapeString(grad) + " must be the ids shape " +
                                ShapeString(ids) + " plus [D]");
  }
  const int rg = static_cast<int>(grad.size()), ri = static_cast<int>(ids.size());
  RuleBuilder rule("embedding_grad", {rg, ri}, {num_rows, grad.back()});
  rule.AddFactor("v", num_rows, FactorKind::kPassThrough, {kNoDim, kNoDim}, 0)
      .AddFactor("d", grad.back(), FactorKind::kPassThrough, {rg - 1, kNoDim}, 1);
  for (int i = 0; i < ri; ++i) {
    rule.AddFactor("i" + std::to_string(i), ids[i], FactorKind::kContracting, {i, i}, kNoDim);
  }
  return rule.AddPartialRule(PartialRule{{ReduceOp::kSum, std::nullopt}, ReduceOp::kSum}).Build();
}

StatusOr<ShardingRule> SliceGradRule(std::span<const int64_t> grad, std::span<const int64_t> input, int dim,
                                     int64_t start, int64_t end, int64_t step) {
  MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(input, dim, start, end, step));
  std::vector<int64_t> want(input.begin(), input.end());
  want[s.dim] = s.size;
  if (!std::equal(grad.begin(), grad.end(), want.begin(), want.end())) {
    return InvalidArgumentError("slice_grad: grad shape " + ShapeString(grad) + " is not the slice's result shape " +
                                ShapeString(want));
  }
  const int rank = static_cast<int>(input.size());
  RuleBuilder rule("slice_grad", {rank}, {input.begin(), input.end()});
  for (int i = 0; i < rank; ++i) {
    if (i != s.dim) rule.AddFactor("d" + std::to_string(i), input[i], FactorKind::kPassThrough, {i}, i);
  }
  return rule.AddFactor("s", s.size, FactorKind::kNeedReplication, {s.dim}, kNoDim)
      .AddFactor("n", input[s.dim], FactorKind::kNeedReplication, {kNoDim}, s.dim)
      .AddSelectPartialRules()
      .Build();
}

StatusOr<ShardingRule> CrossEntropyGradRule(std::span<const int64_t> logits, std::span<const int64_t> targets,
                                            std::span<const int64_t> grad, LossReduction reduction) {
  if (logits.empty() || !std::equal(targets.begin(), targets.end(), logits.begin(), logits.end() - 1)) {
    return InvalidArgumentError("cross_entropy_grad: targets shape " + ShapeString(targets) +
                                " must be the logits shape " + ShapeString(logits) + " without its last dim");
  }
  const bool none = reduction == LossReduction::kNone;
  if (none ? !std::equal(grad.begin(), grad.end(), targets.begin(), targets.end()) : !grad.empty()) {
    return InvalidArgumentError("cross_entropy_grad: grad shape " + ShapeString(grad) + " must be " +
                                (none ? ShapeString(targets) : std::string("[]")) + " for reduction " +
                                std::string(LossReductionName(reduction)));
  }
  const int rank = static_cast<int>(logits.size());
  RuleBuilder rule("cross_entropy_grad", {rank, rank - 1, static_cast<int>(grad.size())},
                   {logits.begin(), logits.end()});
  for (int i = 0; i + 1 < rank; ++i) {
    rule.AddFactor("b" + std::to_string(i), logits[i], FactorKind::kPassThrough, {i, i, none ? i : kNoDim}, i);
  }
  // Sharded classes: vocab-parallel (the kernel reduces the row statistics over the class shards).
  return rule.AddFactor("c", logits.back(), FactorKind::kPassThrough, {rank - 1, kNoDim, kNoDim}, rank - 1)
      .AddPartialRule(PartialRule{{std::nullopt, std::nullopt, ReduceOp::kSum}, ReduceOp::kSum})
      .Build();
}

}  // namespace meshflow
