// DTensor operations that communicate: Redistribute, RedistributeAsync and FullTensor.
//
// They live in runtime/ (not dtensor/) because they need the planner and the rank's context; the
// dependency direction mesh <- dtensor <- planner <- collectives <- runtime stays one way.
//
//   MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, target_layout, ctx));   // optimal plan
//   MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));                  // every rank
//
// Plans come from PlanFor (planner/planner.h): with the optimal planner, a process-wide PlanCache
// keyed on (layouts, shape, dtype, topology), so the steady-state cost of Redistribute is one
// cache lookup plus the collectives. Redistribute is synchronous in the sense of ExecutePlan
// (runtime/executor.h): the host returns once the data moved; a GPU rank returns once it is
// enqueued, ordered before the compute issued next. RedistributeAsync returns at once; the plan
// runs on the communication stream while the caller computes (FSDP prefetch, bucketed gradient
// reduction), and PendingDTensor::Wait joins it:
//
//   MF_ASSIGN_OR_RETURN(PendingDTensor next, RedistributeAsync(w_shard, w_full_layout, ctx));
//   ...                                                    // compute; the all-gather runs meanwhile
//   MF_ASSIGN_OR_RETURN(DTensor w_full, next.Wait());
#ifndef MESHFLOW_RUNTIME_REDISTRIBUTE_H_
#define MESHFLOW_RUNTIME_REDISTRIBUTE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <optional>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/planner/planner.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"

namespace meshflow {

// Collective: every rank of the mesh calls it with its part of the same DTensor. Errors: target
// on another mesh or shape; planner errors (e.g. Partial -> other Partial); communicator errors.
//
// Into a target with Partial dims, only the reduction of the local parts over those dims is
// defined: which rank holds which part depends on the plan chosen (its cost model, the topology,
// the planner). S(0) -> P(sum) on a 2-rank dim, for example, keeps each shard in place with zeros
// elsewhere (local_shard_to_partial), while a plan through Replicate would put the whole tensor on
// coordinate 0 (local_partial). Code may rely on FullTensor or a later reduction of the result,
// never on one rank's Partial local part.
StatusOr<DTensor> Redistribute(const DTensor& x, const Layout& target, RankContext& ctx,
                               const RedistributeOptions& options = {});

// The result of RedistributeAsync.
class PendingDTensor {
 public:
  PendingDTensor() = default;
  bool valid() const { return pending_.valid(); }
  bool Ready() const { return pending_.Ready(); }
  const Layout& target() const { return *target_; }
  // PendingTensor::Wait, wrapped in the target layout.
  StatusOr<DTensor> Wait();

 private:
  friend StatusOr<PendingDTensor> RedistributeAsync(DTensor x, const Layout& target, RankContext& ctx,
                                                    const RedistributeOptions& options);
  friend StatusOr<std::vector<PendingDTensor>> RedistributeBucketAsync(std::vector<DTensor> xs,
                                                                       const std::vector<Layout>& targets,
                                                                       RankContext& ctx,
                                                                       const RedistributeOptions& options);
  PendingTensor pending_;
  std::optional<Layout> target_;
  int rank_ = 0;
};

// Collective, asynchronous: like Redistribute, but the plan runs on the communication stream and
// the call returns at once. `x` is moved into the execution (pass a copy to keep yours). Every rank
// must issue its asynchronous and synchronous collectives in the same order. Errors: Redistribute's
// argument and planner errors at once; communicator errors from Wait.
StatusOr<PendingDTensor> RedistributeAsync(DTensor x, const Layout& target, RankContext& ctx,
                                           const RedistributeOptions& options = {});

// Collective, asynchronous: RedistributeAsync of several tensors in one communication work item (a
// gradient bucket; ExecutePlansAsync: one fused all_reduce when every plan is the same all_reduce).
// Errors: RedistributeAsync's per tensor; a target count other than the tensor count.
StatusOr<std::vector<PendingDTensor>> RedistributeBucketAsync(std::vector<DTensor> xs, const std::vector<Layout>& targets,
                                                              RankContext& ctx, const RedistributeOptions& options = {});

// Collective, asynchronous: starts Redistribute(x, target) on the communication stream (of a copy of
// x) and files it in ctx.prefetches() (runtime/prefetch_cache.h), where the eager op that needs x
// in `target` finds it. Nothing is started when x is already in `target` or the same prefetch is
// waiting. Errors: RedistributeAsync's.
Status PrefetchRedistribute(const DTensor& x, const Layout& target, RankContext& ctx,
                            const RedistributeOptions& options = {});

// Collective: the whole global tensor on every rank (Partial values reduced).
StatusOr<Tensor> FullTensor(const DTensor& x, RankContext& ctx);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_REDISTRIBUTE_H_
