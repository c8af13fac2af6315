#include "meshflow/ops/sharding_rule.h"

#include <algorithm>

#include "meshflow/ops/shape_util.h"

namespace meshflow {
namespace {

// Operand dims of `shape` right-aligned against result dims [first, first + n) of `factors_of`.
std::vector<int> AlignedDims(std::span<const int64_t> shape, std::span<const int64_t> result,
                             std::span<const int> result_factors) {
  std::vector<int> dims(shape.size());
  const size_t lead = result.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    dims[i] = shape[i] == result[lead + i] ? result_factors[lead + i] : kNoFactor;
  }
  return dims;
}

std::string FactorNames(const ShardingRule& r, const std::vector<int>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    s += i ? "," : "";
    s += dims[i] == kNoFactor ? "1" : r.factors[dims[i]].name;
  }
  return s + "]";
}

}  // namespace

std::string_view FactorKindName(FactorKind kind) {
  switch (kind) {
    case FactorKind::kPassThrough: return "pass_through";
    case FactorKind::kContracting: return "contracting";
    case FactorKind::kReduction: return "reduction";
    case FactorKind::kNeedReplication: return "need_replication";
  }
  return "?";
}

std::string ShardingRule::ToString() const {
  std::string s = op + ": ";
  for (size_t i = 0; i < operand_dims.size(); ++i) s += (i ? "," : "") + FactorNames(*this, operand_dims[i]);
  s += " -> " + FactorNames(*this, result_dims) + " {";
  for (size_t f = 0; f < factors.size(); ++f) {
    s += (f ? ", " : "") + factors[f].name + "=" + std::to_string(factors[f].size) + " " +
         std::string(FactorKindName(factors[f].kind));
    if (factors[f].kind == FactorKind::kContracting || factors[f].kind == FactorKind::kReduction) {
      s += "(" + std::string(ReduceOpName(factors[f].reduce_op)) + ")";
    }
  }
  return s + "}";
}

std::string Strategy::ToString() const {
  std::string s;
  for (size_t i = 0; i < operands.size(); ++i) {
    s += (i ? " x {" : "{") + meshflow::ToString(std::span<const Placement>(operands[i])) + "}";
  }
  return s + " -> " + meshflow::ToString(std::span<const Placement>(result));
}

std::optional<Strategy> StrategyFor(const ShardingRule& rule, std::span<const MeshDimAssignment> assignment) {
  Strategy s;
  s.assignment.assign(assignment.begin(), assignment.end());
  s.operands.assign(rule.operand_dims.size(), Placements(assignment.size(), Replicate{}));
  s.result.assign(assignment.size(), Replicate{});
  std::optional<ReduceOp> result_partial;
  for (size_t m = 0; m < assignment.size(); ++m) {
    const MeshDimAssignment& a = assignment[m];
    std::optional<ReduceOp> partial;
    if (a.kind == MeshDimAssignment::Kind::kFactor) {
      const Factor& f = rule.factors[a.index];
      for (size_t o = 0; o < rule.operand_dims.size(); ++o) {
        const auto& dims = rule.operand_dims[o];
        for (size_t d = 0; d < dims.size(); ++d) {
          if (dims[d] == a.index) s.operands[o][m] = Shard{static_cast<int>(d)};
        }
      }
      if (f.kind == FactorKind::kPassThrough) {
        for (size_t d = 0; d < rule.result_dims.size(); ++d) {
          if (rule.result_dims[d] == a.index) s.result[m] = Shard{static_cast<int>(d)};
        }
      } else {
        partial = f.reduce_op;
      }
    } else if (a.kind == MeshDimAssignment::Kind::kPartial) {
      const PartialRule& p = rule.partial_rules[a.index];
      for (size_t o = 0; o < p.operands.size(); ++o) {
        if (p.operands[o]) s.operands[o][m] = Partial{*p.operands[o]};
      }
      partial = p.result;
    }
    if (partial) {
      if (result_partial && *result_partial != *partial) return std::nullopt;  // mixed Partial ops
      result_partial = partial;
      s.result[m] = Partial{*partial};
    }
  }
  return s;
}

std::vector<Strategy> EnumerateStrategies(const ShardingRule& rule, int mesh_ndim) {
  std::vector<MeshDimAssignment> choices = {MeshDimAssignment{}};
  for (size_t f = 0; f < rule.factors.size(); ++f) {
    if (rule.factors[f].kind == FactorKind::kNeedReplication) continue;
    choices.push_back({MeshDimAssignment::Kind::kFactor, static_cast<int>(f)});
  }
  for (size_t p = 0; p < rule.partial_rules.size(); ++p) {
    choices.push_back({MeshDimAssignment::Kind::kPartial, static_cast<int>(p)});
  }
  std::vector<Strategy> out;
  std::vector<size_t> idx(static_cast<size_t>(mesh_ndim), 0);
  std::vector<MeshDimAssignment> assignment(static_cast<size_t>(mesh_ndim));
  while (true) {
    for (int m = 0; m < mesh_ndim; ++m) assignment[m] = choices[idx[m]];
    if (std::optional<Strategy> s = StrategyFor(rule, assignment)) out.push_back(std::move(*s));
    int m = mesh_ndim - 1;
    while (m >= 0 && ++idx[m] == choices.size()) idx[m--] = 0;
    if (m < 0) break;
  }
  return out;
}

double LocalWorkPoints(const ShardingRule& rule, const Strategy& s, std::span<const int64_t> mesh_shape) {
  std::vector<int64_t> ways(rule.factors.size(), 1);
  for (size_t m = 0; m < s.assignment.size() && m < mesh_shape.size(); ++m) {
    const MeshDimAssignment& a = s.assignment[m];
    if (a.kind == MeshDimAssignment::Kind::kFactor) ways[static_cast<size_t>(a.index)] *= mesh_shape[m];
  }
  double points = 1;
  for (size_t f = 0; f < rule.factors.size(); ++f) {
    const int64_t size = rule.factors[f].size;
    points *= static_cast<double>((size + ways[f] - 1) / ways[f]);
  }
  return points;
}

StatusOr<ShardingRule> MatmulRule(std::span<const int64_t> a, std::span<const int64_t> b) {
  if (a.empty() || b.empty()) {
    return InvalidArgumentError("matmul: operands need rank >= 1, got shapes " + ShapeString(a) + " and " +
                                ShapeString(b));
  }
  // Numpy: a rank-1 a is a row [1, k], a rank-1 b a column [k, 1]; that dim leaves the result.
  const bool has_m = a.size() >= 2, has_n = b.size() >= 2;
  const size_t a_batch = has_m ? a.size() - 2 : 0, b_batch = has_n ? b.size() - 2 : 0;
  const int64_t m = has_m ? a[a.size() - 2] : 1, k = a[a.size() - 1], kb = b[b_batch], n = has_n ? b.back() : 1;
  if (k != kb) {
    return InvalidArgumentError("matmul: contracting sizes differ: a " + ShapeString(a) + " has k = " +
                                std::to_string(k) + ", b " + ShapeString(b) + " has k = " + std::to_string(kb));
  }
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> batch,
                      BroadcastShapes("matmul batch dims", a.first(a_batch), b.first(b_batch)));
  ShardingRule r;
  r.op = "matmul";
  std::vector<int> batch_factors;
  for (size_t i = 0; i < batch.size(); ++i) {
    batch_factors.push_back(static_cast<int>(r.factors.size()));
    r.factors.push_back({"b" + std::to_string(i), batch[i], FactorKind::kPassThrough, ReduceOp::kSum});
  }
  auto add = [&r](std::string name, int64_t size, FactorKind kind) {
    r.factors.push_back({std::move(name), size, kind, ReduceOp::kSum});
    return static_cast<int>(r.factors.size()) - 1;
  };
  const int fm = has_m ? add("m", m, FactorKind::kPassThrough) : kNoFactor;
  const int fk = add("k", k, FactorKind::kContracting);
  const int fn = has_n ? add("n", n, FactorKind::kPassThrough) : kNoFactor;
  std::vector<int> da = AlignedDims(a.first(a_batch), batch, batch_factors);
  std::vector<int> db = AlignedDims(b.first(b_batch), batch, batch_factors);
  r.result_dims = batch_factors;
  r.result_shape = batch;
  if (has_m) {
    da.push_back(fm);
    r.result_dims.push_back(fm);
    r.result_shape.push_back(m);
  }
  da.push_back(fk);
  db.push_back(fk);
  if (has_n) {
    db.push_back(fn);
    r.result_dims.push_back(fn);
    r.result_shape.push_back(n);
  }
  r.operand_dims = {da, db};
  r.partial_rules = {PartialRule{{ReduceOp::kSum, std::nullopt}, ReduceOp::kSum},
                     PartialRule{{std::nullopt, ReduceOp::kSum}, ReduceOp::kSum}};
  return r;
}

std::string_view BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "add";
    case BinaryOp::kSub: return "sub";
    case BinaryOp::kMul: return "mul";
    case BinaryOp::kDiv: return "div";
  }
  return "?";
}

StatusOr<ShardingRule> BinaryRule(BinaryOp op, std::span<const int64_t> a, std::span<const int64_t> b) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(BinaryOpName(op), a, b));
  ShardingRule r;
  r.op = std::string(BinaryOpName(op));
  for (size_t i = 0; i < out.size(); ++i) {
    r.factors.push_back({"d" + std::to_string(i), out[i], FactorKind::kPassThrough, ReduceOp::kSum});
    r.result_dims.push_back(static_cast<int>(i));
  }
  r.operand_dims = {AlignedDims(a, out, r.result_dims), AlignedDims(b, out, r.result_dims)};
  r.result_shape = out;
  const ReduceOp kSum = ReduceOp::kSum;
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub: r.partial_rules = {PartialRule{{kSum, kSum}, kSum}}; break;
    case BinaryOp::kMul:
      r.partial_rules = {PartialRule{{kSum, std::nullopt}, kSum}, PartialRule{{std::nullopt, kSum}, kSum}};
      break;
    case BinaryOp::kDiv: r.partial_rules = {PartialRule{{kSum, std::nullopt}, kSum}}; break;
  }
  return r;
}

std::string_view UnaryOpName(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg: return "neg";
    case UnaryOp::kScale: return "scale";
    case UnaryOp::kRelu: return "relu";
    case UnaryOp::kExp: return "exp";
    case UnaryOp::kGelu: return "gelu";
    case UnaryOp::kTanh: return "tanh";
    case UnaryOp::kSigmoid: return "sigmoid";
    case UnaryOp::kSilu: return "silu";
    case UnaryOp::kSqrt: return "sqrt";
    case UnaryOp::kRsqrt: return "rsqrt";
    case UnaryOp::kPow: return "pow";
    case UnaryOp::kAddScalar: return "add_scalar";
    case UnaryOp::kLog: return "log";
    case UnaryOp::kStep: return "step";
    case UnaryOp::kFill: return "fill";
    case UnaryOp::kGeluDeriv: return "gelu_deriv";
    case UnaryOp::kSiluDeriv: return "silu_deriv";
    case UnaryOp::kTanhDeriv: return "tanh_deriv";
    case UnaryOp::kSigmoidDeriv: return "sigmoid_deriv";
  }
  return "?";
}

bool IsLinear(UnaryOp op) { return op == UnaryOp::kNeg || op == UnaryOp::kScale; }
bool HasAlpha(UnaryOp op) {
  return op == UnaryOp::kScale || op == UnaryOp::kPow || op == UnaryOp::kAddScalar || op == UnaryOp::kFill;
}

ShardingRule UnaryRule(UnaryOp op, std::span<const int64_t> x) {
  ShardingRule r;
  r.op = std::string(UnaryOpName(op));
  for (size_t i = 0; i < x.size(); ++i) {
    r.factors.push_back({"d" + std::to_string(i), x[i], FactorKind::kPassThrough, ReduceOp::kSum});
    r.result_dims.push_back(static_cast<int>(i));
  }
  r.operand_dims = {r.result_dims};
  r.result_shape.assign(x.begin(), x.end());
  if (IsLinear(op)) r.partial_rules = {PartialRule{{ReduceOp::kSum}, ReduceOp::kSum}};
  return r;
}

std::string_view ReduceKindName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kMean: return "mean";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kMin: return "min";
  }
  return "?";
}

StatusOr<std::vector<int>> NormalizeReduceDims(std::span<const int64_t> x, std::span<const int> dims) {
  const int rank = static_cast<int>(x.size());
  std::vector<int> out;
  if (dims.empty()) {
    for (int d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (int d : dims) {
    const int nd = d < 0 ? d + rank : d;
    if (nd < 0 || nd >= rank) {
      return InvalidArgumentError("reduce: dim " + std::to_string(d) + " out of range for shape " + ShapeString(x));
    }
    if (std::find(out.begin(), out.end(), nd) != out.end()) {
      return InvalidArgumentError("reduce: dim " + std::to_string(d) + " repeated for shape " + ShapeString(x));
    }
    out.push_back(nd);
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<ShardingRule> ReduceRule(ReduceKind kind, std::span<const int64_t> x, std::span<const int> dims,
                                  bool keepdim) {
  MF_ASSIGN_OR_RETURN(std::vector<int> rd, NormalizeReduceDims(x, dims));
  const ReduceOp op = kind == ReduceKind::kMax ? ReduceOp::kMax
                      : kind == ReduceKind::kMin ? ReduceOp::kMin
                                                 : ReduceOp::kSum;
  ShardingRule r;
  r.op = std::string(ReduceKindName(kind));
  std::vector<int> in;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool reduced = std::find(rd.begin(), rd.end(), static_cast<int>(i)) != rd.end();
    if (reduced && x[i] == 0 && (kind == ReduceKind::kMax || kind == ReduceKind::kMin)) {
      return InvalidArgumentError(std::string(ReduceKindName(kind)) + ": reduced dim " + std::to_string(i) +
                                  " of shape " + ShapeString(x) + " has size 0 (no identity)");
    }
    in.push_back(static_cast<int>(i));
    r.factors.push_back({"d" + std::to_string(i), x[i],
                         reduced ? FactorKind::kReduction : FactorKind::kPassThrough, op});
    if (!reduced) {
      r.result_dims.push_back(static_cast<int>(i));
      r.result_shape.push_back(x[i]);
    } else if (keepdim) {
      r.result_dims.push_back(kNoFactor);
      r.result_shape.push_back(1);
    }
  }
  r.operand_dims = {in};
  r.partial_rules = {PartialRule{{op}, op}};
  return r;
}

StatusOr<ShardingRule> SoftmaxRule(bool log, std::span<const int64_t> x, int dim) {
  const int rank = static_cast<int>(x.size());
  const int d = dim < 0 ? dim + rank : dim;
  const char* name = log ? "log_softmax" : "softmax";
  if (d < 0 || d >= rank) {
    return InvalidArgumentError(std::string(name) + ": dim " + std::to_string(dim) + " out of range for shape " +
                                ShapeString(x));
  }
  ShardingRule r;
  r.op = name;
  for (int i = 0; i < rank; ++i) {
    r.factors.push_back({"d" + std::to_string(i), x[i],
                         i == d ? FactorKind::kNeedReplication : FactorKind::kPassThrough, ReduceOp::kSum});
    r.result_dims.push_back(i);
  }
  r.operand_dims = {r.result_dims};
  r.result_shape.assign(x.begin(), x.end());
  return r;
}

}  // namespace meshflow
