#include "meshflow/runtime/redistribute.h"

#include <utility>

namespace meshflow {

StatusOr<DTensor> Redistribute(const DTensor& x, const Layout& target, RankContext& ctx,
                               const RedistributeOptions& options) {
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(x.layout(), target, x.dtype(), options));
  if (plan->steps.empty()) return DTensor::FromLocal(x.local(), target, x.rank());
  // The working copy comes from the rank's step-buffer pool (the plan's first step gives it back),
  // taken and filled as communication work, where the pool is used.
  Tensor local;
  const Tensor& src = x.local();
  MF_RETURN_IF_ERROR(ctx.RunCollective(
      [&]() -> Status {
        MF_ASSIGN_OR_RETURN(TensorBuffer b, ctx.buffers().Take(src.NumBytes()));
        local = Tensor::Uninitialized(src.dtype(), src.shape(), std::move(b));
        return ctx.runtime().Copy(local.raw(), src.raw(), src.NumBytes(), ctx.comm_stream());
      },
      "redistribute copy"));
  MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, local));
  return DTensor::FromLocal(std::move(local), target, x.rank());
}

StatusOr<DTensor> PendingDTensor::Wait() {
  MF_ASSIGN_OR_RETURN(Tensor local, pending_.Wait());
  if (!target_.has_value()) return FailedPreconditionError("PendingDTensor::Wait on an empty handle");
  return DTensor::FromLocal(std::move(local), *target_, rank_);
}

StatusOr<PendingDTensor> RedistributeAsync(DTensor x, const Layout& target, RankContext& ctx,
                                           const RedistributeOptions& options) {
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(x.layout(), target, x.dtype(), options));
  PendingDTensor out;
  out.target_ = target;
  out.rank_ = x.rank();
  MF_ASSIGN_OR_RETURN(out.pending_, ExecutePlanAsync(std::move(plan), ctx, std::move(x.mutable_local())));
  return out;
}

StatusOr<std::vector<PendingDTensor>> RedistributeBucketAsync(std::vector<DTensor> xs, const std::vector<Layout>& targets,
                                                              RankContext& ctx, const RedistributeOptions& options) {
  if (xs.size() != targets.size()) {
    return InvalidArgumentError("RedistributeBucketAsync: " + std::to_string(targets.size()) + " targets for " +
                                std::to_string(xs.size()) + " tensors");
  }
  std::vector<std::shared_ptr<const Plan>> plans;
  std::vector<Tensor> locals;
  std::vector<PendingDTensor> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(xs[i].layout(), targets[i], xs[i].dtype(), options));
    plans.push_back(std::move(plan));
    out[i].target_ = targets[i];
    out[i].rank_ = xs[i].rank();
    locals.push_back(std::move(xs[i].mutable_local()));
  }
  MF_ASSIGN_OR_RETURN(std::vector<PendingTensor> pending, ExecutePlansAsync(std::move(plans), ctx, std::move(locals)));
  for (size_t i = 0; i < out.size(); ++i) out[i].pending_ = std::move(pending[i]);
  return out;
}

Status PrefetchRedistribute(const DTensor& x, const Layout& target, RankContext& ctx,
                            const RedistributeOptions& options) {
  if (x.layout() == target || ctx.prefetches().Contains(x, target)) return Status::Ok();
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(x.layout(), target, x.dtype(), options));
  MF_ASSIGN_OR_RETURN(PendingTensor pending, ExecutePlanAsync(std::move(plan), ctx, x.local(), "prefetch"));
  ctx.prefetches().Put(x, target, std::move(pending));
  return Status::Ok();
}

StatusOr<Tensor> FullTensor(const DTensor& x, RankContext& ctx) {
  Placements replicated(static_cast<size_t>(x.layout().mesh().ndim()), Replicate{});
  MF_ASSIGN_OR_RETURN(Layout target, x.layout().WithPlacements(std::move(replicated)));
  MF_ASSIGN_OR_RETURN(DTensor full, Redistribute(x, target, ctx));
  return full.to_local();
}

}  // namespace meshflow
