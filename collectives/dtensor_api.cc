#include "collectives/dtensor_api.h"

#include "collectives/executor.h"
#include "planner/greedy_reference.h"
#include "planner/search.h"

namespace meshflow {

std::string_view PlannerKindName(PlannerKind kind) {
  switch (kind) {
    case PlannerKind::kOptimal: return "optimal";
    case PlannerKind::kGreedy: return "greedy";
    case PlannerKind::kDirect: return "direct";
  }
  return "?";
}

StatusOr<PlannerKind> ParsePlannerKind(std::string_view s) {
  if (s == "optimal") return PlannerKind::kOptimal;
  if (s == "greedy") return PlannerKind::kGreedy;
  if (s == "direct") return PlannerKind::kDirect;
  return InvalidArgumentError("unknown planner '" + std::string(s) + "'; expected optimal, greedy or direct");
}

StatusOr<std::shared_ptr<const Plan>> PlanFor(const Layout& from, const Layout& to, DType dtype,
                                              const RedistributeOptions& options) {
  switch (options.planner) {
    case PlannerKind::kOptimal: {
      static PlanCache* const kDefaultCache = new PlanCache();
      PlanCache* cache = options.cache != nullptr ? options.cache : kDefaultCache;
      return cache->GetOrPlan(from, to, dtype, options.topology);
    }
    case PlannerKind::kGreedy: {
      MF_ASSIGN_OR_RETURN(Plan plan, PlanGreedy(from, to, dtype, options.topology));
      return std::shared_ptr<const Plan>(std::make_shared<Plan>(std::move(plan)));
    }
    case PlannerKind::kDirect: {
      MF_ASSIGN_OR_RETURN(Plan plan, PlanDirect(from, to, dtype, options.topology));
      return std::shared_ptr<const Plan>(std::make_shared<Plan>(std::move(plan)));
    }
  }
  return InternalError("unknown planner kind");
}

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
