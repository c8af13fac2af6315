// Plan executor: runs a planner Plan on any Communicator backend.
//
// Every rank calls ExecutePlan with the same plan and its own local tensor (laid out as
// plan.from); on success the tensor holds the rank's part of plan.to. Transfers are derived from
// the step layouts by box arithmetic (see planner/plan.h), so uneven and empty shards are exact:
// no padding is ever sent. Bytes moved are visible in the backend's byte counters.
//
// Step outputs and scratch come from ctx.buffers() (runtime/buffer_pool.h), and every buffer
// a step is done with goes back there, the storage `local` held on entry included: once the pool
// holds the sizes a plan needs, running it again allocates nothing and touches no new page.
//
// A send_recv step's sends and receives are derived per rank from its own peers
// (DirectTransfersOfRank, planner/direct.h), once per distinct step: they are kept in
// ctx.send_recv_cache() (runtime/send_recv_cache.h), so running a plan again does no
// bookkeeping for them.
//
//   MF_ASSIGN_OR_RETURN(Plan plan, PlanRedistribution(from, to, DType::kF32, Topology()));
//   MF_RETURN_IF_ERROR(ExecutePlan(plan, ctx, local));
#ifndef MESHFLOW_RUNTIME_EXECUTOR_H_
#define MESHFLOW_RUNTIME_EXECUTOR_H_

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

// Errors: local shape or dtype does not match plan.from / plan.dtype for this rank; the mesh of
// the plan differs from ctx.mesh(); any communicator error (with the step index and kind).
Status ExecutePlan(const Plan& plan, RankContext& ctx, Tensor& local);

// One step (exposed for tests).
Status ExecuteStep(const PlanStep& step, RankContext& ctx, Tensor& local);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_EXECUTOR_H_
