#include "meshflow/ops/eager.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <tuple>

#include "meshflow/base/strings.h"
#include "meshflow/collectives/executor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/planner/cost_model.h"

namespace meshflow {
namespace {

// The op without alpha (alpha does not change the strategy). Field by field: this runs on every
// cache hit.
bool SameStructure(const OpSpec& a, const OpSpec& b) {
  return a.kind == b.kind && a.binary == b.binary && a.unary == b.unary && a.reduce == b.reduce &&
         a.dims == b.dims && a.keepdim == b.keepdim && a.dim == b.dim && a.log == b.log && a.perm == b.perm &&
         a.dim1 == b.dim1 && a.shape == b.shape && a.norm == b.norm && a.normalized_ndim == b.normalized_ndim &&
         a.has_weight == b.has_weight && a.has_bias == b.has_bias && a.eps == b.eps &&
         a.num_inputs == b.num_inputs && a.start == b.start && a.end == b.end && a.step == b.step &&
         a.reduction == b.reduction;
}

}  // namespace

OpSpec OpSpec::Binary(BinaryOp op) {
  OpSpec s;
  s.kind = Kind::kBinary;
  s.binary = op;
  return s;
}
OpSpec OpSpec::Unary(UnaryOp op, double alpha) {
  OpSpec s;
  s.kind = Kind::kUnary;
  s.unary = op;
  s.alpha = alpha;
  return s;
}
OpSpec OpSpec::Reduce(ReduceKind kind, std::vector<int> dims, bool keepdim) {
  OpSpec s;
  s.kind = Kind::kReduce;
  s.reduce = kind;
  s.dims = std::move(dims);
  s.keepdim = keepdim;
  return s;
}
OpSpec OpSpec::Softmax(int dim, bool log) {
  OpSpec s;
  s.kind = Kind::kSoftmax;
  s.dim = dim;
  s.log = log;
  return s;
}

OpSpec OpSpec::Permute(std::vector<int> perm) {
  OpSpec s;
  s.kind = Kind::kPermute;
  s.perm = std::move(perm);
  return s;
}
OpSpec OpSpec::Transpose(int dim0, int dim1) {
  OpSpec s;
  s.kind = Kind::kTranspose;
  s.dim = dim0;
  s.dim1 = dim1;
  return s;
}
OpSpec OpSpec::Reshape(std::vector<int64_t> shape) {
  OpSpec s;
  s.kind = Kind::kReshape;
  s.shape = std::move(shape);
  return s;
}
OpSpec OpSpec::Norm(NormKind norm, int normalized_ndim, bool has_weight, bool has_bias, double eps) {
  OpSpec s;
  s.kind = Kind::kNorm;
  s.norm = norm;
  s.normalized_ndim = normalized_ndim;
  s.has_weight = has_weight;
  s.has_bias = has_bias;
  s.eps = eps;
  return s;
}
OpSpec OpSpec::Embedding() {
  OpSpec s;
  s.kind = Kind::kEmbedding;
  return s;
}
OpSpec OpSpec::Concat(int dim, int num_inputs) {
  OpSpec s;
  s.kind = Kind::kConcat;
  s.dim = dim;
  s.num_inputs = num_inputs;
  return s;
}
OpSpec OpSpec::Slice(int dim, int64_t start, int64_t end, int64_t step) {
  OpSpec s;
  s.kind = Kind::kSlice;
  s.dim = dim;
  s.start = start;
  s.end = end;
  s.step = step;
  return s;
}
OpSpec OpSpec::CrossEntropy(LossReduction reduction) {
  OpSpec s;
  s.kind = Kind::kCrossEntropy;
  s.reduction = reduction;
  return s;
}

int OpSpec::num_operands() const {
  switch (kind) {
    case Kind::kMatmul:
    case Kind::kBinary:
    case Kind::kEmbedding:
    case Kind::kCrossEntropy: return 2;
    case Kind::kNorm: return 1 + (has_weight ? 1 : 0) + (has_bias ? 1 : 0);
    case Kind::kConcat: return num_inputs;
    default: return 1;
  }
}

std::string OpSpec::ToString() const {
  switch (kind) {
    case Kind::kMatmul: return "matmul";
    case Kind::kBinary: return std::string(BinaryOpName(binary));
    case Kind::kUnary:
      return std::string(UnaryOpName(unary)) + (unary == UnaryOp::kScale ? "(" + std::to_string(alpha) + ")" : "");
    case Kind::kReduce:
      return std::string(ReduceKindName(reduce)) + "(dims=" + ListString(dims) + (keepdim ? ",keepdim)" : ")");
    case Kind::kSoftmax: return std::string(log ? "log_softmax" : "softmax") + "(dim=" + std::to_string(dim) + ")";
    case Kind::kPermute: return "permute(" + ListString(perm) + ")";
    case Kind::kTranspose: return "transpose(" + std::to_string(dim) + "," + std::to_string(dim1) + ")";
    case Kind::kReshape: return "reshape(" + ListString(shape) + ")";
    case Kind::kNorm: {
      char e[32];
      std::snprintf(e, sizeof(e), "%g", eps);
      return std::string(NormKindName(norm)) + "(ndim=" + std::to_string(normalized_ndim) +
             (has_weight ? ",weight" : "") + (has_bias ? ",bias" : "") + ",eps=" + e + ")";
    }
    case Kind::kEmbedding: return "embedding";
    case Kind::kConcat: return "concat(dim=" + std::to_string(dim) + ",n=" + std::to_string(num_inputs) + ")";
    case Kind::kSlice:
      return "slice(dim=" + std::to_string(dim) + "," + std::to_string(start) + ":" +
             (end == INT64_MAX ? std::string() : std::to_string(end)) + ":" + std::to_string(step) + ")";
    case Kind::kCrossEntropy: return "cross_entropy(" + std::string(LossReductionName(reduction)) + ")";
  }
  return "?";
}

StatusOr<ShardingRule> RuleFor(const OpSpec& op, std::span<const std::vector<int64_t>* const> shapes) {
  if (op.kind == OpSpec::Kind::kConcat && op.num_inputs < 1) {
    return InvalidArgumentError(op.ToString() + ": num_inputs " + std::to_string(op.num_inputs) + " must be >= 1");
  }
  if (static_cast<int>(shapes.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) +
                                " operands, got " + std::to_string(shapes.size()));
  }
  switch (op.kind) {
    case OpSpec::Kind::kMatmul: return MatmulRule(*shapes[0], *shapes[1]);
    case OpSpec::Kind::kBinary: return BinaryRule(op.binary, *shapes[0], *shapes[1]);
    case OpSpec::Kind::kUnary: return UnaryRule(op.unary, *shapes[0]);
    case OpSpec::Kind::kReduce: return ReduceRule(op.reduce, *shapes[0], op.dims, op.keepdim);
    case OpSpec::Kind::kSoftmax: return SoftmaxRule(op.log, *shapes[0], op.dim);
    case OpSpec::Kind::kPermute: return PermuteRule(*shapes[0], op.perm);
    case OpSpec::Kind::kTranspose: {
      MF_ASSIGN_OR_RETURN(std::vector<int> perm,
                          TransposePerm(static_cast<int>(shapes[0]->size()), op.dim, op.dim1));
      MF_ASSIGN_OR_RETURN(ShardingRule r, PermuteRule(*shapes[0], perm));
      r.op = "transpose";
      return r;
    }
    case OpSpec::Kind::kReshape: return ReshapeRule(*shapes[0], op.shape);
    case OpSpec::Kind::kNorm:
      return NormRule(op.norm, *shapes[0], op.normalized_ndim, op.has_weight ? shapes[1] : nullptr,
                      op.has_bias ? shapes[op.has_weight ? 2 : 1] : nullptr);
    case OpSpec::Kind::kEmbedding: return EmbeddingRule(*shapes[0], *shapes[1]);
    case OpSpec::Kind::kConcat: return ConcatRule(shapes, op.dim);
    case OpSpec::Kind::kSlice: return SliceRule(*shapes[0], op.dim, op.start, op.end, op.step);
    case OpSpec::Kind::kCrossEntropy: return CrossEntropyRule(*shapes[0], *shapes[1], op.reduction);
  }
  return InternalError("unknown op kind");
}

StatusOr<Tensor> RunKernel(const OpSpec& op, std::span<const Tensor* const> x, int64_t mean_count) {
  KernelContext ctx;
  ctx.mean_count = mean_count;
  return RunKernel(op, x, ctx);
}

StatusOr<Tensor> RunKernel(const OpSpec& op, std::span<const Tensor* const> x, const KernelContext& ctx) {
  if (static_cast<int>(x.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) +
                                " operands, got " + std::to_string(x.size()));
  }
  switch (op.kind) {
    case OpSpec::Kind::kMatmul: return MatmulKernel(*x[0], *x[1]);
    case OpSpec::Kind::kBinary: return BinaryKernel(op.binary, *x[0], *x[1]);
    case OpSpec::Kind::kUnary: return UnaryKernel(op.unary, *x[0], op.alpha);
    case OpSpec::Kind::kReduce: return ReduceKernel(op.reduce, *x[0], op.dims, op.keepdim, ctx.mean_count);
    case OpSpec::Kind::kSoftmax: return SoftmaxKernel(*x[0], op.dim, op.log);
    case OpSpec::Kind::kPermute: return PermuteKernel(*x[0], op.perm);
    case OpSpec::Kind::kTranspose: {
      MF_ASSIGN_OR_RETURN(std::vector<int> perm, TransposePerm(x[0]->rank(), op.dim, op.dim1));
      return PermuteKernel(*x[0], perm);
    }
    case OpSpec::Kind::kReshape:
      if (ctx.out_shape) return ReshapeKernel(*x[0], *ctx.out_shape);
      return ReshapeKernel(*x[0], op.shape);
    case OpSpec::Kind::kNorm:
      return NormKernel(op.norm, *x[0], op.normalized_ndim, op.has_weight ? x[1] : nullptr,
                        op.has_bias ? x[op.has_weight ? 2 : 1] : nullptr, op.eps);
    case OpSpec::Kind::kEmbedding: return EmbeddingKernel(*x[0], *x[1], ctx.row_offset, ctx.global_rows);
    case OpSpec::Kind::kConcat: return ConcatKernel(x, op.dim);
    case OpSpec::Kind::kSlice:
      if (ctx.slice_local) {
        const auto [start, size] = *ctx.slice_local;
        return SliceKernel(*x[0], op.dim, start, size > 0 ? start + (size - 1) * op.step + 1 : start, op.step);
      }
      return SliceKernel(*x[0], op.dim, op.start, op.end, op.step);
    case OpSpec::Kind::kCrossEntropy: return CrossEntropyKernel(*x[0], *x[1], op.reduction, ctx.mean_count);
  }
  return InternalError("unknown op kind");
}

// ---- DispatchCache ----

uint64_t DispatchCache::Hash(const OpSpec& op, std::span<const DTensor* const> inputs) {
  uint64_t h = static_cast<uint64_t>(op.kind) * 1000003u;
  HashMix(h, static_cast<uint64_t>(op.binary));
  HashMix(h, static_cast<uint64_t>(op.unary));
  HashMix(h, static_cast<uint64_t>(op.reduce));
  for (int d : op.dims) HashMix(h, static_cast<uint64_t>(d));
  HashMix(h, static_cast<uint64_t>(op.keepdim) * 2 + static_cast<uint64_t>(op.log));
  HashMix(h, static_cast<uint64_t>(op.dim));
  if (op.kind > OpSpec::Kind::kSoftmax) {
    for (int d : op.perm) HashMix(h, static_cast<uint64_t>(d));
    for (int64_t d : op.shape) HashMix(h, static_cast<uint64_t>(d));
    HashMix(h, static_cast<uint64_t>(op.dim1));
    HashMix(h, static_cast<uint64_t>(op.norm) * 8 + static_cast<uint64_t>(op.has_weight) * 2 +
               static_cast<uint64_t>(op.has_bias));
    HashMix(h, static_cast<uint64_t>(op.normalized_ndim));
    HashMix(h, static_cast<uint64_t>(op.num_inputs));
    HashMix(h, static_cast<uint64_t>(op.start));
    HashMix(h, static_cast<uint64_t>(op.end));
    HashMix(h, static_cast<uint64_t>(op.step));
    HashMix(h, static_cast<uint64_t>(op.reduction));
  }
  for (const DTensor* x : inputs) {
    HashMix(h, static_cast<uint64_t>(x->dtype()));
    HashMix(h, HashLayout(x->layout()));
  }
  return h;
}

bool DispatchCache::Matches(const Entry& e, const OpSpec& op, std::span<const DTensor* const> inputs) {
  if (!SameStructure(e.op, op) || e.layouts.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i]->dtype() != e.dtypes[i] || !(inputs[i]->layout() == e.layouts[i])) return false;
  }
  return true;
}

std::shared_ptr<const StrategyChoice> DispatchCache::Find(const OpSpec& op,
                                                          std::span<const DTensor* const> inputs) const {
  const uint64_t h = Hash(op, inputs);
  std::lock_guard<std::mutex> lock(mu_);
  auto [begin, end] = entries_.equal_range(h);
  for (auto it = begin; it != end; ++it) {
    if (Matches(it->second, op, inputs)) {
      ++hits_;
      return it->second.choice;
    }
  }
  ++misses_;
  return nullptr;
}

void DispatchCache::Insert(const OpSpec& op, std::span<const DTensor* const> inputs,
                           std::shared_ptr<const StrategyChoice> c) {
  const uint64_t h = Hash(op, inputs);
  Entry e{op, {}, {}, std::move(c)};
  for (const DTensor* x : inputs) {
    e.layouts.push_back(x->layout());
    e.dtypes.push_back(x->dtype());
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [begin, end] = entries_.equal_range(h);
  for (auto it = begin; it != end; ++it) {
    if (Matches(it->second, op, inputs)) return;  // first insertion wins
  }
  entries_.emplace(h, std::move(e));
}

int64_t DispatchCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
int64_t DispatchCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}
size_t DispatchCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}
void DispatchCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  hits_ = misses_ = 0;
}

DispatchCache& DefaultDispatchCache() {
  static DispatchCache* const kCache = new DispatchCache();
  return *kCache;
}

// ---- Strategy choice ----

namespace {

// Reshape keeps a Shard of a tied (major) factor only when every rank's input rows and result
// rows are the same flat range of their group (torch.chunk boundaries line up at every level).
Status CheckReshapeExact(const Layout& in, const Layout& out) {
  const std::vector<int64_t>& xs = in.global_shape();
  const std::vector<int64_t>& ys = out.global_shape();
  std::vector<Box> in_boxes, out_boxes;
  for (const ReshapeGroup& g : ReshapeGroups(xs, ys)) {
    if (g.in_dims.size() == 1 && g.out_dims.size() == 1) continue;  // same dim size: always exact
    const int di = g.in_dims[0], dout = g.out_dims[0];
    bool sharded = false;
    for (const Placement& p : in.placements()) sharded |= IsShard(p, di);
    for (const Placement& p : out.placements()) sharded |= IsShard(p, dout);
    if (!sharded) continue;
    int64_t rest_in = 1, rest_out = 1;
    for (size_t k = 1; k < g.in_dims.size(); ++k) rest_in *= xs[g.in_dims[k]];
    for (size_t k = 1; k < g.out_dims.size(); ++k) rest_out *= ys[g.out_dims[k]];
    if (in_boxes.empty()) {
      in_boxes = in.AllLocalBoxes();
      out_boxes = out.AllLocalBoxes();
    }
    for (size_t r = 0; r < in_boxes.size(); ++r) {
      const Interval a = in_boxes[r].dim(di), b = out_boxes[r].dim(dout);
      if (a.begin * rest_in != b.begin * rest_out || a.end * rest_in != b.end * rest_out) {
        return FailedPreconditionError(
            "reshape " + ShapeString(xs) + " -> " + ShapeString(ys) + " with input " + in.PlacementsString() +
            " and result " + out.PlacementsString() + " on " + in.mesh().ToString() + " is not exact: member " +
            std::to_string(r) + " holds flat [" + std::to_string(a.begin * rest_in) + ", " +
            std::to_string(a.end * rest_in) + ") of input dim " + std::to_string(di) + "'s group but [" +
            std::to_string(b.begin * rest_out) + ", " + std::to_string(b.end * rest_out) + ") of result dim " +
            std::to_string(dout) + "'s");
      }
    }
  }
  return Status::Ok();
}

// The strategy must be the one its assignment implies under the rule (as EnumerateStrategies
// builds them): a hand-made strategy could shard a need-replication factor or mismatch operands.
Status CheckFollowsRule(const OpSpec& op, const ShardingRule& rule, const Strategy& s, int mesh_ndim) {
  bool ok = static_cast<int>(s.assignment.size()) == mesh_ndim;
  for (const MeshDimAssignment& a : s.assignment) {
    if (!ok) break;
    if (a.kind == MeshDimAssignment::Kind::kFactor) {
      ok = a.index >= 0 && a.index < static_cast<int>(rule.factors.size()) &&
           rule.factors[a.index].kind != FactorKind::kNeedReplication;
    } else if (a.kind == MeshDimAssignment::Kind::kPartial) {
      ok = a.index >= 0 && a.index < static_cast<int>(rule.partial_rules.size());
    }
  }
  if (ok) {
    const std::optional<Strategy> want = StrategyFor(rule, s.assignment);
    ok = want.has_value() && *want == s;
  }
  if (!ok) {
    return InvalidArgumentError(op.ToString() + ": strategy " + s.ToString() + " does not follow the rule " +
                                rule.ToString() + " on a " + std::to_string(mesh_ndim) + "-dim mesh");
  }
  return Status::Ok();
}

// Slice keeps a Shard of the sliced dim only when every rank's selected elements are exactly its
// chunk of the result.
Status CheckSliceExact(const OpSpec& op, const Layout& in, const Layout& out) {
  MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(in.global_shape(), op.dim, op.start, op.end, op.step));
  bool sharded = false;
  for (const Placement& p : in.placements()) sharded |= IsShard(p, s.dim);
  if (!sharded) return Status::Ok();
  const std::vector<Box> in_boxes = in.AllLocalBoxes(), out_boxes = out.AllLocalBoxes();
  for (size_t r = 0; r < in_boxes.size(); ++r) {
    const Interval a = in_boxes[r].dim(s.dim), b = out_boxes[r].dim(s.dim);
    const Interval sel = SliceResultRange(s, a.begin, a.end);
    if (sel.size() != b.size() || (sel.size() > 0 && sel.begin != b.begin)) {
      return FailedPreconditionError(op.ToString() + " of " + ShapeString(in.global_shape()) + " with " +
                                     in.PlacementsString() + " on " + in.mesh().ToString() + " is not exact: member " +
                                     std::to_string(r) + " holds input [" + std::to_string(a.begin) + ", " +
                                     std::to_string(a.end) + ") selecting result [" + std::to_string(sel.begin) +
                                     ", " + std::to_string(sel.end) + ") but its result chunk is [" +
                                     std::to_string(b.begin) + ", " + std::to_string(b.end) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckStrategyOnMesh(const OpSpec& op, const ShardingRule& rule, const Strategy& strategy,
                           const DeviceMesh& mesh) {
  if (op.kind != OpSpec::Kind::kReshape && op.kind != OpSpec::Kind::kSlice) return Status::Ok();
  if (rule.operand_dims.size() != 1 || strategy.operands.size() != 1) {
    return InvalidArgumentError(op.ToString() + ": expected a one-operand rule and strategy");
  }
  // The input shape from the rule: every input dim's factor has that dim's size (size 1: none).
  std::vector<int64_t> in_shape;
  for (int f : rule.operand_dims[0]) in_shape.push_back(f == kNoFactor ? 1 : rule.factors[f].size);
  MF_ASSIGN_OR_RETURN(Layout in, Layout::Create(in_shape, mesh, strategy.operands[0]));
  MF_ASSIGN_OR_RETURN(Layout out, Layout::Create(rule.result_shape, mesh, strategy.result));
  return op.kind == OpSpec::Kind::kReshape ? CheckReshapeExact(in, out) : CheckSliceExact(op, in, out);
}

StatusOr<StrategyChoice> EvaluateStrategy(const OpSpec& op, const ShardingRule& rule, const Strategy& strategy,
                                          std::span<const Layout* const> input_layouts, DType dtype) {
  const std::vector<DType> dtypes(input_layouts.size(), dtype);
  return EvaluateStrategy(op, rule, strategy, input_layouts, dtypes);
}

StatusOr<StrategyChoice> EvaluateStrategy(const OpSpec& op, const ShardingRule& rule, const Strategy& strategy,
                                          std::span<const Layout* const> input_layouts,
                                          std::span<const DType> dtypes) {
  if (input_layouts.size() != strategy.operands.size() || dtypes.size() != input_layouts.size() ||
      input_layouts.empty()) {
    return InvalidArgumentError(op.ToString() + ": strategy has " + std::to_string(strategy.operands.size()) +
                                " operands, got " + std::to_string(input_layouts.size()) + " inputs and " +
                                std::to_string(dtypes.size()) + " dtypes");
  }
  MF_RETURN_IF_ERROR(CheckFollowsRule(op, rule, strategy, input_layouts[0]->mesh().ndim()));
  StrategyChoice c{strategy, {}, {}, *input_layouts[0], 0, -1};  // result set below
  for (size_t i = 0; i < input_layouts.size(); ++i) {
    const Layout& in = *input_layouts[i];
    MF_ASSIGN_OR_RETURN(Layout need, in.WithPlacements(strategy.operands[i]));
    std::shared_ptr<const Plan> plan;
    if (!(need == in)) {
      MF_ASSIGN_OR_RETURN(plan, PlanFor(in, need, dtypes[i]));
      if (plan->steps.empty()) plan = nullptr;
    }
    if (plan) c.modelled_us += plan->modelled_us;
    c.operand_layouts.push_back(std::move(need));
    c.plans.push_back(std::move(plan));
  }
  MF_ASSIGN_OR_RETURN(c.result, Layout::Create(rule.result_shape, input_layouts[0]->mesh(), strategy.result));
  const std::vector<int64_t>& x0 = input_layouts[0]->global_shape();
  if (op.kind == OpSpec::Kind::kReduce && op.reduce == ReduceKind::kMean) {
    MF_ASSIGN_OR_RETURN(std::vector<int> rd, NormalizeReduceDims(x0, op.dims));
    c.mean_count = 1;
    for (int d : rd) c.mean_count *= x0[d];
  }
  if (op.kind == OpSpec::Kind::kCrossEntropy && op.reduction == LossReduction::kMean) {
    c.mean_count = 1;
    for (size_t d = 0; d + 1 < x0.size(); ++d) c.mean_count *= x0[d];
  }
  if (op.kind == OpSpec::Kind::kReshape) MF_RETURN_IF_ERROR(CheckReshapeExact(c.operand_layouts[0], c.result));
  if (op.kind == OpSpec::Kind::kSlice) MF_RETURN_IF_ERROR(CheckSliceExact(op, c.operand_layouts[0], c.result));
  return c;
}

namespace {

Status NeedFloat(const OpSpec& op, DType t, std::string_view what) {
  if (IsFloatDType(t)) return Status::Ok();
  return UnimplementedError(op.ToString() + ": " + std::string(what) + " dtype " + std::string(DTypeName(t)) +
                            " not supported (f32, f64, bf16 only)");
}
Status NeedInt(const OpSpec& op, DType t, std::string_view what) {
  if (IsIntDType(t)) return Status::Ok();
  return InvalidArgumentError(op.ToString() + ": " + std::string(what) + " dtype " + std::string(DTypeName(t)) +
                              " must be i32 or i64");
}

// Which dtypes each op takes; operands that must agree are compared.
Status CheckDTypes(const OpSpec& op, std::span<const DTensor* const> inputs) {
  const DType t = inputs[0]->dtype();
  size_t same_from = 1, same_to = inputs.size();  // inputs [same_from, same_to) must have dtype t
  switch (op.kind) {
    case OpSpec::Kind::kMatmul:
    case OpSpec::Kind::kSoftmax:
    case OpSpec::Kind::kNorm: MF_RETURN_IF_ERROR(NeedFloat(op, t, "operand")); break;
    case OpSpec::Kind::kBinary:
      if (op.binary == BinaryOp::kDiv) MF_RETURN_IF_ERROR(NeedFloat(op, t, "operand"));
      break;
    case OpSpec::Kind::kUnary:
      if (op.unary != UnaryOp::kNeg) MF_RETURN_IF_ERROR(NeedFloat(op, t, "operand"));
      break;
    case OpSpec::Kind::kReduce:
      if (op.reduce == ReduceKind::kMean) MF_RETURN_IF_ERROR(NeedFloat(op, t, "operand"));
      break;
    case OpSpec::Kind::kEmbedding:
      MF_RETURN_IF_ERROR(NeedInt(op, inputs[1]->dtype(), "ids"));
      same_to = 1;
      break;
    case OpSpec::Kind::kCrossEntropy:
      MF_RETURN_IF_ERROR(NeedFloat(op, t, "logits"));
      MF_RETURN_IF_ERROR(NeedInt(op, inputs[1]->dtype(), "targets"));
      same_to = 1;
      break;
    default: break;  // data movement: any dtype
  }
  for (size_t i = same_from; i < same_to; ++i) {
    if (inputs[i]->dtype() != t) {
      return InvalidArgumentError(op.ToString() + ": operand dtypes differ: " + std::string(DTypeName(t)) +
                                  " vs " + std::string(DTypeName(inputs[i]->dtype())));
    }
  }
  return Status::Ok();
}

Status CheckInputs(const OpSpec& op, std::span<const DTensor* const> inputs) {
  if (op.kind == OpSpec::Kind::kConcat && op.num_inputs < 1) {
    return InvalidArgumentError(op.ToString() + ": num_inputs " + std::to_string(op.num_inputs) + " must be >= 1");
  }
  if (static_cast<int>(inputs.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) +
                                " operands, got " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) return InvalidArgumentError(op.ToString() + ": operand " + std::to_string(i) + " is null");
  }
  MF_RETURN_IF_ERROR(CheckDTypes(op, inputs));
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (!(inputs[i]->layout().mesh() == inputs[0]->layout().mesh())) {
      return InvalidArgumentError(op.ToString() + ": operands on different meshes: " +
                                  inputs[0]->layout().mesh().ToString() + " vs " +
                                  inputs[i]->layout().mesh().ToString());
    }
  }
  return Status::Ok();
}

struct Gathered {
  std::vector<const std::vector<int64_t>*> shapes;
  std::vector<const Layout*> layouts;
  std::vector<DType> dtypes;
};
Gathered Gather(std::span<const DTensor* const> inputs) {
  Gathered g;
  for (const DTensor* x : inputs) {
    g.shapes.push_back(&x->global_shape());
    g.layouts.push_back(&x->layout());
    g.dtypes.push_back(x->dtype());
  }
  return g;
}

StatusOr<std::shared_ptr<const StrategyChoice>> ChooseUncached(const OpSpec& op,
                                                               std::span<const DTensor* const> inputs) {
  const Gathered g = Gather(inputs);
  MF_ASSIGN_OR_RETURN(ShardingRule rule, RuleFor(op, g.shapes));
  const std::vector<Strategy> strategies = EnumerateStrategies(rule, inputs[0]->layout().mesh().ndim());
  std::optional<StrategyChoice> best;
  std::tuple<int64_t, int, int> best_key;
  Status first_error;
  for (const Strategy& s : strategies) {
    StatusOr<StrategyChoice> c = EvaluateStrategy(op, rule, s, g.layouts, g.dtypes);
    if (!c.ok()) {
      if (first_error.ok()) first_error = c.status();
      continue;
    }
    const std::tuple<int64_t, int, int> key{CostUnits(c->modelled_us), -NumShardDims(s.result),
                                            NumPartialDims(s.result)};
    if (!best || key < best_key) {
      best_key = key;
      best = std::move(*c);
    }
  }
  if (!best) {
    return first_error.ok() ? InternalError(op.ToString() + ": no strategy") : first_error.WithContext(op.ToString());
  }
  return std::shared_ptr<const StrategyChoice>(std::make_shared<StrategyChoice>(std::move(*best)));
}

// Redistribute + kernel + wrap, without validating that inputs match the choice.
StatusOr<DTensor> RunChosen(const OpSpec& op, const StrategyChoice& choice, std::span<const DTensor* const> inputs,
                            MeshComms& comms) {
  if (!(comms.mesh() == choice.result.mesh())) {
    return InvalidArgumentError(op.ToString() + ": operands on " + choice.result.mesh().ToString() +
                                " but comms on " + comms.mesh().ToString());
  }
  // Redistribute inputs that are not in place; others are used without a copy.
  const size_t n = inputs.size();
  std::vector<Tensor> moved;
  moved.reserve(n);  // stable addresses
  std::vector<const Tensor*> locals(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    if (choice.plans[i]) {
      moved.push_back(inputs[i]->local());
      MF_RETURN_IF_ERROR(ExecutePlan(*choice.plans[i], comms, moved.back()));
      locals[i] = &moved.back();
    } else {
      locals[i] = &inputs[i]->local();
    }
  }
  const int rank = inputs[0]->rank();
  KernelContext ctx;
  ctx.mean_count = choice.mean_count;
  if (op.kind == OpSpec::Kind::kEmbedding) {
    const Layout& table = choice.operand_layouts[0];
    ctx.global_rows = table.global_shape()[0];
    MF_ASSIGN_OR_RETURN(Box box, table.LocalBox(rank));
    ctx.row_offset = box.offset[0];
  }
  if (op.kind == OpSpec::Kind::kReshape) {
    MF_ASSIGN_OR_RETURN(Box box, choice.result.LocalBox(rank));
    ctx.out_shape = std::move(box.shape);
  }
  if (op.kind == OpSpec::Kind::kSlice) {
    const Layout& in = choice.operand_layouts[0];
    MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(in.global_shape(), op.dim, op.start, op.end, op.step));
    MF_ASSIGN_OR_RETURN(Box box, in.LocalBox(rank));
    const Interval a = box.dim(s.dim);
    if (a.size() != in.global_shape()[s.dim]) {  // sharded: select this rank's part
      const Interval sel = SliceResultRange(s, a.begin, a.end);
      ctx.slice_local = {sel.size() > 0 ? s.start + sel.begin * s.step - a.begin : 0, sel.size()};
    }
  }
  if (op.kind == OpSpec::Kind::kCrossEntropy) {
    // Vocab-parallel when the logits' class dim is sharded: reduce row statistics over those dims.
    const Layout& logits = choice.operand_layouts[0];
    const int class_dim = logits.tensor_rank() - 1;
    std::vector<int> dims;
    for (int m = 0; m < logits.mesh().ndim(); ++m) {
      if (IsShard(logits.placement(m), class_dim)) dims.push_back(m);
    }
    if (!dims.empty()) {
      MF_ASSIGN_OR_RETURN(Communicator * group, comms.Group(dims));
      MF_ASSIGN_OR_RETURN(Box box, logits.LocalBox(rank));
      VocabShard vocab;
      vocab.class_offset = box.offset[class_dim];
      vocab.num_classes = logits.global_shape()[class_dim];
      vocab.owner = box.offset[class_dim] == 0;
      vocab.all_reduce = [group](std::vector<double>& rows, ReduceOp rop) {
        return group->AllReduce(rows.data(), rows.data(), static_cast<int64_t>(rows.size()), DType::kF64, rop);
      };
      MF_ASSIGN_OR_RETURN(Tensor out, CrossEntropyKernel(*locals[0], *locals[1], op.reduction, ctx.mean_count, vocab));
      return DTensor::FromLocal(std::move(out), choice.result, rank);
    }
  }
  MF_ASSIGN_OR_RETURN(Tensor out, RunKernel(op, locals, ctx));
  return DTensor::FromLocal(std::move(out), choice.result, rank);
}

}  // namespace

StatusOr<std::shared_ptr<const StrategyChoice>> ChooseStrategy(const OpSpec& op,
                                                               std::span<const DTensor* const> inputs,
                                                               DispatchCache* cache) {
  if (cache == nullptr) cache = &DefaultDispatchCache();
  if (static_cast<int>(inputs.size()) == op.num_operands() &&
      std::find(inputs.begin(), inputs.end(), nullptr) == inputs.end()) {
    if (std::shared_ptr<const StrategyChoice> c = cache->Find(op, inputs)) return c;
  }
  MF_RETURN_IF_ERROR(CheckInputs(op, inputs));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseUncached(op, inputs));
  cache->Insert(op, inputs, c);
  return c;
}

StatusOr<DTensor> RunStrategy(const OpSpec& op, const StrategyChoice& choice, std::span<const DTensor* const> inputs,
                              MeshComms& comms) {
  MF_RETURN_IF_ERROR(CheckInputs(op, inputs));
  if (choice.operand_layouts.size() != inputs.size() || choice.plans.size() != inputs.size()) {
    return InvalidArgumentError(op.ToString() + ": choice has " + std::to_string(choice.operand_layouts.size()) +
                                " operand layouts, got " + std::to_string(inputs.size()) + " inputs");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Layout& want = choice.plans[i] ? choice.plans[i]->from : choice.operand_layouts[i];
    if (!(inputs[i]->layout() == want)) {
      return InvalidArgumentError(op.ToString() + ": input " + std::to_string(i) + " has layout " +
                                  inputs[i]->layout().ToString() + " but the choice was made for " +
                                  want.ToString());
    }
  }
  return RunChosen(op, choice, inputs, comms);
}

StatusOr<DTensor> RunOp(const OpSpec& op, std::span<const DTensor* const> inputs, MeshComms& comms,
                        const Strategy* forced) {
  if (forced != nullptr) {
    MF_RETURN_IF_ERROR(CheckInputs(op, inputs));
    const Gathered g = Gather(inputs);
    MF_ASSIGN_OR_RETURN(ShardingRule rule, RuleFor(op, g.shapes));
    MF_ASSIGN_OR_RETURN(StrategyChoice c, EvaluateStrategy(op, rule, *forced, g.layouts, g.dtypes));
    return RunChosen(op, c, inputs, comms);
  }
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> choice, ChooseStrategy(op, inputs));
  return RunChosen(op, *choice, inputs, comms);
}

namespace {
StatusOr<DTensor> Run1(const OpSpec& op, const DTensor& x, MeshComms& comms) {
  const DTensor* in[1] = {&x};
  return RunOp(op, in, comms);
}
StatusOr<DTensor> Run2(const OpSpec& op, const DTensor& a, const DTensor& b, MeshComms& comms) {
  const DTensor* in[2] = {&a, &b};
  return RunOp(op, in, comms);
}
}  // namespace

StatusOr<DTensor> Matmul(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Matmul();
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Add(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Binary(BinaryOp::kAdd);
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Sub(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Binary(BinaryOp::kSub);
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Mul(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Binary(BinaryOp::kMul);
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Div(const DTensor& a, const DTensor& b, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Binary(BinaryOp::kDiv);
  return Run2(kOp, a, b, comms);
}
StatusOr<DTensor> Neg(const DTensor& x, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Unary(UnaryOp::kNeg);
  return Run1(kOp, x, comms);
}
StatusOr<DTensor> Scale(const DTensor& x, double alpha, MeshComms& comms) {
  return Run1(OpSpec::Unary(UnaryOp::kScale, alpha), x, comms);
}
StatusOr<DTensor> Relu(const DTensor& x, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Unary(UnaryOp::kRelu);
  return Run1(kOp, x, comms);
}
StatusOr<DTensor> Exp(const DTensor& x, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Unary(UnaryOp::kExp);
  return Run1(kOp, x, comms);
}
StatusOr<DTensor> Gelu(const DTensor& x, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Unary(UnaryOp::kGelu);
  return Run1(kOp, x, comms);
}
StatusOr<DTensor> Sum(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms) {
  return Run1(OpSpec::Reduce(ReduceKind::kSum, std::move(dims), keepdim), x, comms);
}
StatusOr<DTensor> Mean(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms) {
  return Run1(OpSpec::Reduce(ReduceKind::kMean, std::move(dims), keepdim), x, comms);
}
StatusOr<DTensor> Max(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms) {
  return Run1(OpSpec::Reduce(ReduceKind::kMax, std::move(dims), keepdim), x, comms);
}
StatusOr<DTensor> Min(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms) {
  return Run1(OpSpec::Reduce(ReduceKind::kMin, std::move(dims), keepdim), x, comms);
}
StatusOr<DTensor> Softmax(const DTensor& x, int dim, MeshComms& comms) {
  return Run1(OpSpec::Softmax(dim, false), x, comms);
}
StatusOr<DTensor> LogSoftmax(const DTensor& x, int dim, MeshComms& comms) {
  return Run1(OpSpec::Softmax(dim, true), x, comms);
}
StatusOr<DTensor> Permute(const DTensor& x, std::vector<int> perm, MeshComms& comms) {
  return Run1(OpSpec::Permute(std::move(perm)), x, comms);
}
StatusOr<DTensor> Transpose(const DTensor& x, int dim0, int dim1, MeshComms& comms) {
  return Run1(OpSpec::Transpose(dim0, dim1), x, comms);
}
StatusOr<DTensor> Reshape(const DTensor& x, std::vector<int64_t> shape, MeshComms& comms) {
  return Run1(OpSpec::Reshape(std::move(shape)), x, comms);
}
StatusOr<DTensor> LayerNorm(const DTensor& x, int normalized_ndim, const DTensor* weight, const DTensor* bias,
                            double eps, MeshComms& comms) {
  const DTensor* in[3] = {&x, nullptr, nullptr};
  size_t n = 1;
  if (weight != nullptr) in[n++] = weight;
  if (bias != nullptr) in[n++] = bias;
  return RunOp(OpSpec::LayerNorm(normalized_ndim, weight != nullptr, bias != nullptr, eps),
               std::span<const DTensor* const>(in, n), comms);
}
StatusOr<DTensor> RmsNorm(const DTensor& x, int normalized_ndim, const DTensor* weight, double eps,
                          MeshComms& comms) {
  const DTensor* in[2] = {&x, weight};
  return RunOp(OpSpec::RmsNorm(normalized_ndim, weight != nullptr, eps),
               std::span<const DTensor* const>(in, weight != nullptr ? 2 : 1), comms);
}
StatusOr<DTensor> Embedding(const DTensor& table, const DTensor& ids, MeshComms& comms) {
  static const OpSpec kOp = OpSpec::Embedding();
  return Run2(kOp, table, ids, comms);
}
StatusOr<DTensor> Concat(std::span<const DTensor* const> inputs, int dim, MeshComms& comms) {
  return RunOp(OpSpec::Concat(dim, static_cast<int>(inputs.size())), inputs, comms);
}
StatusOr<DTensor> Slice(const DTensor& x, int dim, int64_t start, int64_t end, int64_t step, MeshComms& comms) {
  return Run1(OpSpec::Slice(dim, start, end, step), x, comms);
}
StatusOr<DTensor> CrossEntropy(const DTensor& logits, const DTensor& targets, LossReduction reduction,
                               MeshComms& comms) {
  return Run2(OpSpec::CrossEntropy(reduction), logits, targets, comms);
}

}  // namespace meshflow
