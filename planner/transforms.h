// Transforms: the single steps the planner may emit, with the rules that make each one
// executable from its `from`/`to` layouts, `kind` and `mesh_dims` alone (box arithmetic in
// runtime/executor.cc).
//
// A state is placements + normalized shard order (Layout::shard_order(): per tensor dim the mesh
// dims sharding it, outermost first). The rules (M = the step's mesh_dims):
//
//   all_gather      S -> R. Every m in M is Shard(t_m); for every tensor dim t, the dims of M
//                   sharding t are exactly the innermost suffix of t's order. After: those dims
//                   are Replicate and removed from the order. (M may span several tensor dims.)
//   local_slice     R -> S(t). Every m in M is Replicate; they are appended, in the order given,
//                   as the innermost dims of t's order.
//   all_reduce      P -> R on any Partial dims M.
//   reduce_scatter  P -> S(t). Every m in M is Partial; appended innermost to t's order in the
//                   order given.
//   all_to_all      S(i) -> S(j), i != j. The set M is exactly the innermost suffix of i's order;
//                   M (in the order given) becomes the innermost suffix of j's order.
//   local_partial   R -> P(op). Every m in M is Replicate. op must agree with any Partial already
//                   in the layout.
//   local_shard_to_partial
//                   S -> P(op), op in {sum, max, min}. The all_gather rule (every m in M is
//                   Shard; per tensor dim, the dims of M sharding it are the innermost suffix of
//                   its order; they leave the order), with Partial(op) instead of Replicate; op
//                   must agree with any Partial already in the layout. Each rank's box becomes its
//                   all_gather target box, holding its own shard in place and the identity of op
//                   elsewhere (sum: 0, -0.0 for floats; max: the lowest value, -inf for floats;
//                   min: the highest, +inf): the group's shards tile that box, so the reduction
//                   over the group is exact. Not for avg (no identity; see LocalShardToPartialStep).
//                   A non-innermost M (e.g. mesh dim 0 of S(0),S(0) in default order) is refused:
//                   the group's shards would not tile any box.
//   send_recv       any Partial-free layout -> any Partial-free layout on the same mesh and shape
//                   (planner/direct.h); M = all mesh dims.
//
// Every rule-valid step is also box-valid (CheckStepBoxes): e.g. for all_gather the group
// members' source boxes tile the rank's target box.
//
// Example:
//   MF_ASSIGN_OR_RETURN(PlanStep s, AllGatherStep(layout, {1}));   // s.to has R on mesh dim 1
#ifndef MESHFLOW_PLANNER_TRANSFORMS_H_
#define MESHFLOW_PLANNER_TRANSFORMS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

// Builders. Each checks its rule and returns the step with `from`, `to`, `kind`, `mesh_dims`,
// `tensor_dim` (and `dst_tensor_dim` for all_to_all) set; bytes and time are left 0 (see
// cost_model.h). Errors (INVALID_ARGUMENT naming the mesh dim and placement): the rule does not
// hold; an empty, repeated or out-of-range mesh dim; a tensor dim out of range.
//
// all_gather: tensor_dim is the gathered tensor dim when M shards one dim only, else -1.
StatusOr<PlanStep> AllGatherStep(const Layout& from, std::vector<int> mesh_dims);
StatusOr<PlanStep> LocalSliceStep(const Layout& from, std::vector<int> mesh_dims, int tensor_dim);
StatusOr<PlanStep> AllReduceStep(const Layout& from, std::vector<int> mesh_dims);
StatusOr<PlanStep> ReduceScatterStep(const Layout& from, std::vector<int> mesh_dims, int tensor_dim);
StatusOr<PlanStep> AllToAllStep(const Layout& from, std::vector<int> mesh_dims, int src_tensor_dim,
                                int dst_tensor_dim);
StatusOr<PlanStep> LocalPartialStep(const Layout& from, std::vector<int> mesh_dims, ReduceOp op);
// Errors: as all_gather's; op is avg (no identity, so no exact local form); op differs from the
// layout's Partial op.
StatusOr<PlanStep> LocalShardToPartialStep(const Layout& from, std::vector<int> mesh_dims, ReduceOp op);
// Errors: different mesh or shape; a Partial source or target.
StatusOr<PlanStep> SendRecvStep(const Layout& from, const Layout& to);

// Checks that `step` follows its rule: rebuilds it from step.from, kind, mesh_dims and tensor
// dims and compares the result with step.to. Errors name the step and the mismatch.
Status ValidateStep(const PlanStep& step);

// Box-level check, independent of the shard-order rules: every rank's `to` box is obtainable by
// the step's collective from the group's `from` boxes (e.g. all_gather: the group's source boxes
// lie inside the target box and tile it). Mesh dims outside M keep their placements.
Status CheckStepBoxes(const PlanStep& step);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_TRANSFORMS_H_
