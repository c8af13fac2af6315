// Plan printing: human-readable text, JSON, and ASCII pictures of layouts.
//
// PlanToText: a header line, one line per step (index, kind, mesh dims, tensor dim(s), bytes
// received by the busiest rank, modelled time), then a totals line with the lower bound and the
// plan/bound ratio:
//
//   plan (optimal): S(0),S(1) -> S(1),S(0) on mesh(2x2) shape [8,8], f32, 1 step
//     1. send_recv       mesh_dims=[0,1]  tensor_dim=-     bytes/rank=64    2.000 us  S(0),S(1) -> S(1),S(0)
//   total: 2.000 us, max bytes received per rank 64, lower bound 64, ratio 1.00
//
// An optimal plan whose search stopped at its budget (Plan::proven_optimal false) gets one more
// line: "not proven optimal: the search budget ran out after 20022 edges; best plan found (never
// worse than greedy)".
//
// PlanToJson: one object with exactly the keys
//   steps: [{kind, mesh_dims, tensor_dim, bytes_per_rank}], modelled_us,
//   max_bytes_received_per_rank, lower_bound_bytes_per_rank (null when absent), planner,
//   proven_optimal (true|false), search_edges
// (for all_to_all, tensor_dim is the source dim), in that order; integers exactly, modelled_us as
// base/json.h's JsonDouble (shortest round-trip; null if not finite). WritePlanJsonFields writes
// the same keys into an object the caller has open (dtplan adds its own keys after them).
//
// DrawLayout: like DTensor's visualize_sharding. For rank-1 and rank-2 tensors, a grid of the
// distinct blocks (cut at every shard boundary), each labelled with the ranks holding it:
//
//   S(0),S(1) on mesh(2x2) shape [8,8]
//          0:4   4:8
//        +-----+-----+
//     0:4| 0   | 1   |
//        +-----+-----+
//     4:8| 2   | 3   |
//        +-----+-----+
//
// Rank-0 tensors and tensors of rank 3 or more list the distinct blocks with their boxes and
// holders instead. Partial mesh dims and ranks with empty shards are noted below the picture.
#ifndef MESHFLOW_PLANNER_PLAN_FORMAT_H_
#define MESHFLOW_PLANNER_PLAN_FORMAT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <string>

#include "meshflow/base/json.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

std::string PlanToText(const Plan& plan);
std::string PlanToJson(const Plan& plan);
void WritePlanJsonFields(const Plan& plan, JsonWriter& w);
std::string DrawLayout(const Layout& layout);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_PLAN_FORMAT_H_
