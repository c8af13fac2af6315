// The planning entry point: which planner, under which cost model, and the process-wide plan cache.
//
// Everything that needs a redistribution plan (Redistribute, the eager ops, the graph compiler,
// tools) asks here, so planner choice and caching live in one place of the planner/ folder:
//
//   RedistributeOptions options;                       // optimal planner, default topology
//   MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, DType::kF32, options));
//   // plan->steps: the collectives; ExecutePlan (runtime/executor.h) runs them.
//
// Optimal plans come from a process-wide PlanCache keyed on (layouts, shape, dtype, topology,
// budget) unless `options.cache` names another one; greedy and direct plans are computed on every
// call. Concurrent PlanFor calls of one key (the ranks of an in-process world) share one search:
// one caller plans, the others wait for its plan (PlanCache). `options.budget` bounds the optimal
// search (SearchBudget, search.h): a search that runs out returns the best plan found, never
// worse than greedy, with plan->proven_optimal == false.
#ifndef MESHFLOW_PLANNER_PLANNER_H_
#define MESHFLOW_PLANNER_PLANNER_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <memory>
#include <string_view>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan.h"
#include "meshflow/planner/plan_cache.h"
#include "meshflow/planner/search.h"

namespace meshflow {

// PlannerKind and PlannerKindName: planner/plan.h. The inverse of PlannerKindName.
StatusOr<PlannerKind> ParsePlannerKind(std::string_view s);

struct RedistributeOptions {
  Topology topology;                        // cost model constants (documented defaults)
  PlannerKind planner = PlannerKind::kOptimal;
  PlanCache* cache = nullptr;               // nullptr: the process-wide cache (optimal only)
  SearchBudget budget;                      // optimal only (search.h; default 20000 edges)
};

// The plan for from -> to (cached for the optimal planner). Errors: see PlanRedistribution.
StatusOr<std::shared_ptr<const Plan>> PlanFor(const Layout& from, const Layout& to, DType dtype,
                                              const RedistributeOptions& options = {});

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_PLANNER_H_
