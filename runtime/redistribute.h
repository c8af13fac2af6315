// DTensor operations that communicate: Redistribute and FullTensor.
//
// They live in collectives/ (not dtensor/) because they need the planner and a Communicator;
// the dependency direction mesh <- dtensor <- planner <- collectives stays one way.
//
//   MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, target_layout, ctx));   // optimal plan
//   MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));                  // every rank
//
// Plans come from PlanFor (planner/planner.h): with the optimal planner, a process-wide PlanCache
// keyed on (layouts, shape, dtype, topology), so the steady-state cost of Redistribute is one
// cache lookup plus the collectives.
#ifndef MESHFLOW_RUNTIME_REDISTRIBUTE_H_
#define MESHFLOW_RUNTIME_REDISTRIBUTE_H_

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/planner/planner.h"

namespace meshflow {

// Collective: every rank of the mesh calls it with its part of the same DTensor. Errors: target
// on another mesh or shape; planner errors (e.g. Partial -> other Partial); communicator errors.
StatusOr<DTensor> Redistribute(const DTensor& x, const Layout& target, RankContext& ctx,
                               const RedistributeOptions& options = {});

// Collective: the whole global tensor on every rank (Partial values reduced).
StatusOr<Tensor> FullTensor(const DTensor& x, RankContext& ctx);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_REDISTRIBUTE_H_
