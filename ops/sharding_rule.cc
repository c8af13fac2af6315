#include "meshflow/ops/sharding_rule.h"

#include <algorithm>

#include "meshflow/ops/shape_util.h"

namespace meshflow {
namespace {

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

RuleBuilder::RuleBuilder(std::string op, std::vector<int> operand_ranks, std::vector<int64_t> result_shape) {
  rule_.op = std::move(op);
  for (int rank : operand_ranks) rule_.operand_dims.emplace_back(static_cast<size_t>(rank), kNoFactor);
  rule_.result_dims.assign(result_shape.size(), kNoFactor);
  rule_.result_shape = std::move(result_shape);
}

RuleBuilder& RuleBuilder::AddFactor(std::string name, int64_t size, FactorKind kind, std::vector<int> operand_dims,
                                    int result_dim, ReduceOp reduce_op) {
  const int f = static_cast<int>(rule_.factors.size());
  // Maps dims[d] to factor f; `where` names the dims ("operand 1", "result") in errors.
  auto map = [&](std::vector<int>& dims, int d, const std::string& where) {
    if (d == kNoDim || !error_.ok()) return;
    if (d < 0 || d >= static_cast<int>(dims.size())) {
      error_ = InvalidArgumentError(rule_.op + ": factor '" + name + "' names " + where + " dim " + std::to_string(d) +
                                    ", out of range for rank " + std::to_string(dims.size()));
    } else if (dims[d] != kNoFactor) {
      error_ = InvalidArgumentError(rule_.op + ": " + where + " dim " + std::to_string(d) + " is named by factor '" +
                                    rule_.factors[dims[d]].name + "' and by factor '" + name + "'");
    } else {
      dims[d] = f;
    }
  };
  if (operand_dims.size() != rule_.operand_dims.size() && error_.ok()) {
    error_ = InvalidArgumentError(rule_.op + ": factor '" + name + "' names " + std::to_string(operand_dims.size()) +
                                  " operand dims for " + std::to_string(rule_.operand_dims.size()) + " operands");
  }
  for (size_t o = 0; o < operand_dims.size() && o < rule_.operand_dims.size(); ++o) {
    map(rule_.operand_dims[o], operand_dims[o], "operand " + std::to_string(o));
  }
  map(rule_.result_dims, result_dim, "result");
  rule_.factors.push_back({std::move(name), size, kind, reduce_op});
  return *this;
}

RuleBuilder& RuleBuilder::AddBroadcastFactors(std::string_view prefix, std::span<const int64_t> out,
                                              std::span<const std::span<const int64_t>> operands) {
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<int> dims(rule_.operand_dims.size(), kNoDim);
    for (size_t o = 0; o < operands.size() && o < dims.size(); ++o) {
      const std::span<const int64_t> shape = operands[o];
      const size_t lead = out.size() - shape.size();
      if (i >= lead && shape[i - lead] == out[i]) dims[o] = static_cast<int>(i - lead);
    }
    AddFactor(std::string(prefix) + std::to_string(i), out[i], FactorKind::kPassThrough, std::move(dims),
              static_cast<int>(i));
  }
  return *this;
}

RuleBuilder& RuleBuilder::AddPartialRule(PartialRule rule) {
  rule_.partial_rules.push_back(std::move(rule));
  return *this;
}

RuleBuilder& RuleBuilder::AddSelectPartialRules() {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    AddPartialRule(PartialRule{std::vector<std::optional<ReduceOp>>(rule_.operand_dims.size(), op), op});
  }
  return *this;
}

StatusOr<ShardingRule> RuleBuilder::Build() const {
  if (!error_.ok()) return error_;
  return rule_;
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
  const int nb = static_cast<int>(batch.size()), ra = static_cast<int>(a.size()), rb = static_cast<int>(b.size());
  std::vector<int64_t> out = batch;
  if (has_m) out.push_back(m);
  if (has_n) out.push_back(n);
  RuleBuilder rule("matmul", {ra, rb}, out);
  rule.AddBroadcastFactors("b", batch, std::vector<std::span<const int64_t>>{a.first(a_batch), b.first(b_batch)});
  if (has_m) rule.AddFactor("m", m, FactorKind::kPassThrough, {ra - 2, kNoDim}, nb);
  rule.AddFactor("k", k, FactorKind::kContracting, {ra - 1, static_cast<int>(b_batch)}, kNoDim);
  if (has_n) rule.AddFactor("n", n, FactorKind::kPassThrough, {kNoDim, rb - 1}, has_m ? nb + 1 : nb);
  return rule.AddPartialRule(PartialRule{{ReduceOp::kSum, std::nullopt}, ReduceOp::kSum})
      .AddPartialRule(PartialRule{{std::nullopt, ReduceOp::kSum}, ReduceOp::kSum})
      .Build();
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
  RuleBuilder rule(std::string(BinaryOpName(op)), {static_cast<int>(a.size()), static_cast<int>(b.size())}, out);
  rule.AddBroadcastFactors("d", out, std::vector<std::span<const int64_t>>{a, b});
  const ReduceOp kSum = ReduceOp::kSum;
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub: rule.AddPartialRule(PartialRule{{kSum, kSum}, kSum}); break;
    case BinaryOp::kMul:
      rule.AddPartialRule(PartialRule{{kSum, std::nullopt}, kSum})
          .AddPartialRule(PartialRule{{std::nullopt, kSum}, kSum});
      break;
    case BinaryOp::kDiv: rule.AddPartialRule(PartialRule{{kSum, std::nullopt}, kSum}); break;
  }
  return rule.Build();
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
  RuleBuilder rule(std::string(UnaryOpName(op)), {static_cast<int>(x.size())}, {x.begin(), x.end()});
  rule.AddBroadcastFactors("d", x, std::vector<std::span<const int64_t>>{x});
  if (IsLinear(op)) rule.AddPartialRule(PartialRule{{ReduceOp::kSum}, ReduceOp::kSum});
  return rule.Build().value();  // one factor per dim, each on its own dim: cannot fail
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
  std::vector<int64_t> out;
  std::vector<int> result_dim(x.size(), kNoDim);  // per input dim
  for (size_t i = 0; i < x.size(); ++i) {
    const bool reduced = std::find(rd.begin(), rd.end(), static_cast<int>(i)) != rd.end();
    if (reduced && x[i] == 0 && (kind == ReduceKind::kMax || kind == ReduceKind::kMin)) {
      return InvalidArgumentError(std::string(ReduceKindName(kind)) + ": reduced dim " + std::to_string(i) +
                                  " of shape " + ShapeString(x) + " has size 0 (no identity)");
    }
    if (!reduced) result_dim[i] = static_cast<int>(out.size());
    if (!reduced || keepdim) out.push_back(reduced ? 1 : x[i]);
  }
  RuleBuilder rule(std::string(ReduceKindName(kind)), {static_cast<int>(x.size())}, out);
  for (size_t i = 0; i < x.size(); ++i) {
    const FactorKind fk = result_dim[i] == kNoDim ? FactorKind::kReduction : FactorKind::kPassThrough;
    rule.AddFactor("d" + std::to_string(i), x[i], fk, {static_cast<int>(i)}, result_dim[i], op);
  }
  return rule.AddPartialRule(PartialRule{{op}, op}).Build();
}

StatusOr<ShardingRule> SoftmaxRule(bool log, std::span<const int64_t> x, int dim) {
  const int rank = static_cast<int>(x.size());
  const int d = dim < 0 ? dim + rank : dim;
  const char* name = log ? "log_softmax" : "softmax";
  if (d < 0 || d >= rank) {
    return InvalidArgumentError(std::string(name) + ": dim " + std::to_string(dim) + " out of range for shape " +
                                ShapeString(x));
  }
  RuleBuilder rule(name, {rank}, {x.begin(), x.end()});
  for (int i = 0; i < rank; ++i) {
    rule.AddFactor("d" + std::to_string(i), x[i], i == d ? FactorKind::kNeedReplication : FactorKind::kPassThrough,
                   {i}, i);
  }
  return rule.Build();
}

}  // namespace meshflow
