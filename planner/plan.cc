#include "meshflow/planner/plan.h"

namespace meshflow {

std::string_view PlannerKindName(PlannerKind kind) {
  switch (kind) {
    case PlannerKind::kOptimal: return "optimal";
    case PlannerKind::kGreedy: return "greedy";
    case PlannerKind::kDirect: return "direct";
  }
  return "?";
}

std::string_view StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kAllGather: return "all_gather";
    case StepKind::kReduceScatter: return "reduce_scatter";
    case StepKind::kAllReduce: return "all_reduce";
    case StepKind::kAllToAll: return "all_to_all";
    case StepKind::kLocalSlice: return "local_slice";
    case StepKind::kLocalPartial: return "local_partial";
    case StepKind::kSendRecv: return "send_recv";
    case StepKind::kLocalShardToPartial: return "local_shard_to_partial";
  }
  return "?";
}

Plan IdentityPlan(const Layout& layout, DType dtype, PlannerKind planner) {
  Plan plan{layout, layout, dtype, planner, {}, 0, {}, 0, std::nullopt};
  if (!layout.HasPartial()) plan.lower_bound_bytes_per_rank = 0;
  return plan;
}

}  // namespace meshflow
