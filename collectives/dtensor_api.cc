#include "meshflow/collectives/dtensor_api.h"

#include "meshflow/collectives/executor.h"

namespace meshflow {

StatusOr<DTensor> Redistribute(const DTensor& x, const Layout& target, MeshComms& comms,
                               const RedistributeOptions& options) {
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(x.layout(), target, x.dtype(), options));
  Tensor local = x.local();
  MF_RETURN_IF_ERROR(ExecutePlan(*plan, comms, local));
  return DTensor::FromLocal(std::move(local), target, x.rank());
}

StatusOr<Tensor> FullTensor(const DTensor& x, MeshComms& comms) {
  Placements replicated(static_cast<size_t>(x.layout().mesh().ndim()), Replicate{});
  MF_ASSIGN_OR_RETURN(Layout target, x.layout().WithPlacements(std::move(replicated)));
  MF_ASSIGN_OR_RETURN(DTensor full, Redistribute(x, target, comms));
  return full.to_local();
}

}  // namespace meshflow
