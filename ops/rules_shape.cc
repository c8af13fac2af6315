// Sharding rules of the data-movement ops (permute, reshape, concat, slice), the normalizations,
// embedding and cross-entropy. Declared in ops/sharding_rule.h; see the comments there.
#include <algorithm>
#include <string>

#include "meshflow/base/strings.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {

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
  std::vector<int> result_dim(static_cast<size_t>(rank), kNoDim);  // per input dim
  std::vector<int64_t> out;
  for (int p : perm) {
    const int d = p < 0 ? p + rank : p;
    if (d < 0 || d >= rank || result_dim[d] != kNoDim) {
      return InvalidArgumentError("permute: perm " + ListString(perm) + " is not a permutation of the dims of shape " +
                                  ShapeString(x) + " (bad entry " + std::to_string(p) + ")");
    }
    result_dim[d] = static_cast<int>(out.size());
    out.push_back(x[d]);
  }
  RuleBuilder rule("permute", {rank}, out);
  for (int i = 0; i < rank; ++i) {
    rule.AddFactor("d" + std::to_string(i), x[i], FactorKind::kPassThrough, {i}, result_dim[i]);
  }
  return rule.AddSelectPartialRules().Build();
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
  RuleBuilder rule("reshape", {static_cast<int>(x.size())}, out);
  int64_t n = 1;
  for (int64_t s : x) n *= s;
  if (n == 0) {  // no elements: nothing to keep sharded
    for (size_t i = 0; i < x.size(); ++i) {
      rule.AddFactor("i" + std::to_string(i), x[i], FactorKind::kNeedReplication, {static_cast<int>(i)}, kNoDim);
    }
    for (size_t i = 0; i < out.size(); ++i) {
      rule.AddFactor("o" + std::to_string(i), out[i], FactorKind::kNeedReplication, {kNoDim}, static_cast<int>(i));
    }
    return rule.AddSelectPartialRules().Build();
  }
  const std::vector<ReshapeGroup> groups = ReshapeGroups(x, out);
  for (size_t g = 0; g < groups.size(); ++g) {
    const ReshapeGroup& grp = groups[g];
    const bool one_to_one = grp.in_dims.size() == 1 && grp.out_dims.size() == 1;
    rule.AddFactor((one_to_one ? "d" : "g") + std::to_string(g), x[grp.in_dims[0]], FactorKind::kPassThrough,
                   {grp.in_dims[0]}, grp.out_dims[0]);
    for (size_t k = 1; k < grp.in_dims.size(); ++k) {
      rule.AddFactor("g" + std::to_string(g) + "i" + std::to_string(k), x[grp.in_dims[k]],
                     FactorKind::kNeedReplication, {grp.in_dims[k]}, kNoDim);
    }
    for (size_t k = 1; k < grp.out_dims.size(); ++k) {
      rule.AddFactor("g" + std::to_string(g) + "o" + std::to_string(k), out[grp.out_dims[k]],
                     FactorKind::kNeedReplication, {kNoDim}, grp.out_dims[k]);
    }
  }
  return rule.AddSelectPartialRules().Build();
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
  const int first_normalized = rank - normalized_ndim;
  std::vector<int> operand_ranks = {rank};
  for (const auto& [what, s] : {std::pair<const char*, const std::vector<int64_t>*>{"weight", weight},
                                std::pair<const char*, const std::vector<int64_t>*>{"bias", bias}}) {
    if (s == nullptr) continue;
    if (!std::equal(s->begin(), s->end(), trailing.begin(), trailing.end())) {
      return InvalidArgumentError(name + ": " + what + " shape " + ShapeString(*s) +
                                  " differs from the normalized dims " + ShapeString(trailing) + " of " +
                                  ShapeString(x));
    }
    operand_ranks.push_back(normalized_ndim);
  }
  RuleBuilder rule(name, operand_ranks, {x.begin(), x.end()});
  for (int i = 0; i < rank; ++i) {
    const bool normalized = i >= first_normalized;
    // x's dim i; the weight's and bias's dim i - first_normalized (normalized dims only).
    std::vector<int> dims(operand_ranks.size(), normalized ? i - first_normalized : kNoDim);
    dims[0] = i;
    rule.AddFactor("d" + std::to_string(i), x[i], normalized ? FactorKind::kNeedReplication : FactorKind::kPassThrough,
                   std::move(dims), i);
  }
  return rule.Build();
}

StatusOr<ShardingRule> EmbeddingRule(std::span<const int64_t> table, std::span<const int64_t> ids) {
  if (table.size() != 2) {
    return InvalidArgumentError("embedding: table must be [V, D], got shape " + ShapeString(table));
  }
  const int ri = static_cast<int>(ids.size());
  std::vector<int64_t> out(ids.begin(), ids.end());
  out.push_back(table[1]);
  RuleBuilder rule("embedding", {2, ri}, out);
  rule.AddFactor("v", table[0], FactorKind::kContracting, {0, kNoDim}, kNoDim)
      .AddFactor("d", table[1], FactorKind::kPassThrough, {1, kNoDim}, ri);
  for (int i = 0; i < ri; ++i) {
    rule.AddFactor("i" + std::to_string(i), ids[i], FactorKind::kPassThrough, {kNoDim, i}, i);
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    rule.AddPartialRule(PartialRule{{op, std::nullopt}, op});
  }
  return rule.Build();
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
  const int num = static_cast<int>(shapes.size());
  int64_t total = 0;
  for (int o = 0; o < num; ++o) {
    const std::vector<int64_t>& s = *shapes[o];
    bool ok = static_cast<int>(s.size()) == rank;
    for (int i = 0; ok && i < rank; ++i) ok = i == d || s[i] == first[i];
    if (!ok) {
      return InvalidArgumentError("concat: operand " + std::to_string(o) + " shape " + ShapeString(s) +
                                  " does not match operand 0 shape " + ShapeString(first) + " outside dim " +
                                  std::to_string(d));
    }
    total += s[d];
  }
  std::vector<int64_t> out = first;
  out[d] = total;
  RuleBuilder rule("concat", std::vector<int>(static_cast<size_t>(num), rank), out);
  for (int i = 0; i < rank; ++i) {
    if (i == d) continue;
    rule.AddFactor("d" + std::to_string(i), first[i], FactorKind::kPassThrough, std::vector<int>(num, i), i);
  }
  for (int o = 0; o < num; ++o) {
    std::vector<int> dims(static_cast<size_t>(num), kNoDim);
    dims[o] = d;
    rule.AddFactor("c" + std::to_string(o), (*shapes[o])[d], FactorKind::kNeedReplication, std::move(dims), kNoDim);
  }
  return rule.AddFactor("c", total, FactorKind::kNeedReplication, std::vector<int>(num, kNoDim), d)
      .AddSelectPartialRules()
      .Build();
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
  const int rank = static_cast<int>(x.size());
  std::vector<int64_t> out(x.begin(), x.end());
  out[s.dim] = s.size;
  RuleBuilder rule("slice", {rank}, out);
  for (int i = 0; i < rank; ++i) rule.AddFactor("d" + std::to_string(i), x[i], FactorKind::kPassThrough, {i}, i);
  return rule.AddSelectPartialRules().Build();
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
  const bool none = reduction == LossReduction::kNone;
  const int rank = static_cast<int>(logits.size());
  RuleBuilder rule("cross_entropy", {rank, rank - 1},
                   none ? std::vector<int64_t>(targets.begin(), targets.end()) : std::vector<int64_t>{});
  for (int i = 0; i + 1 < rank; ++i) {
    rule.AddFactor("b" + std::to_string(i), logits[i], none ? FactorKind::kPassThrough : FactorKind::kReduction,
                   {i, i}, none ? i : kNoDim);
  }
  return rule.AddFactor("c", logits.back(), FactorKind::kContracting, {rank - 1, kNoDim}, kNoDim)  // vocab-parallel
      .Build();
}

}  // namespace meshflow
