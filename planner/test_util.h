// Test helpers for planner tests: terse layout construction and an element-level step checker
// written independently of planner/transforms.cc.
#ifndef MESHFLOW_PLANNER_TEST_UTIL_H_
#define MESHFLOW_PLANNER_TEST_UTIL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/plan.h"

namespace meshflow::testing {

// Aborts the test binary on a bad value (tests only).
DeviceMesh MakeMesh(std::vector<int64_t> shape);
Layout MakeLayout(std::vector<int64_t> shape, const DeviceMesh& mesh, const std::string& placements,
                  const std::string& order = "");

// Element-level check of one step: for every rank, every element of its `to` box can be produced
// by the step's collective from its group's `from` boxes (all_gather / all_to_all /
// local_shard_to_partial: each element held by exactly one group member, and never Partial(avg) for
// the latter; reduce_scatter: held by every member; all_reduce: identical
// member boxes; local steps: inside the own box; send_recv: Partial-free). Mesh dims outside the
// step keep their placements.
Status CheckStepElements(const PlanStep& step);

// Whole-plan check: steps chain from plan.from to plan.to, every step passes CheckStepElements and
// ValidateStep (unless `rules` is false), totals match the steps.
Status CheckPlan(const Plan& plan, bool rules = true);

}  // namespace meshflow::testing

#endif  // MESHFLOW_PLANNER_TEST_UTIL_H_
