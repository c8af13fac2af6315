// Cost model of the redistribution planner: per-step times and bytes moved, and the costs of a
// whole Plan. Its parts: the Topology (planner/topology.h, included), the alpha-beta formulas of
// collective times, Link, StepCost and CostUnits (planner/step_cost.h, included; the collective
// time table is there). The planner's internal pricing on shard chains lives in
// planner/collective_pricing.h and planner/send_recv_pricing.h.
//
// Bytes received per rank (exactly what the in-process backend counts, so measured == modelled),
// in elements times the dtype size:
//   all_gather      elements of the new box not in the old box
//   reduce_scatter  (g-1) * elements of the rank's new box
//   all_to_all      sum over the other group members q of |Intersect(from_box(q), to_box(p))|
//   all_reduce      a reduce-scatter + all-gather over g torch.chunk chunks of the count
//                   (chunk = ceil(count/g), chunk c = [c*chunk, min(count, (c+1)*chunk))):
//                   the rank at group position p receives (g-1)*|chunk p| + (count - |chunk p|)
//   local steps     0
//   send_recv       the sum of its incoming DirectTransfers (planner/direct.h)
//
// Example:
//   MF_ASSIGN_OR_RETURN(Topology topo, ParseTopology("intra=1;bw_inter=12.5"));
//   MF_ASSIGN_OR_RETURN(StepModel m, ModelStep(step, DType::kF32, topo));
#ifndef MESHFLOW_PLANNER_COST_MODEL_H_
#define MESHFLOW_PLANNER_COST_MODEL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/planner/plan.h"
#include "meshflow/planner/step_cost.h"
#include "meshflow/planner/topology.h"

namespace meshflow {

struct StepModel {
  std::vector<int64_t> bytes_per_rank;  // mesh().ranks() order
  double us = 0;
};

// Models one step (its kind, mesh_dims, from and to). Errors: a mesh dim out of range; for
// send_recv, the errors of DirectTransfers.
StatusOr<StepModel> ModelStep(const PlanStep& step, DType dtype, const Topology& topo);

// The search's view of one step: ModelStep's `us` (the same double) and the max over ranks of
// its bytes_per_rank, without the per-rank model of collectives. Collectives: per mesh dim, the
// coordinates split into a few cells (torch.chunk gives at most three lengths per level: full
// chunk, remainder, empty) within which every chain of both layouts yields the same interval
// lengths, so one representative rank per cell combination gives every per-rank count that
// depends only on lengths; the number of cells depends on the shapes and mesh dims, not on the
// rank count. send_recv: the exact per-rank sums of ModelStep (same transfers, same summation
// order), found per destination from the source chunks overlapping its box on each tensor dim
// (no pass over every (destination, block) pair). Errors: as ModelStep.
StatusOr<StepCost> ModelStepCost(const PlanStep& step, DType dtype, const Topology& topo);

// A lower bound of a send_recv step's ModelStepCost: `us` is the incoming time of the rank at
// mesh index 0, summed exactly as ModelStep sums it (so never above ModelStep's us, which is the
// max over ranks of max(incoming, outgoing)); max_bytes_per_rank is that rank's bytes. One
// destination's overlaps instead of every destination's. Errors: not a send_recv step; as ModelStep.
StatusOr<StepCost> SendRecvFirstRankUs(const PlanStep& step, DType dtype, const Topology& topo);

// Max over ranks of the local box's element count: the box at mesh coordinate (0,...,0) (the
// first torch.chunk at every level is the longest, and tensor dims use disjoint mesh dims). O(dims).
int64_t MaxLocalElements(const Layout& layout);

// Fills every step's bytes_per_rank and modelled_us, and the plan's modelled_us,
// bytes_received_per_rank, max_bytes_received_per_rank and lower_bound_bytes_per_rank.
Status FillPlanCosts(Plan& plan, const Topology& topo);

// FillPlanCosts for a plan whose send_recv steps carry ModelStepCost's modelled_us (the search's
// steps): keeps those times instead of pricing the steps again over every rank, so the result
// equals FillPlanCosts' at O(ranks x tensor rank) per step.
Status FillPlanCostsOfSearch(Plan& plan, const Topology& topo);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_COST_MODEL_H_
