// Sharding rules of comparison, where, expand and the gradient ops (embedding_grad, slice_grad,
// cross_entropy_grad). Declared in ops/sharding_rule.h; see the comments there.
#include <algorithm>
#include <string>

#include "meshflow/base/strings.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {
namespace {

int AddFactor(ShardingRule& r, std::string name, int64_t size, FactorKind kind, ReduceOp op = ReduceOp::kSum) {
  r.factors.push_back({std::move(name), size, kind, op});
  return static_cast<int>(r.factors.size()) - 1;
}

// Operand dims of `shape` right-aligned against the result's factors (size-1 stretched dims carry
// no factor).
std::vector<int> Aligned(std::span<const int64_t> shape, std::span<const int64_t> result,
                         std::span<const int> result_factors) {
  std::vector<int> dims(shape.size());
  const size_t lead = result.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    dims[i] = shape[i] == result[lead + i] ? result_factors[lead + i] : kNoFactor;
  }
  return dims;
}

// One pass-through factor per dim of `out`.
void PointwiseFactors(ShardingRule& r, std::span<const int64_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    r.result_dims.push_back(AddFactor(r, "d" + std::to_string(i), out[i], FactorKind::kPassThrough));
  }
  r.result_shape.assign(out.begin(), out.end());
}

}  // namespace

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
  ShardingRule r;
  r.op = std::string(CompareOpName(op));
  PointwiseFactors(r, out);
  r.operand_dims = {Aligned(a, out, r.result_dims), Aligned(b, out, r.result_dims)};
  return r;
}

StatusOr<ShardingRule> WhereRule(std::span<const int64_t> cond, std::span<const int64_t> a,
                                 std::span<const int64_t> b) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> ab, BroadcastShapes("where", a, b));
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes("where", cond, ab));
  ShardingRule r;
  r.op = "where";
  PointwiseFactors(r, out);
  r.operand_dims = {Aligned(cond, out, r.result_dims), Aligned(a, out, r.result_dims),
                    Aligned(b, out, r.result_dims)};
  r.partial_rules = {PartialRule{{std::nullopt, ReduceOp::kSum, ReduceOp::kSum}, ReduceOp::kSum}};
  return r;
}

StatusOr<ShardingRule> ExpandRule(std::span<const int64_t> x, std::span<const int64_t> shape) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes("expand", x, shape));
  if (!std::equal(out.begin(), out.end(), shape.begin(), shape.end())) {
    return InvalidArgumentError("expand: shape " + ShapeString(x) + " does not broadcast to " + ShapeString(shape));
  }
  ShardingRule r;
  r.op = "expand";
  PointwiseFactors(r, out);
  r.operand_dims = {Aligned(x, out, r.result_dims)};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    r.partial_rules.push_back(PartialRule{{op}, op});
  }
  return r;
}

StatusOr<ShardingRule> EmbeddingGradRule(std::span<const int64_t> grad, std::span<const int64_t> ids,
                                         int64_t num_rows) {
  if (num_rows < 0) return InvalidArgumentError("embedding_grad: num_rows " + std::to_string(num_rows) + " < 0");
  if (grad.size() != ids.size() + 1 || !std::equal(ids.begin(), ids.end(), grad.begin(), grad.end() - 1)) {
    return InvalidArgumentError("embedding_grad: grad shape " + ShapeString(grad) + " must be the ids shape " +
                                ShapeString(ids) + " plus [D]");
  }
  ShardingRule r;
  r.op = "embedding_grad";
  const int v = AddFactor(r, "v", num_rows, FactorKind::kPassThrough);
  const int d = AddFactor(r, "d", grad.back(), FactorKind::kPassThrough);
  std::vector<int> id_dims;
  for (size_t i = 0; i < ids.size(); ++i) {
    id_dims.push_back(AddFactor(r, "i" + std::to_string(i), ids[i], FactorKind::kContracting));
  }
  r.operand_dims = {id_dims, id_dims};
  r.operand_dims[0].push_back(d);
  r.result_dims = {v, d};
  r.result_shape = {num_rows, grad.back()};
  r.partial_rules = {PartialRule{{ReduceOp::kSum, std::nullopt}, ReduceOp::kSum}};
  return r;
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
  ShardingRule r;
  r.op = "slice_grad";
  std::vector<int> in;
  for (size_t i = 0; i < input.size(); ++i) {
    in.push_back(static_cast<int>(i) == s.dim ? kNoFactor
                                              : AddFactor(r, "d" + std::to_string(i), input[i], FactorKind::kPassThrough));
  }
  r.operand_dims = {in};
  r.result_dims = in;
  const int gs = AddFactor(r, "s", s.size, FactorKind::kNeedReplication);
  const int is = AddFactor(r, "n", input[s.dim], FactorKind::kNeedReplication);
  r.operand_dims[0][s.dim] = gs;
  r.result_dims[s.dim] = is;
  r.result_shape.assign(input.begin(), input.end());
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    r.partial_rules.push_back(PartialRule{{op}, op});
  }
  return r;
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
  ShardingRule r;
  r.op = "cross_entropy_grad";
  std::vector<int> lead;
  for (size_t i = 0; i + 1 < logits.size(); ++i) {
    lead.push_back(AddFactor(r, "b" + std::to_string(i), logits[i], FactorKind::kPassThrough));
  }
  // Sharded classes: vocab-parallel (the kernel reduces the row statistics over the class shards).
  const int c = AddFactor(r, "c", logits.back(), FactorKind::kPassThrough);
  r.operand_dims = {lead, lead, none ? lead : std::vector<int>{}};
  r.operand_dims[0].push_back(c);
  r.result_dims = r.operand_dims[0];
  r.result_shape.assign(logits.begin(), logits.end());
  r.partial_rules = {PartialRule{{std::nullopt, std::nullopt, ReduceOp::kSum}, ReduceOp::kSum}};
  return r;
}

}  // namespace meshflow
