#include "meshflow/planner/plan.h"

namespace meshflow {

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

}  // namespace meshflow
