#include "meshflow/runtime/strategy.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "meshflow/base/hash.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/planner.h"

namespace meshflow {

// ---- DispatchCache ----

uint64_t DispatchCache::Hash(const OpSpec& op, std::span<const DTensor* const> inputs) {
  uint64_t h = StructureHash(op);
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
  const SliceParams& p = *op.get<SliceParams>();
  MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(in.global_shape(), p.dim, p.start, p.end, p.step));
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
  const bool reshape = op.get<ReshapeParams>() != nullptr;
  if (!reshape && op.get<SliceParams>() == nullptr) return Status::Ok();
  if (rule.operand_dims.size() != 1 || strategy.operands.size() != 1) {
    return InvalidArgumentError(op.ToString() + ": expected a one-operand rule and strategy");
  }
  // The input shape from the rule: every input dim's factor has that dim's size (size 1: none).
  std::vector<int64_t> in_shape;
  for (int f : rule.operand_dims[0]) in_shape.push_back(f == kNoFactor ? 1 : rule.factors[f].size);
  MF_ASSIGN_OR_RETURN(Layout in, Layout::Create(in_shape, mesh, strategy.operands[0]));
  MF_ASSIGN_OR_RETURN(Layout out, Layout::Create(rule.result_shape, mesh, strategy.result));
  return reshape ? CheckReshapeExact(in, out) : CheckSliceExact(op, in, out);
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
  if (const auto* r = op.get<ReduceParams>(); r != nullptr && r->kind == ReduceKind::kMean) {
    MF_ASSIGN_OR_RETURN(std::vector<int> rd, NormalizeReduceDims(x0, r->dims));
    c.mean_count = 1;
    for (int d : rd) c.mean_count *= x0[d];
  }
  const auto* ce = op.get<CrossEntropyParams>();
  const auto* ceg = op.get<CrossEntropyGradParams>();
  if ((ce != nullptr && ce->reduction == LossReduction::kMean) ||
      (ceg != nullptr && ceg->reduction == LossReduction::kMean)) {
    c.mean_count = 1;
    for (size_t d = 0; d + 1 < x0.size(); ++d) c.mean_count *= x0[d];
  }
  if (op.get<ReshapeParams>() != nullptr) MF_RETURN_IF_ERROR(CheckReshapeExact(c.operand_layouts[0], c.result));
  if (op.get<SliceParams>() != nullptr) MF_RETURN_IF_ERROR(CheckSliceExact(op, c.operand_layouts[0], c.result));
  return c;
}


Status CheckOperands(const OpSpec& op, std::span<const DTensor* const> inputs) {
  if (const auto* c = op.get<ConcatParams>(); c != nullptr && c->num_inputs < 1) {
    return InvalidArgumentError(op.ToString() + ": num_inputs " + std::to_string(c->num_inputs) + " must be >= 1");
  }
  if (static_cast<int>(inputs.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) +
                                " operands, got " + std::to_string(inputs.size()));
  }
  std::vector<DType> dtypes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) return InvalidArgumentError(op.ToString() + ": operand " + std::to_string(i) + " is null");
    dtypes.push_back(inputs[i]->dtype());
  }
  MF_RETURN_IF_ERROR(CheckOperandDTypes(op, dtypes));
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (!(inputs[i]->layout().mesh() == inputs[0]->layout().mesh())) {
      return InvalidArgumentError(op.ToString() + ": operands on different meshes: " +
                                  inputs[0]->layout().mesh().ToString() + " vs " +
                                  inputs[i]->layout().mesh().ToString());
    }
  }
  return Status::Ok();
}

namespace {

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
  std::tuple<int64_t, int, int, int> best_key;
  Status first_error;
  for (const Strategy& s : strategies) {
    StatusOr<StrategyChoice> c = EvaluateStrategy(op, rule, s, g.layouts, g.dtypes);
    if (!c.ok()) {
      if (first_error.ok()) first_error = c.status();
      continue;
    }
    int moved = 0;  // inputs redistributed, free (local slices) or not
    for (const std::shared_ptr<const Plan>& p : c->plans) moved += p != nullptr ? 1 : 0;
    const std::tuple<int64_t, int, int, int> key{CostUnits(c->modelled_us), moved, -NumShardDims(s.result),
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

}  // namespace

StatusOr<StrategyChoice> EvaluateStrategy(const OpSpec& op, std::span<const DTensor* const> inputs,
                                          const Strategy& strategy) {
  MF_RETURN_IF_ERROR(CheckOperands(op, inputs));
  const Gathered g = Gather(inputs);
  MF_ASSIGN_OR_RETURN(ShardingRule rule, RuleFor(op, g.shapes));
  return EvaluateStrategy(op, rule, strategy, g.layouts, g.dtypes);
}

StatusOr<std::shared_ptr<const StrategyChoice>> ChooseStrategy(const OpSpec& op,
                                                               std::span<const DTensor* const> inputs,
                                                               DispatchCache* cache) {
  if (cache == nullptr) cache = &DefaultDispatchCache();
  if (static_cast<int>(inputs.size()) == op.num_operands() &&
      std::find(inputs.begin(), inputs.end(), nullptr) == inputs.end()) {
    if (std::shared_ptr<const StrategyChoice> c = cache->Find(op, inputs)) return c;
  }
  MF_RETURN_IF_ERROR(CheckOperands(op, inputs));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseUncached(op, inputs));
  cache->Insert(op, inputs, c);
  return c;
}

}  // namespace meshflow
