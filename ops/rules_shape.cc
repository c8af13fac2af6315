// Sharding rules of the data-movement ops (permute, reshape, concat, slice), the normalizations,
// embedding and cross-entropy. Declared in ops/sharding_rule.h; see the comments there.
#include <algorithm>
#include <string>

#include "meshflow/base/strings.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {
namespace {

// {P(op), ..., P(op)} -> P(op) for every reduce op: right for ops that only move / select
// elements (each output element is one input element, or a fixed zero).
std::vector<PartialRule> SelectPartialRules(int num_operands) {
  std::vector<PartialRule> out;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    out.push_back(PartialRule{std::vector<std::optional<ReduceOp>>(static_cast<size_t>(num_operands), op), op});
  }
  return out;
}

int AddFactor(ShardingRule& r, std::string name, int64_t size, FactorKind kind, ReduceOp op = ReduceOp::kSum) {
  r.factors.push_back({std::move(name), size, kind, op});
  return static_cast<int>(r.factors.size()) - 1;
}

}  // namespace

StatusOr<std::vector<int>> TransposePerm(int rank, int d0, int d1) {
  const int a = d0 < 0 ? d0 + rank : d0, b = d1 < 0 ? d1 + rank : d1;
  if (a < 0 || a >= rank || b < 0 || b >= rank) {
    return InvalidArgumentError("transpose: dims (" + std::to_string(d0) + ", " + std::to_string(d1) +
                                ") out of range for rank " + std::to_string(rank));
  }
  std::vector<int> perm(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) perm[i] = i;
  std::swap(perm[a], perm[b]);
  return perm;
}

StatusOr<ShardingRule> PermuteRule(std::span<const int64_t> x, std::span<const int> perm) {
  const int rank = static_cast<int>(x.size());
  if (static_cast<int>(perm.size()) != rank) {
    return InvalidArgumentError("permute: perm " + ListString(perm) + " has " + std::to_string(perm.size()) +
                                " entries for shape " + ShapeString(x));
  }
  ShardingRule r;
  r.op = "permute";
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int p : perm) {
    const int d = p < 0 ? p + rank : p;
    if (d < 0 || d >= rank || seen[d]) {
      return InvalidArgumentError("permute: perm " + ListString(perm) + " is not a permutation of the dims of shape " +
                                  ShapeString(x) + " (bad entry " + std::to_string(p) + ")");
    }
    seen[d] = true;
    r.result_dims.push_back(d);
    r.result_shape.push_back(x[d]);
  }
  std::vector<int> in;
  for (int i = 0; i < rank; ++i) {
    in.push_back(AddFactor(r, "d" + std::to_string(i), x[i], FactorKind::kPassThrough));
  }
  r.operand_dims = {in};
  r.partial_rules = SelectPartialRules(1);
  return r;
}

StatusOr<std::vector<int64_t>> ResolveReshape(std::span<const int64_t> x, std::span<const int64_t> shape) {
  int64_t n = 1, known = 1;
  for (int64_t s : x) n *= s;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) {
        return InvalidArgumentError("reshape: more than one -1 in " + ShapeString(shape));
      }
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return InvalidArgumentError("reshape: negative size " + std::to_string(shape[i]) + " in " +
                                  ShapeString(shape));
    } else {
      known *= shape[i];
    }
  }
  std::vector<int64_t> out(shape.begin(), shape.end());
  if (infer >= 0) {
    if (known == 0 || n % known != 0) {
      return InvalidArgumentError("reshape: cannot infer the -1 of " + ShapeString(shape) + " for shape " +
                                  ShapeString(x) + " (" + std::to_string(n) + " elements)");
    }
    out[infer] = n / known;
    known = n;
  }
  if (known != n) {
    return InvalidArgumentError("reshape: shape " + ShapeString(x) + " (" + std::to_string(n) +
                                " elements) cannot become " + ShapeString(shape) + " (" + std::to_string(known) +
                                " elements)");
  }
  return out;
}

std::vector<ReshapeGroup> ReshapeGroups(std::span<const int64_t> x, std::span<const int64_t> out) {
  std::vector<int> in_dims, out_dims;  // dims of size != 1
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == 0) return {};
    if (x[i] != 1) in_dims.push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0) return {};
    if (out[i] != 1) out_dims.push_back(static_cast<int>(i));
  }
  std::vector<ReshapeGroup> groups;
  size_t i = 0, j = 0;
  while (i < in_dims.size() && j < out_dims.size()) {
    ReshapeGroup g;
    int64_t pi = x[in_dims[i]], pj = out[out_dims[j]];
    g.in_dims.push_back(in_dims[i++]);
    g.out_dims.push_back(out_dims[j++]);
    while (pi != pj) {
      if (pi < pj) {
        pi *= x[in_dims[i]];
        g.in_dims.push_back(in_dims[i++]);
      } else {
        pj *= out[out_dims[j]];
        g.out_dims.push_back(out_dims[j++]);
      }
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

StatusOr<ShardingRule> ReshapeRule(std::span<const int64_t> x, std::span<const int64_t> shape) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, ResolveReshape(x, shape));
  ShardingRule r;
  r.op = "reshape";
  r.operand_dims = {std::vector<int>(x.size(), kNoFactor)};
  r.result_dims.assign(out.size(), kNoFactor);
  r.result_shape = out;
  int64_t n = 1;
  for (int64_t s : x) n *= s;
  if (n == 0) {  // no elements: nothing to keep sharded
    for (size_t i = 0; i < x.size(); ++i) {
      r.operand_dims[0][i] = AddFactor(r, "i" + std::to_string(i), x[i], FactorKind::kNeedReplication);
    }
    for (size_t i = 0; i < out.size(); ++i) {
      r.result_dims[i] = AddFactor(r, "o" + std::to_string(i), out[i], FactorKind::kNeedReplication);
    }
    r.partial_rules = SelectPartialRules(1);
    return r;
  }
  const std::vector<ReshapeGroup> groups = ReshapeGroups(x, out);
  for (size_t g = 0; g < groups.size(); ++g) {
    const ReshapeGroup& grp = groups[g];
    const bool one_to_one = grp.in_dims.size() == 1 && grp.out_dims.size() == 1;
    const int major = AddFactor(r, (one_to_one ? "d" : "g") + std::to_string(g), x[grp.in_dims[0]],
                                FactorKind::kPassThrough);
    r.operand_dims[0][grp.in_dims[0]] = major;
    r.result_dims[grp.out_dims[0]] = major;
    for (size_t k = 1; k < grp.in_dims.size(); ++k) {
      r.operand_dims[0][grp.in_dims[k]] = AddFactor(r, "g" + std::to_string(g) + "i" + std::to_string(k),
                                                    x[grp.in_dims[k]], FactorKind::kNeedReplication);
    }
    for (size_t k = 1; k < grp.out_dims.size(); ++k) {
      r.result_dims[grp.out_dims[k]] = AddFactor(r, "g" + std::to_string(g) + "o" + std::to_string(k),
                                                 out[grp.out_dims[k]], FactorKind::kNeedReplication);
    }
  }
  r.partial_rules = SelectPartialRules(1);
  return r;
}

std::string_view NormKindName(NormKind kind) {
  return kind == NormKind::kLayerNorm ? "layer_norm" : "rms_norm";
}

StatusOr<ShardingRule> NormRule(NormKind kind, std::span<const int64_t> x, int normalized_ndim,
                                const std::vector<int64_t>* weight, const std::vector<int64_t>* bias) {
  const int rank = static_cast<int>(x.size());
  const std::string name(NormKindName(kind));
  if (normalized_ndim < 1 || normalized_ndim > rank) {
    return InvalidArgumentError(name + ": normalized_ndim " + std::to_string(normalized_ndim) +
                                " out of range [1, " + std::to_string(rank) + "] for shape " + ShapeString(x));
  }
  const std::span<const int64_t> trailing = x.subspan(static_cast<size_t>(rank - normalized_ndim));
  ShardingRule r;
  r.op = name;
  std::vector<int> in;
  for (int i = 0; i < rank; ++i) {
    in.push_back(AddFactor(r, "d" + std::to_string(i), x[i],
                           i >= rank - normalized_ndim ? FactorKind::kNeedReplication : FactorKind::kPassThrough));
  }
  r.operand_dims = {in};
  const std::vector<int> tied(in.end() - normalized_ndim, in.end());
  for (const auto& [what, s] : {std::pair<const char*, const std::vector<int64_t>*>{"weight", weight},
                                std::pair<const char*, const std::vector<int64_t>*>{"bias", bias}}) {
    if (s == nullptr) continue;
    if (!std::equal(s->begin(), s->end(), trailing.begin(), trailing.end())) {
      return InvalidArgumentError(name + ": " + what + " shape " + ShapeString(*s) +
                                  " differs from the normalized dims " + ShapeString(trailing) + " of " +
                                  ShapeString(x));
    }
    r.operand_dims.push_back(tied);
  }
  r.result_dims = in;
  r.result_shape.assign(x.begin(), x.end());
  return r;
}

StatusOr<ShardingRule> EmbeddingRule(std::span<const int64_t> table, std::span<const int64_t> ids) {
  if (table.size() != 2) {
    return InvalidArgumentError("embedding: table must be [V, D], got shape " + ShapeString(table));
  }
  ShardingRule r;
  r.op = "embedding";
  const int v = AddFactor(r, "v", table[0], FactorKind::kContracting);
  const int d = AddFactor(r, "d", table[1], FactorKind::kPassThrough);
  std::vector<int> id_dims;
  for (size_t i = 0; i < ids.size(); ++i) {
    id_dims.push_back(AddFactor(r, "i" + std::to_string(i), ids[i], FactorKind::kPassThrough));
  }
  r.operand_dims = {{v, d}, id_dims};
  r.result_dims = id_dims;
  r.result_dims.push_back(d);
  r.result_shape.assign(ids.begin(), ids.end());
  r.result_shape.push_back(table[1]);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    r.partial_rules.push_back(PartialRule{{op, std::nullopt}, op});
  }
  return r;
}

StatusOr<ShardingRule> ConcatRule(std::span<const std::vector<int64_t>* const> shapes, int dim) {
  if (shapes.empty()) return InvalidArgumentError("concat: no operands");
  const std::vector<int64_t>& first = *shapes[0];
  const int rank = static_cast<int>(first.size());
  const int d = dim < 0 ? dim + rank : dim;
  if (rank == 0 || d < 0 || d >= rank) {
    return InvalidArgumentError("concat: dim " + std::to_string(dim) + " out of range for shape " +
                                ShapeString(first));
  }
  ShardingRule r;
  r.op = "concat";
  std::vector<int> common(static_cast<size_t>(rank), kNoFactor);
  for (int i = 0; i < rank; ++i) {
    if (i != d) common[i] = AddFactor(r, "d" + std::to_string(i), first[i], FactorKind::kPassThrough);
  }
  int64_t total = 0;
  for (size_t o = 0; o < shapes.size(); ++o) {
    const std::vector<int64_t>& s = *shapes[o];
    bool ok = static_cast<int>(s.size()) == rank;
    for (int i = 0; ok && i < rank; ++i) ok = i == d || s[i] == first[i];
    if (!ok) {
      return InvalidArgumentError("concat: operand " + std::to_string(o) + " shape " + ShapeString(s) +
                                  " does not match operand 0 shape " + ShapeString(first) + " outside dim " +
                                  std::to_string(d));
    }
    std::vector<int> dims = common;
    dims[d] = AddFactor(r, "c" + std::to_string(o), s[d], FactorKind::kNeedReplication);
    r.operand_dims.push_back(std::move(dims));
    total += s[d];
  }
  r.result_dims = common;
  r.result_dims[d] = AddFactor(r, "c", total, FactorKind::kNeedReplication);
  r.result_shape = first;
  r.result_shape[d] = total;
  r.partial_rules = SelectPartialRules(static_cast<int>(shapes.size()));
  return r;
}

StatusOr<SliceRange> NormalizeSlice(std::span<const int64_t> x, int dim, int64_t start, int64_t end, int64_t step) {
  const int rank = static_cast<int>(x.size());
  const int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) {
    return InvalidArgumentError("slice: dim " + std::to_string(dim) + " out of range for shape " + ShapeString(x));
  }
  if (step < 1) {
    return InvalidArgumentError("slice: step " + std::to_string(step) + " must be >= 1");
  }
  const int64_t n = x[d];
  auto clamp = [n](int64_t v) {
    if (v < 0) v += n;
    return std::clamp<int64_t>(v, 0, n);
  };
  const int64_t b = clamp(start), e = clamp(end);
  return SliceRange{d, b, step, e > b ? (e - b + step - 1) / step : 0};
}

StatusOr<ShardingRule> SliceRule(std::span<const int64_t> x, int dim, int64_t start, int64_t end, int64_t step) {
  MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(x, dim, start, end, step));
  ShardingRule r;
  r.op = "slice";
  std::vector<int> in;
  for (size_t i = 0; i < x.size(); ++i) {
    in.push_back(AddFactor(r, "d" + std::to_string(i), x[i], FactorKind::kPassThrough));
  }
  r.operand_dims = {in};
  r.result_dims = in;
  r.result_shape.assign(x.begin(), x.end());
  r.result_shape[s.dim] = s.size;
  r.partial_rules = SelectPartialRules(1);
  return r;
}

Interval SliceResultRange(const SliceRange& s, int64_t lo, int64_t hi) {
  // First j with start + j * step >= v, clamped to [0, size].
  auto first_at_or_after = [&s](int64_t v) {
    if (v <= s.start) return int64_t{0};
    return std::min(s.size, (v - s.start + s.step - 1) / s.step);
  };
  const int64_t a = first_at_or_after(lo), b = first_at_or_after(hi);
  return Interval{a, std::max(a, b)};
}

std::string_view LossReductionName(LossReduction r) {
  switch (r) {
    case LossReduction::kMean: return "mean";
    case LossReduction::kSum: return "sum";
    case LossReduction::kNone: return "none";
  }
  return "?";
}

StatusOr<ShardingRule> CrossEntropyRule(std::span<const int64_t> logits, std::span<const int64_t> targets,
                                        LossReduction reduction) {
  if (logits.empty() || !std::equal(targets.begin(), targets.end(), logits.begin(), logits.end() - 1)) {
    return InvalidArgumentError("cross_entropy: targets shape " + ShapeString(targets) +
                                " must be the logits shape " + ShapeString(logits) + " without its last dim");
  }
  ShardingRule r;
  r.op = "cross_entropy";
  const bool none = reduction == LossReduction::kNone;
  std::vector<int> lead;
  for (size_t i = 0; i + 1 < logits.size(); ++i) {
    lead.push_back(AddFactor(r, "b" + std::to_string(i), logits[i],
                             none ? FactorKind::kPassThrough : FactorKind::kReduction));
  }
  const int c = AddFactor(r, "c", logits.back(), FactorKind::kContracting);  // vocab-parallel
  r.operand_dims = {lead, lead};
  r.operand_dims[0].push_back(c);
  if (none) {
    r.result_dims = lead;
    r.result_shape.assign(targets.begin(), targets.end());
  }
  return r;
}

}  // namespace meshflow
