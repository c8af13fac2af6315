// Plan executor: runs a planner Plan on any Communicator backend, on the rank's streams.
//
// Every rank calls ExecutePlan with the same plan and its own local tensor (laid out as
// plan.from); on success the tensor holds the rank's part of plan.to. Transfers are derived from
// the step layouts by box arithmetic (see planner/plan.h), so uneven and empty shards are exact:
// no padding is ever sent. Bytes moved are visible in the backend's byte counters.
//
// Streams. A plan step is stream work on the rank's communication stream (runtime/rank_context.h):
// pack (box-region copies), the collective, unpack, every byte operation through the device's
// runtime (runtime/device_runtime.h) and every collective in its stream-ordered form. The plan runs
// after the compute issued before the call, and the compute stream waits for it: ExecutePlan is
// synchronous for the host (it returns once the steps ran; on an idle communication stream they run
// on the caller's thread) and stream-ordered on a GPU (it returns once enqueued). ExecutePlanAsync
// returns at once with a PendingTensor: the steps run on the communication stream while the caller
// computes, and Wait() joins them (the compute stream waits; on the host, the caller blocks).
//
// Step outputs and scratch come from ctx.buffers() (runtime/buffer_pool.h), and every buffer a step
// is done with goes back there, the storage `local` held on entry included: once the pool holds the
// sizes a plan needs, running it again allocates nothing and touches no new page.
//
// A send_recv step's sends and receives are derived per rank from its own peers
// (DirectPiecesOfRank, planner/direct.h), once per distinct step: they are kept in
// ctx.send_recv_cache() (runtime/send_recv_cache.h), so running a plan again does no bookkeeping
// for them.
//
//   MF_ASSIGN_OR_RETURN(Plan plan, PlanRedistribution(from, to, DType::kF32, Topology()));
//   MF_RETURN_IF_ERROR(ExecutePlan(plan, ctx, local));
//
// Errors: local shape or dtype does not match plan.from / plan.dtype for this rank; the mesh of the
// plan differs from the context's; a tensor on another device than the context's; any
// communicator error (with the step index and kind). An error does not stick to the stream: a
// failed collective breaks its communicator, and later calls on it fail (Aborted).
#ifndef MESHFLOW_RUNTIME_EXECUTOR_H_
#define MESHFLOW_RUNTIME_EXECUTOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <memory>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/planner/plan.h"
#include "meshflow/runtime/pending.h"
#include "meshflow/runtime/rank_context.h"

namespace meshflow {

Status ExecutePlan(const Plan& plan, RankContext& ctx, Tensor& local);

// One step (exposed for tests), synchronous like ExecutePlan.
Status ExecuteStep(const PlanStep& step, RankContext& ctx, Tensor& local);

// Enqueues the plan on the communication stream after the compute issued so far and returns at
// once. `local` (laid out as plan->from) is moved into the execution; the plan is kept alive by it.
// Errors (at once): those of ExecutePlan's argument checks; the execution's own errors come from
// PendingTensor::Wait.
// `label` names the work on the communication stream's timeline (a string with static storage).
StatusOr<PendingTensor> ExecutePlanAsync(std::shared_ptr<const Plan> plan, RankContext& ctx, Tensor local,
                                         const char* label = "plan (async)");

// Several plans in one work item of the communication stream (a gradient bucket), each with its own
// result. When every plan is one all_reduce step over the same mesh dims with the same reduction,
// on tensors of one dtype, the locals are packed into one buffer and reduced by ONE all_reduce:
// every element is reduced with the same rank-order fold, so the results have the bits of one
// all_reduce per tensor, with one collective's latency. Otherwise the plans run one after another.
// Errors: ExecutePlanAsync's per plan (at once), a plan count other than the tensor count.
StatusOr<std::vector<PendingTensor>> ExecutePlansAsync(std::vector<std::shared_ptr<const Plan>> plans, RankContext& ctx,
                                                       std::vector<Tensor> locals);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_EXECUTOR_H_
