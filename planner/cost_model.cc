#include "meshflow/planner/cost_model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "meshflow/planner/chains.h"
#include "meshflow/planner/collective_pricing.h"
#include "meshflow/planner/direct.h"
#include "meshflow/planner/send_recv_pricing.h"

namespace meshflow {

StatusOr<StepModel> ModelStep(const PlanStep& step, DType dtype, const Topology& topo) {
  const DeviceMesh& mesh = step.from.mesh();
  const int64_t n = mesh.size();
  const int64_t esize = DTypeSize(dtype);
  StepModel out;
  out.bytes_per_rank.assign(static_cast<size_t>(n), 0);
  for (int d : step.mesh_dims) {
    if (d < 0 || d >= mesh.ndim()) {
      return OutOfRangeError("step " + std::string(StepKindName(step.kind)) + " names mesh dim " +
                             std::to_string(d) + " of a " + std::to_string(mesh.ndim()) + "-D mesh");
    }
  }
  if (IsLocalStep(step.kind)) return out;

  if (step.kind == StepKind::kSendRecv) {
    // DirectTransfers' transfers, found per destination from the overlapping source chunks and
    // summed in the same order (SendRecvCost).
    MF_ASSIGN_OR_RETURN(StepCost c, SendRecvCost(step.from, step.to, esize, topo, {}, &out.bytes_per_rank));
    out.us = c.us;
    return out;
  }

  // Every rank's box sizes and overlap from per-tensor-dim tables (ForEachGridPoint over every
  // coordinate, in mesh index order): no Box per rank.
  FlatChains fa, fb;
  const ShardChains from = fa.Of(step.from), to = fb.Of(step.to);
  int64_t g = 1;
  for (int d : step.mesh_dims) g *= mesh.dim_size(d);
  const Link link = LinkOf(topo, step.mesh_dims);
  int64_t max_from = 0, max_to = 0;
  CellScratch& s = PerThread<CellScratch>();
  AllCoordinates(mesh, s);
  int64_t i = 0;
  const StepKind kind = step.kind;
  ForEachGridPoint(from, to, s, [&](int64_t fe, int64_t te, int64_t held) {
    max_from = std::max(max_from, fe);
    max_to = std::max(max_to, te);
    int64_t elems = 0;
    switch (kind) {
      case StepKind::kAllGather:
      case StepKind::kAllToAll:
        // all_to_all: the group's source boxes tile the gathered box, which holds every member's
        // target box: the sum over the other members q of |from(q) ∩ to(i)| is |to(i)| - |from(i) ∩ to(i)|.
        elems = te - held;
        break;
      case StepKind::kReduceScatter:
        elems = (g - 1) * te;
        break;
      case StepKind::kAllReduce: {
        // Position in the group: row-major over mesh_dims in the order given.
        int64_t pos = 0;
        for (int d : step.mesh_dims) pos = pos * mesh.dim_size(d) + static_cast<int64_t>(s.idx[d]);
        elems = AllReduceElementsReceived(fe, g, pos);
        break;
      }
      default:
        break;
    }
    out.bytes_per_rank[i++] = elems * esize;
  });
  switch (step.kind) {
    case StepKind::kAllGather:
      out.us = AllGatherUs(g, max_to * esize, link);
      break;
    case StepKind::kReduceScatter:
      out.us = ReduceScatterUs(g, max_from * esize, link);
      break;
    case StepKind::kAllReduce:
      out.us = AllReduceUs(g, max_from * esize, link);
      break;
    case StepKind::kAllToAll:
      out.us = AllToAllUs(g, std::max(max_from, max_to) * esize, link);
      break;
    default:
      break;
  }
  return out;
}

int64_t MaxLocalElements(const Layout& layout) {
  FlatChains f;
  return MaxLocalElements(f.Of(layout));
}

StatusOr<StepCost> ModelStepCost(const PlanStep& step, DType dtype, const Topology& topo) {
  const DeviceMesh& mesh = step.from.mesh();
  const int64_t esize = DTypeSize(dtype);
  for (int d : step.mesh_dims) {
    if (d < 0 || d >= mesh.ndim()) {
      return OutOfRangeError("step " + std::string(StepKindName(step.kind)) + " names mesh dim " +
                             std::to_string(d) + " of a " + std::to_string(mesh.ndim()) + "-D mesh");
    }
  }
  if (IsLocalStep(step.kind)) return StepCost{};
  if (step.kind == StepKind::kSendRecv) return SendRecvCost(step.from, step.to, esize, topo);
  FlatChains a, b;
  return CollectiveStepCost(step.kind, step.mesh_dims, a.Of(step.from), b.Of(step.to), esize, topo);
}

StatusOr<StepCost> SendRecvFirstRankUs(const PlanStep& step, DType dtype, const Topology& topo) {
  if (step.kind != StepKind::kSendRecv) {
    return InvalidArgumentError("SendRecvFirstRankUs needs a send_recv step, got " +
                                std::string(StepKindName(step.kind)));
  }
  return SendRecvCost(step.from, step.to, DTypeSize(dtype), topo, OriginOnly());
}

namespace {

Status FillPlanCostsImpl(Plan& plan, const Topology& topo, bool keep_send_recv_us) {
  const DeviceMesh& mesh = plan.from.mesh();
  const size_t n = static_cast<size_t>(mesh.size());
  const int64_t esize = DTypeSize(plan.dtype);
  plan.bytes_received_per_rank.assign(n, 0);
  plan.modelled_us = 0;
  // Max over ranks of |target box| - |source box ∩ target box| of the whole plan, when a send_recv
  // step goes from the plan's source to its target (-1: not known yet); the lower bound below.
  int64_t direct_max = -1;
  for (PlanStep& step : plan.steps) {
    if (keep_send_recv_us && step.kind == StepKind::kSendRecv) {
      // The search priced it with ModelStepCost (ModelStep's us); every rank receives the
      // elements of its target box not in its source box (planner/direct.h), added straight into
      // the plan's per-rank bytes.
      FlatChains fa, fb;
      CellScratch& s = PerThread<CellScratch>();
      AllCoordinates(mesh, s);
      int64_t* received = plan.bytes_received_per_rank.data();
      int64_t most = 0;
      ForEachGridPoint(fa.Of(step.from), fb.Of(step.to), s, [&](int64_t, int64_t te, int64_t held) {
        *received++ += (te - held) * esize;
        most = std::max(most, te - held);
      });
      if (step.from == plan.from && step.to == plan.to) direct_max = most;
      step.bytes_per_rank = most * esize;
      plan.modelled_us += step.modelled_us;
      continue;
    }
    MF_ASSIGN_OR_RETURN(const StepModel m, ModelStep(step, plan.dtype, topo));
    step.modelled_us = m.us;
    step.bytes_per_rank = 0;
    for (size_t i = 0; i < n; ++i) {
      step.bytes_per_rank = std::max(step.bytes_per_rank, m.bytes_per_rank[i]);
      plan.bytes_received_per_rank[i] += m.bytes_per_rank[i];
    }
    plan.modelled_us += m.us;
  }
  plan.max_bytes_received_per_rank = 0;
  for (int64_t b : plan.bytes_received_per_rank) {
    plan.max_bytes_received_per_rank = std::max(plan.max_bytes_received_per_rank, b);
  }
  plan.lower_bound_bytes_per_rank.reset();
  if (!plan.from.HasPartial()) {
    int64_t lb = 0;
    if (!plan.to.HasPartial() && direct_max >= 0) {
      lb = direct_max;  // the same pass as below, done for the send_recv step
    } else if (!plan.to.HasPartial()) {
      // LowerBoundElementsPerRank without Partial target dims: the elements of each rank's
      // target box not in its source box.
      FlatChains fa, fb;
      CellScratch& s = PerThread<CellScratch>();
      AllCoordinates(mesh, s);
      ForEachGridPoint(fa.Of(plan.from), fb.Of(plan.to), s,
                       [&](int64_t, int64_t te, int64_t held) { lb = std::max(lb, te - held); });
    } else {
      for (int64_t e : LowerBoundElementsPerRank(plan.from, plan.to)) lb = std::max(lb, e);
    }
    plan.lower_bound_bytes_per_rank = lb * esize;
  }
  return Status();
}

}  // namespace

Status FillPlanCosts(Plan& plan, const Topology& topo) { return FillPlanCostsImpl(plan, topo, false); }

Status FillPlanCostsOfSearch(Plan& plan, const Topology& topo) { return FillPlanCostsImpl(plan, topo, true); }

}  // namespace meshflow
