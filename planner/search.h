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
// ModelStepCost, which equals ModelStep's time and busiest-rank bytes without a per-rank pass).
// send_recv edges are priced lazily: queued under a lower bound of their cost (the first rank's
// incoming time) and priced when that bound is reached, with relaxation stamps so that the
// result equals eager relaxation in edge order. Paths compare by (modelled time
// in integer picoseconds, sum of the steps' bytes_per_rank, number of steps); remaining ties go
// to the first path found in the fixed edge order above, so plans are deterministic.
//
// Errors (all planners, INVALID_ARGUMENT naming the values): layouts on different meshes or
// shapes; a Partial source and a Partial target with different reduce ops.
//
// Example:
//   MF_ASSIGN_OR_RETURN(Plan plan, PlanRedistribution(from, to, DType::kF32, Topology()));
//   std::cout << PlanToText(plan);   // planner/plan_format.h
#ifndef MESHFLOW_PLANNER_SEARCH_H_
#define MESHFLOW_PLANNER_SEARCH_H_

#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

// The optimal plan (planner = "optimal"). from == to gives an empty plan.
StatusOr<Plan> PlanRedistribution(const Layout& from, const Layout& to, DType dtype, const Topology& topo);

// The direct plan (planner = "direct"): one send_recv step to the target (Partial dims of the
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
