// Sharding propagation: infers a Layout for every value of a Graph and a strategy for every op.
//
// Algorithm (deterministic; annotations are honoured exactly). Every choice below scores a node's
// strategies (EnumerateStrategies over its rule, each validated by EvaluateStrategy; strategies
// that fail are skipped) by modelled redistribution time (plus, with
// PropagationOptions::compute_gflops, the strategy's modelled local work):
//   1. Backward pass (nodes in reverse order): a node whose result has a target (its annotation,
//      else a preference set by a later consumer) picks the strategy minimizing
//          cost(result layout -> target) + sum over operands with an annotation or preference
//          of cost(that layout -> layout the strategy needs)
//      (ties: fewest collectives, then fewest Partial operand placements, then most Shard ones,
//      then the cheapest result move - ask producers for the layout rather than move the
//      result -, then enumeration order)
//      and sets the preference of every operand that has neither.
//   2. Graph inputs / params take their annotation, else their preference with Partial turned
//      into Replicate (callers feed real tensors), else Replicate on every mesh dim.
//   3. Natural forward pass (graph order = topological order): each node picks the strategy
//      minimizing the cost of moving its operands (their layouts are now known) into the layouts
//      it needs, plus, for an annotated result, the cost of moving the result to the annotation.
//      Ties: fewest collectives (e.g. one all-reduce beats reduce-scatter + all-gather of equal
//      modelled time), then most Shard result placements, then fewest Partial ones, then
//      enumeration order (the eager API's order). A value's layout is its annotation if any (the program inserts a
//      redistribution after the op), else what the op produced.
//   4. Backward refinement: as 1, but operands count from their natural layouts (3), and only
//      op results receive preferences (inputs are fixed by now).
//   5. Pulled forward pass: as 3, plus the cost of moving each result to its refined preference
//      (a lookahead: a producer may pick a strategy whose result its consumers use for free).
//      The pass with the smaller total modelled time (3 or 5; ties: 3) is the answer.
// Costs are the planner's modelled times (PlanFor: the optimal planner under
// PropagationOptions::topology), compared as integer picoseconds (CostUnits) so ties are exact.
// Nothing in the pass depends on an op kind: any OpSpec with a rule works.
//
//   MF_ASSIGN_OR_RETURN(Propagation p, Propagate(graph));
//   p.values[h]                 // Layout of value h, e.g. S(0),S(2) on mesh(2x2, [dp, tp])
//   p.nodes[0].strategy         // {S(0),R} x {R,S(1)} -> S(0),S(2)
//   p.modelled_us               // total modelled time of the redistributions it implies
//
// Errors: a node none of whose strategies can be planned (names the node and the first planner
// error), e.g. a Partial(avg) input feeding an op that only passes Partial(sum) and no reduction
// path; annotation errors cannot happen here (the Graph validated them); INVALID_ARGUMENT for a
// PropagationOptions::topology that ParseTopology would reject (a bandwidth <= 0, a negative
// latency, or a non-finite value), and for a compute_gflops that is <= 0 or not finite.
#ifndef MESHFLOW_COMPILER_PROPAGATION_H_
#define MESHFLOW_COMPILER_PROPAGATION_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <optional>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/runtime/strategy.h"
#include "meshflow/ops/sharding_rule.h"
#include "meshflow/planner/cost_model.h"

namespace meshflow {

struct PropagationOptions {
  Topology topology;  // cost model of every redistribution (default topology by default)
  // Arithmetic rate of one device in GFLOP/s, or nullopt (the default): no compute term, every
  // choice is by redistribution time alone. Set, every candidate strategy also pays its local
  // work: 2 flops (a multiply-add) per point of the op's iteration space on one rank
  // (LocalWorkPoints, ops/sharding_rule.h) / the rate. Without it a strategy that replicates an
  // op's work is as good as one that splits it whenever it moves fewer bytes (e.g. all-gathering
  // small activations so that every rank computes a whole weight gradient instead of reducing a
  // Partial(sum) one); with it, moving bytes is weighed against repeating work. Must be > 0 and
  // finite.
  std::optional<double> compute_gflops;
};

// The sharding of one node.
struct NodeSharding {
  Strategy strategy;
  std::vector<Layout> operands;  // the layouts the strategy needs
  Layout result;                 // the layout the op produces
  friend bool operator==(const NodeSharding&, const NodeSharding&) = default;
};

struct Propagation {
  std::vector<Layout> values;        // per ValueId: the value's layout (annotation if annotated)
  std::vector<NodeSharding> nodes;   // per node index
  // Modelled time of every redistribution the program needs (operands into the layouts their
  // strategies need, op results into their annotations), in us (a multiple of 1e-6). Counted per
  // consumer: when two consumers need the same copy, the program moves it once but this counts it
  // twice (the program's CostReport is exact).
  double modelled_us = 0;
  // With PropagationOptions::compute_gflops: the modelled local work of every node's strategy, in
  // us (a multiple of 1e-6); 0 without. Passes are compared by modelled_us + compute_us.
  double compute_us = 0;
  friend bool operator==(const Propagation&, const Propagation&) = default;
  // One line per value: "h: S(0),S(2)" and per node its strategy.
  std::string ToString(const Graph& graph) const;
};

StatusOr<Propagation> Propagate(const Graph& graph, const PropagationOptions& options = {});

// The rule of node `n` (RuleFor on the graph's shapes). Errors name the node.
StatusOr<ShardingRule> NodeRule(const Graph& graph, int n);

// Strategy `s` of node `n` made concrete with every operand already in the layout `s` needs
// (EvaluateStrategy: no plans; mean count etc. filled). Errors: EvaluateStrategy's (e.g. a
// reshape strategy that is not exact on this mesh).
StatusOr<StrategyChoice> ConcretizeStrategy(const Graph& graph, int n, const ShardingRule& rule, const Strategy& s);

// The modelled time of from -> to (0 when equal). Errors: planner errors.
StatusOr<double> RedistributionUs(const Layout& from, const Layout& to, DType dtype, const Topology& topology);

}  // namespace meshflow

#endif  // MESHFLOW_COMPILER_PROPAGATION_H_
