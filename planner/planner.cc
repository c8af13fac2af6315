#include "meshflow/planner/planner.h"

#include "meshflow/planner/greedy_reference.h"
#include "meshflow/planner/search.h"

namespace meshflow {

StatusOr<PlannerKind> ParsePlannerKind(std::string_view s) {
  if (s == "optimal") return PlannerKind::kOptimal;
  if (s == "greedy") return PlannerKind::kGreedy;
  if (s == "direct") return PlannerKind::kDirect;
  return InvalidArgumentError("unknown planner '" + std::string(s) + "'; expected one of optimal, greedy, direct");
}

StatusOr<std::shared_ptr<const Plan>> PlanFor(const Layout& from, const Layout& to, DType dtype,
                                              const RedistributeOptions& options) {
  switch (options.planner) {
    case PlannerKind::kOptimal: {
      static PlanCache* const kDefaultCache = new PlanCache();
      PlanCache* cache = options.cache != nullptr ? options.cache : kDefaultCache;
      return cache->GetOrPlan(from, to, dtype, options.topology, options.budget);
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

}  // namespace meshflow
