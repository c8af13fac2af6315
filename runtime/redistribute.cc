#include "meshflow/runtime/redistribute.h"

#include <cstring>

#include "meshflow/runtime/executor.h"

namespace meshflow {

StatusOr<DTensor> Redistribute(const DTensor& x, const Layout& target, RankContext& ctx,
                               const RedistributeOptions& options) {
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(x.layout(), target, x.dtype(), options));
  // The working copy comes from the rank's step-buffer pool (the plan's first step gives it back).
  Tensor local = Tensor::Uninitialized(x.dtype(), x.local().shape(), ctx.buffers().Take(x.local().NumBytes()));
  if (local.NumBytes() > 0) std::memcpy(local.raw(), x.local().raw(), static_cast<size_t>(local.NumBytes()));
  MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, local));
  return DTensor::FromLocal(std::move(local), target, x.rank());
}

StatusOr<Tensor> FullTensor(const DTensor& x, RankContext& ctx) {
  Placements replicated(static_cast<size_t>(x.layout().mesh().ndim()), Replicate{});
  MF_ASSIGN_OR_RETURN(Layout target, x.layout().WithPlacements(std::move(replicated)));
  MF_ASSIGN_OR_RETURN(DTensor full, Redistribute(x, target, ctx));
  return full.to_local();
}

}  // namespace meshflow
