// Sharding propagation (see propagation.h for the algorithm): a backward pass for preferences, a
// natural forward pass, a backward refinement and a pulled forward pass; the cheaper forward pass
// wins. Every candidate strategy is validated by EvaluateStrategy and costed with PlanFor.
#include "meshflow/compiler/propagation.h"

#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "meshflow/base/strings.h"
#include "meshflow/planner/planner.h"

namespace meshflow {
namespace {

std::string NodeName(const Graph& g, int n) {
  const Node& node = g.nodes()[static_cast<size_t>(n)];
  return "node " + std::to_string(n) + " '" + g.value(node.result).name + "' (" + node.op.ToString() + ")";
}

// A strategy made concrete on the graph's shapes. EvaluateStrategy with the operands already in
// the layouts the strategy needs validates it (e.g. rejects inexact reshape strategies) and fills
// the per-op details (mean count, ...) the execution needs.
struct Candidate {
  Strategy strategy;
  std::vector<Layout> operands;
  Layout result;
  int64_t compute_units = 0;  // local work under PropagationOptions::compute_gflops (0 without)
};

}  // namespace

StatusOr<ShardingRule> NodeRule(const Graph& g, int n) {
  const Node& node = g.nodes()[static_cast<size_t>(n)];
  std::vector<const std::vector<int64_t>*> shapes;
  for (ValueId v : node.operands) shapes.push_back(&g.value(v).shape);
  StatusOr<ShardingRule> rule = RuleFor(node.op, shapes);
  if (!rule.ok()) return rule.status().WithContext(NodeName(g, n));
  return rule;
}

StatusOr<StrategyChoice> ConcretizeStrategy(const Graph& g, int n, const ShardingRule& rule, const Strategy& s) {
  const Node& node = g.nodes()[static_cast<size_t>(n)];
  std::vector<Layout> operands;
  std::vector<DType> dtypes;
  for (size_t i = 0; i < node.operands.size(); ++i) {
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(g.value(node.operands[i]).shape, g.mesh(), s.operands[i]));
    operands.push_back(std::move(l));
    dtypes.push_back(g.value(node.operands[i]).dtype);
  }
  std::vector<const Layout*> ptrs;
  for (const Layout& l : operands) ptrs.push_back(&l);
  return EvaluateStrategy(node.op, rule, s, ptrs, dtypes);
}

namespace {

StatusOr<Candidate> Concretize(const Graph& g, int n, const ShardingRule& rule, const Strategy& s,
                               const PropagationOptions& options) {
  MF_ASSIGN_OR_RETURN(StrategyChoice c, ConcretizeStrategy(g, n, rule, s));
  int64_t compute = 0;
  if (options.compute_gflops) {
    // Two flops (a multiply-add) per point of the rank's iteration space; GFLOP/s = 1e3 flops/us.
    compute = CostUnits(2.0 * LocalWorkPoints(rule, s, g.mesh().shape()) / (*options.compute_gflops * 1e3));
  }
  return Candidate{s, std::move(c.operand_layouts), std::move(c.result), compute};
}

}  // namespace

StatusOr<double> RedistributionUs(const Layout& from, const Layout& to, DType dtype, const Topology& topology) {
  if (from == to) return 0.0;
  RedistributeOptions options;
  options.topology = topology;
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, dtype, options));
  return plan->modelled_us;
}

namespace {

// The cost of one redistribution: modelled time (integer picoseconds) and collective count.
struct Move {
  int64_t units = 0;
  int collectives = 0;
};

StatusOr<Move> MoveCost(const Layout& from, const Layout& to, DType dtype, const Topology& topology) {
  if (from == to) return Move{};
  RedistributeOptions options;
  options.topology = topology;
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, dtype, options));
  Move m{CostUnits(plan->modelled_us), 0};
  for (const PlanStep& step : plan->steps) {
    m.collectives += IsLocalStep(step.kind) ? 0 : 1;
  }
  return m;
}

struct Pass {
  const Graph& g;
  // Per node, every strategy of its rule in enumeration order, made concrete once (an error for a
  // strategy EvaluateStrategy rejects): the same for every pass.
  const std::vector<std::vector<StatusOr<Candidate>>>& candidates;
  const PropagationOptions& options;
};

using OptLayouts = std::vector<std::optional<Layout>>;

// Backward pass: for nodes in reverse order whose result has a target (annotation, else a
// preference set by a later consumer in this pass), picks the strategy minimizing
// cost(result -> target) + sum over operands with a known layout of cost(known -> needed) and
// sets the preference of each operand that `settable` accepts and that has none yet.
template <typename Known, typename Settable>
void Backward(const Pass& p, Known known, Settable settable, OptLayouts& pref) {
  const Graph& g = p.g;
  for (int n = static_cast<int>(g.nodes().size()) - 1; n >= 0; --n) {
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    const std::optional<Layout>& annotated = g.annotation(node.result);
    const std::optional<Layout> target = annotated ? annotated : pref[static_cast<size_t>(node.result)];
    if (!target) continue;
    const DType dtype = g.value(node.result).dtype;
    std::optional<Candidate> best;
    std::tuple<int64_t, int, int, int, int64_t> best_key;
    for (const StatusOr<Candidate>& c : p.candidates[static_cast<size_t>(n)]) {
      if (!c.ok()) continue;
      const Strategy& s = c->strategy;
      // Operands first, then the result; a candidate already costlier than the best is dropped
      // before planning more (exact: ties are still evaluated in full).
      Move total{c->compute_units, 0};
      bool ok = true;
      int partials = 0, shards = 0;
      for (size_t i = 0; i < node.operands.size() && ok; ++i) {
        partials += NumPartialDims(s.operands[i]);
        shards += NumShardDims(s.operands[i]);
        const std::optional<Layout> have = known(node.operands[i]);
        if (!have) continue;
        StatusOr<Move> move = MoveCost(*have, c->operands[i], g.value(node.operands[i]).dtype, p.options.topology);
        if (!move.ok()) {
          ok = false;
        } else {
          total.units += move->units;
          total.collectives += move->collectives;
          if (best && total.units > std::get<0>(best_key)) ok = false;
        }
      }
      if (!ok) continue;
      StatusOr<Move> cost = MoveCost(c->result, *target, dtype, p.options.topology);
      if (!cost.ok()) continue;
      total.units += cost->units;
      total.collectives += cost->collectives;
      const int64_t result_units = cost->units;
      // Ties: fewer Partial / more Shard operand placements (sharded inputs save memory), then the
      // strategy producing the target itself (ask the producer for the layout: it may make it for
      // free).
      const std::tuple<int64_t, int, int, int, int64_t> key{total.units, total.collectives, partials, -shards,
                                                             result_units};
      if (!best || key < best_key) {
        best_key = key;
        best = *c;
      }
    }
    if (!best) continue;  // no preference: the forward pass reports real errors
    for (size_t i = 0; i < node.operands.size(); ++i) {
      const ValueId v = node.operands[i];
      if (settable(v) && !g.annotation(v) && !pref[static_cast<size_t>(v)]) {
        pref[static_cast<size_t>(v)] = best->operands[i];
      }
    }
  }
}

// Forward pass from fixed input layouts; `target(v)` is the layout an op result should move to
// (annotation or preference). Returns the propagation with its total modelled time (operand moves
// plus moves of results to their annotations).
template <typename Target>
StatusOr<Propagation> Forward(const Pass& p, const OptLayouts& input_layouts, Target target_of) {
  const Graph& g = p.g;
  OptLayouts layouts = input_layouts;
  Propagation out;
  int64_t total_units = 0, compute_units = 0;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    const std::optional<Layout> target = target_of(node.result);
    const std::optional<Layout>& annotated = g.annotation(node.result);
    const DType dtype = g.value(node.result).dtype;
    std::optional<Candidate> best;
    std::tuple<int64_t, int, int, int> best_key;
    int64_t best_real = 0;  // operand moves + annotation move (no preference term, no compute)
    Status first_error;
    for (const StatusOr<Candidate>& c : p.candidates[n]) {
      if (!c.ok()) {
        if (first_error.ok()) first_error = c.status();
        continue;
      }
      const Strategy& s = c->strategy;
      int64_t units = c->compute_units;
      int collectives = 0;
      Status err;
      for (size_t i = 0; i < node.operands.size() && err.ok(); ++i) {
        const ValueId v = node.operands[i];
        StatusOr<Move> move =
            MoveCost(*layouts[static_cast<size_t>(v)], c->operands[i], g.value(v).dtype, p.options.topology);
        if (!move.ok()) {
          err = move.status().WithContext("operand '" + g.value(v).name + "'");
        } else {
          units += move->units;
          collectives += move->collectives;
        }
      }
      // Already costlier than the best: skip planning the result move (exact pruning).
      if (err.ok() && best && units > std::get<0>(best_key)) continue;
      int64_t real = units - c->compute_units;  // redistributions only
      if (err.ok() && target) {
        StatusOr<Move> move = MoveCost(c->result, *target, dtype, p.options.topology);
        // A result that cannot reach its annotation is unusable; a preference is only a hint.
        if (!move.ok()) {
          if (annotated) err = move.status().WithContext("result");
        } else {
          units += move->units;
          collectives += move->collectives;
          if (annotated) real = units - c->compute_units;
        }
      }
      if (!err.ok()) {
        if (first_error.ok()) first_error = err;
        continue;
      }
      const std::tuple<int64_t, int, int, int> key{units, collectives, -NumShardDims(s.result),
                                                   NumPartialDims(s.result)};
      if (!best || key < best_key) {
        best_key = key;
        best_real = real;
        best = *c;
      }
    }
    if (!best) {
      return (first_error.ok() ? InternalError("no strategy") : first_error)
          .WithContext(NodeName(g, static_cast<int>(n)) + ": no strategy can be planned");
    }
    total_units += best_real;
    compute_units += best->compute_units;
    layouts[static_cast<size_t>(node.result)] = annotated ? *annotated : best->result;
    out.nodes.push_back(NodeSharding{std::move(best->strategy), std::move(best->operands), std::move(best->result)});
  }
  for (std::optional<Layout>& l : layouts) out.values.push_back(std::move(*l));
  out.modelled_us = static_cast<double>(total_units) / 1e6;
  out.compute_us = static_cast<double>(compute_units) / 1e6;
  return out;
}

}  // namespace

StatusOr<Propagation> Propagate(const Graph& g, const PropagationOptions& options) {
  MF_RETURN_IF_ERROR(options.topology.Validate().WithContext("propagate"));
  if (options.compute_gflops && !(std::isfinite(*options.compute_gflops) && *options.compute_gflops > 0)) {
    return InvalidArgumentError("propagate: compute_gflops must be > 0 and finite, got " +
                                DoubleString(*options.compute_gflops));
  }
  const size_t nv = g.values().size();
  std::vector<std::vector<StatusOr<Candidate>>> candidates(g.nodes().size());
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    MF_ASSIGN_OR_RETURN(ShardingRule rule, NodeRule(g, static_cast<int>(n)));
    for (const Strategy& s : EnumerateStrategies(rule, g.mesh().ndim())) {
      candidates[n].push_back(Concretize(g, static_cast<int>(n), rule, s, options));
    }
  }
  const Pass pass{g, candidates, options};
  auto annotation_only = [&](ValueId v) { return g.annotation(v); };

  // 1. Backward from the annotations: preferences (used for unannotated inputs).
  OptLayouts pref(nv);
  Backward(
      pass, [&](ValueId v) { return g.annotation(v) ? g.annotation(v) : pref[static_cast<size_t>(v)]; },
      [](ValueId) { return true; }, pref);

  // 2. Input layouts.
  OptLayouts inputs(nv);
  for (ValueId v : g.inputs()) {
    if (const std::optional<Layout>& a = g.annotation(v)) {
      inputs[static_cast<size_t>(v)] = *a;
      continue;
    }
    Placements placements(static_cast<size_t>(g.mesh().ndim()), Replicate{});
    ShardOrder order;
    if (const std::optional<Layout>& pl = pref[static_cast<size_t>(v)]) {
      placements = pl->placements();
      for (Placement& x : placements) {
        if (IsPartial(x)) x = Replicate{};
      }
      order = pl->has_default_shard_order() ? ShardOrder{} : pl->shard_order();
    }
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(g.value(v).shape, g.mesh(), placements, order));
    inputs[static_cast<size_t>(v)] = std::move(l);
  }

  // 3. Natural forward pass: only annotations pull results.
  MF_ASSIGN_OR_RETURN(Propagation natural, Forward(pass, inputs, annotation_only));

  // 4. Backward refinement: preferences of op results, scoring consumers' strategies against the
  //    natural layouts of their operands.
  OptLayouts refined(nv);
  Backward(
      pass,
      [&](ValueId v) -> std::optional<Layout> {
        if (g.annotation(v)) return g.annotation(v);
        return natural.values[static_cast<size_t>(v)];
      },
      [&](ValueId v) { return g.value(v).kind == ValueKind::kOpResult; }, refined);

  // 5. Final forward pass pulled by annotations and refined preferences; the cheaper of the two
  //    forward passes wins (ties: the natural one); with a compute model, redistributions plus
  //    local work.
  MF_ASSIGN_OR_RETURN(Propagation pulled, Forward(pass, inputs, [&](ValueId v) -> std::optional<Layout> {
                        if (g.annotation(v)) return g.annotation(v);
                        return refined[static_cast<size_t>(v)];
                      }));
  if (CostUnits(pulled.modelled_us) + CostUnits(pulled.compute_us) <
      CostUnits(natural.modelled_us) + CostUnits(natural.compute_us)) {
    return pulled;
  }
  return natural;
}

std::string Propagation::ToString(const Graph& g) const {
  std::string out;
  for (ValueId v : g.inputs()) {
    out += g.value(v).name + ": " + values[static_cast<size_t>(v)].PlacementsString() + "\n";
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ValueId r = g.nodes()[n].result;
    out += g.value(r).name + ": " + values[static_cast<size_t>(r)].PlacementsString() + "  via " +
           g.nodes()[n].op.ToString() + " " + nodes[n].strategy.ToString() + "\n";
  }
  return out;
}

}  // namespace meshflow
