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

#include <memory>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/planner/plan.h"
#include "meshflow/runtime/rank_context.h"

namespace meshflow {

Status ExecutePlan(const Plan& plan, RankContext& ctx, Tensor& local);

// One step (exposed for tests), synchronous like ExecutePlan.
Status ExecuteStep(const PlanStep& step, RankContext& ctx, Tensor& local);

// The result of an asynchronous execution.
class PendingTensor {
 public:
  PendingTensor() = default;
  bool valid() const { return state_ != nullptr; }
  // True once the steps ran (the result can be taken without blocking the host).
  bool Ready() const;
  // Makes the compute stream wait for the steps (on the host: blocks until they ran) and returns
  // the result. Errors: the execution's; FailedPrecondition when called twice or on an empty handle.
  StatusOr<Tensor> Wait();

 private:
  friend StatusOr<PendingTensor> ExecutePlanAsync(std::shared_ptr<const Plan> plan, RankContext& ctx, Tensor local);
  struct State;
  std::shared_ptr<State> state_;
};

// Enqueues the plan on the communication stream after the compute issued so far and returns at
// once. `local` (laid out as plan->from) is moved into the execution; the plan is kept alive by it.
// Errors (at once): those of ExecutePlan's argument checks; the execution's own errors come from
// PendingTensor::Wait.
StatusOr<PendingTensor> ExecutePlanAsync(std::shared_ptr<const Plan> plan, RankContext& ctx, Tensor local);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_EXECUTOR_H_
