// Plan: a sequence of steps that turns a DTensor from one Layout into another.
//
// This header is the contract between the planner (which chooses steps) and the executor in
// collectives/ (which runs them). Each step records the full layouts before and after it, so the
// executor can derive every transfer from box arithmetic alone:
//
//   kind            group (mesh_dims)            what moves
//   all_gather      flattened group of dims      S -> R on those dims: every member gets the union
//   reduce_scatter  flattened group of dims      P -> S: reduce, each member keeps its target box
//   all_reduce      flattened group of dims      P -> R on those dims
//   all_to_all      flattened group of dims      S(i) -> S(j): member p receives from member q
//                                                Intersect(from box of q, to box of p)
//   local_slice     (no communication)           R -> S: keep Intersect(from box, to box)
//   local_partial   (no communication)           R -> P: sum keeps coordinate 0, zeros elsewhere
//   local_shard_to_partial (no communication)    S -> P(sum|max|min): the box grows to the
//                                                all_gather target box; own shard in place, the
//                                                identity of op elsewhere (planner/transforms.h)
//   send_recv       all mesh dims                direct: see planner/direct.h
//
// A step may change several mesh dims at once (one collective over their flattened group); the
// flattened group order is row-major over `mesh_dims` in the order given.
#ifndef MESHFLOW_PLANNER_PLAN_H_
#define MESHFLOW_PLANNER_PLAN_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"

namespace meshflow {

enum class StepKind {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kAllToAll,
  kLocalSlice,
  kLocalPartial,
  kSendRecv,
  kLocalShardToPartial,
};

// "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "local_slice", "local_partial",
// "send_recv", "local_shard_to_partial".
std::string_view StepKindName(StepKind kind);
// True for the steps that need no communication (local slice, local partial, local shard to
// partial).
constexpr bool IsLocalStep(StepKind kind) {
  return kind == StepKind::kLocalSlice || kind == StepKind::kLocalPartial || kind == StepKind::kLocalShardToPartial;
}

// Which planner produced a plan (Plan::planner). PlannerKindName gives its stable name, used in
// the text and JSON plan formats and by ParsePlannerKind (planner/planner.h).
enum class PlannerKind { kOptimal, kGreedy, kDirect };

// "optimal", "greedy", "direct".
std::string_view PlannerKindName(PlannerKind kind);

struct PlanStep {
  StepKind kind;
  std::vector<int> mesh_dims;  // the group (see above)
  int tensor_dim = -1;         // dim gathered / scattered / sliced; all_to_all: source shard dim;
                               // local_shard_to_partial: as all_gather
  int dst_tensor_dim = -1;     // all_to_all: target shard dim; -1 otherwise
  Layout from;
  Layout to;
  int64_t bytes_per_rank = 0;  // modelled payload bytes received by the busiest rank
  double modelled_us = 0;      // cost model time of this step
};

struct Plan {
  Layout from;
  Layout to;
  DType dtype = DType::kF32;
  PlannerKind planner = PlannerKind::kOptimal;
  std::vector<PlanStep> steps;
  double modelled_us = 0;
  // Modelled payload bytes each rank receives over the whole plan, in mesh().ranks() order; empty
  // for the identity plan (from == to: no steps, every rank receives 0), which is built without
  // per-rank tables so that it stays cheap on any mesh size.
  std::vector<int64_t> bytes_received_per_rank;
  int64_t max_bytes_received_per_rank = 0;
  // Max over ranks of LowerBoundElementsPerRank (planner/direct.h) in bytes: for Partial-free
  // targets the bytes of the target box not in the source box; absent when the source has Partial
  // placements.
  std::optional<int64_t> lower_bound_bytes_per_rank;
  // Optimal planner: true when the search ran to completion (no cheaper plan exists under the
  // cost model), false when it stopped at its budget (SearchBudget, planner/search.h) and returned
  // the best plan it had, never worse than the greedy one. Greedy and direct plans: false.
  bool proven_optimal = false;
  // Optimal planner: the number of edges the search generated (SearchBudget::max_edges counts
  // these); 0 for the other planners and for from == to.
  int64_t search_edges = 0;
};

// The plan from `layout` to itself by `planner`: no steps, zero modelled time and bytes, no
// per-rank bytes (see Plan::bytes_received_per_rank), a zero lower bound unless the layout has
// Partial placements. O(mesh dims): no per-rank pass, whatever the mesh size.
Plan IdentityPlan(const Layout& layout, DType dtype, PlannerKind planner);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_PLAN_H_
