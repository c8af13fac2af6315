// Search: minimum-cost redistribution plans (Dijkstra over layout states).
//
// States are layouts of one (mesh, shape): placements + normalized shard order. The edges are
// the steps of planner/transforms.h, on single mesh dims and on sets of mesh dims (one
// collective over the flattened group):
//   all_gather      every set of Shard dims whose dims per tensor dim are an innermost suffix
//   all_reduce      every non-empty set of Partial dims
//   reduce_scatter  every ordered set of Partial dims, to every tensor dim
//   all_to_all      every innermost suffix of a tensor dim's order, to every other tensor dim,
//                   appended in every order
//   local_slice     every ordered set of Replicate dims, to every tensor dim
//   local_partial   every set of Replicate dims on which the target is Partial(op) (only when the
//                   target has Partial)
//   local_shard_to_partial
//                   every set of Shard dims on which the target is Partial(sum|max|min), innermost
//                   per tensor dim (only when the target has Partial, never for avg)
//   send_recv       from every Partial-free state to the target with its Partial dims replaced
//                   by Replicate (then local_partial finishes a Partial target)
// Edge weights are the cost model's step times (cost_model.h; the search prices edges with
// ModelStepCost's numbers, which equal ModelStep's time and busiest-rank bytes without a per-rank
// pass). The search runs over compact states (flat placement codes + shard chains, no Layout or
// PlanStep per edge; collectives priced by CollectiveStepCost from the chains, their byte count
// skipped when the time alone already loses) and rebuilds only the chosen path as PlanSteps.
// Successors below is the same edge set built as PlanSteps (tests compare the two).
// send_recv edges are priced lazily: queued under a lower bound of their cost (the first rank's
// incoming time) and priced when that bound is reached, with relaxation stamps so that the
// result equals eager relaxation in edge order. Paths compare by (modelled time
// in integer picoseconds, sum of the steps' bytes_per_rank, number of steps); remaining ties go
// to the first path found in the fixed edge order above, so plans are deterministic.
//
// Budget (SearchBudget below). The search counts the edges it generates (every edge of every
// expanded state, priced or queued; about 0.4 us each on a 6-D mesh). Before expanding a state it
// stops once `max_edges` are reached (and, when set, once `max_ms` of wall-clock time have
// passed), and returns the cheapest of: the best path it has reached the target with (send_recv
// edges still queued towards the target are priced first), the greedy plan
// (greedy_reference.h, when it applies) and the reduce-then-direct plan (all_reduce of every
// Partial dim, then PlanDirect); ties keep that order. The plan then has proven_optimal = false.
// The default (kDefaultMaxEdges = 20000) bounds the search to about 10 ms and keeps the fixed
// cases of the tests and benches exact (P,S(0),S(1),S(2) -> S(2),S(1),S(0),R on 2x4x4x8 needs
// 10210 edges), but not every case: some random 4-D cases with Partial placements (mesh 2x3x1x2
// in step_cost_test) need more than 20000, so tests that compare with an exhaustive reference
// pass max_edges = 0. P,S(0),S(1),S(2),R,S(0) -> S(2),S(1),S(0),R,P,R on 2x2x2x2x2x2, shape
// 8,8,8, needs 1.14 M edges (0.41 s; 56 s before the compact states) to finish and returns the
// same plan within the default budget in 0.01 s (opt dtplan --max-edges 0 / 20000). Without a time limit the result is deterministic, so
// every process of a job gets the same plan. A search that finishes within the budget (or has
// nothing to search: from == to) sets proven_optimal = true; one that stops sets search_edges to
// the edges generated so far (at least max_edges: it stops before the next expansion).
//
// Errors (all planners, INVALID_ARGUMENT naming the values): layouts on different meshes or
// shapes; a Partial source and a Partial target with different reduce ops; a Topology that fails
// ValidateForMesh for the layouts' mesh (cost_model.h: limits, intra dims the mesh lacks); a
// SearchBudget with a negative max_edges or a negative / non-finite max_ms.
//
// Example:
//   MF_ASSIGN_OR_RETURN(Plan plan, PlanRedistribution(from, to, DType::kF32, Topology()));
//   std::cout << PlanToText(plan);   // planner/plan_format.h
#ifndef MESHFLOW_PLANNER_SEARCH_H_
#define MESHFLOW_PLANNER_SEARCH_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

// How much the optimal search may do before it returns the best plan found (see above).
struct SearchBudget {
  static constexpr int64_t kDefaultMaxEdges = 20000;
  // Edges generated; 0: unlimited.
  int64_t max_edges = kDefaultMaxEdges;
  // Wall-clock milliseconds; 0: unlimited. A time limit makes the plan depend on the machine's
  // speed: processes of one job may then get different plans, so only use it where one process
  // plans for everyone (the in-process world, tools).
  double max_ms = 0;

  // OK, or INVALID_ARGUMENT naming the field ("search budget max_edges=-1 must be >= 0").
  Status Validate() const;
  // "max_edges=20000" or "max_edges=20000;max_ms=50".
  std::string ToString() const;
  friend bool operator==(const SearchBudget&, const SearchBudget&) = default;
};

// The optimal plan (planner = PlannerKind::kOptimal) within `budget`. from == to gives an empty plan.
StatusOr<Plan> PlanRedistribution(const Layout& from, const Layout& to, DType dtype, const Topology& topo,
                                  const SearchBudget& budget = {});

// The direct plan (planner = PlannerKind::kDirect): one send_recv step to the target (Partial dims of the
// target as Replicate), followed by one local_partial step when the target has Partial. Errors:
// as above, plus a Partial source (reduce first).
StatusOr<Plan> PlanDirect(const Layout& from, const Layout& to, DType dtype, const Topology& topo);

// Checks what every planner requires of (from, to); see the errors above.
Status CheckPlannable(const Layout& from, const Layout& to);

// The search's edge set from `state` towards `target` (exposed for tests: brute-force
// enumeration over the same edges). Steps carry modelled_us and bytes_per_rank. Precondition:
// CheckPlannable(state, target) is OK.
StatusOr<std::vector<PlanStep>> Successors(const Layout& state, const Layout& target, DType dtype,
                                           const Topology& topo);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_SEARCH_H_
