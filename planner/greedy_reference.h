// Greedy reference planner: PyTorch DTensor's default per-mesh-dim redistribution algorithm
// (torch/distributed/tensor/_redistribute.py, generate_greedy_transform_infos), for comparison
// in tests and benchmarks only.
//
// The algorithm, for source placements `cur` and target placements `dst` (default shard orders):
//   1. 1-D mesh: one transform cur[0] -> dst[0].
//   2. Otherwise, if the source has more than one shard (product of the sizes of its Shard mesh
//      dims > 1), walk mesh dims right to left. For mesh dim m with target Shard(t): if the mesh
//      dims before m that shard tensor dim t differ between cur and dst (misaligned nested
//      sharding, e.g. (S(0),S(0)) -> (R,S(0))), use Replicate as this pass's target for m. Emit
//      cur[m] -> that target when they differ, and update cur[m].
//   3. Walk mesh dims left to right and emit cur[m] -> dst[m] for every remaining difference.
//
// Each transform changes one mesh dim and maps onto our step kinds:
//   S -> R all_gather, P -> R all_reduce, P -> S reduce_scatter, S(i) -> S(j) all_to_all,
//   R -> S local_slice, R -> P local_partial (on that one mesh dim).
// DTensor keeps default shard orders, so each step's `to` is the new placements with the default
// order. With a sharded source (step 2) every emitted transform obeys the rules of
// planner/transforms.h (the right-to-left pass clears inner shardings before touching outer
// ones). Otherwise a transform that breaks the innermost rule can only touch mesh dims of size 1
// whose shards change no box; such a step is emitted when CheckStepBoxes accepts it, and any
// transform that is neither rule-valid nor box-valid is an error (INTERNAL, naming it).
// DTensor shortcuts mesh dims of size 1 (no collective); we still emit the step so that every
// step's layouts chain, and the cost model gives it 0 time and 0 bytes.
//
// Errors (INVALID_ARGUMENT naming the values): those of CheckPlannable (search.h); a source or
// target with a non-default shard order (DTensor then uses its graph planner); Shard -> Partial
// (DTensor: "not supported yet").
#ifndef MESHFLOW_PLANNER_GREEDY_REFERENCE_H_
#define MESHFLOW_PLANNER_GREEDY_REFERENCE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

// planner = PlannerKind::kGreedy; from == to gives an empty plan.
StatusOr<Plan> PlanGreedy(const Layout& from, const Layout& to, DType dtype, const Topology& topo);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_GREEDY_REFERENCE_H_
