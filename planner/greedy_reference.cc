#include "meshflow/planner/greedy_reference.h"

#include <utility>
#include <vector>

#include "meshflow/planner/search.h"
#include "meshflow/planner/transforms.h"

namespace meshflow {
namespace {

struct Transform {
  int mesh_dim;
  Placement src;
  Placement dst;
};

StatusOr<StepKind> KindOf(const Transform& t) {
  const Placement& a = t.src;
  const Placement& b = t.dst;
  if (IsShard(a) && IsReplicate(b)) return StepKind::kAllGather;
  if (IsPartial(a) && IsReplicate(b)) return StepKind::kAllReduce;
  if (IsPartial(a) && IsShard(b)) return StepKind::kReduceScatter;
  if (IsShard(a) && IsShard(b)) return StepKind::kAllToAll;
  if (IsReplicate(a) && IsShard(b)) return StepKind::kLocalSlice;
  if (IsReplicate(a) && IsPartial(b)) return StepKind::kLocalPartial;
  return InvalidArgumentError("greedy redistribution from " + ToString(a) + " to " + ToString(b) + " on mesh dim " +
                              std::to_string(t.mesh_dim) + " is not supported");
}

// Applies one transform to `cur` (default shard orders), returning the step.
StatusOr<PlanStep> Apply(const Layout& cur, const Transform& t) {
  MF_ASSIGN_OR_RETURN(StepKind kind, KindOf(t));
  Placements ps = cur.placements();
  ps[t.mesh_dim] = t.dst;
  MF_ASSIGN_OR_RETURN(Layout next, cur.WithPlacements(std::move(ps)));
  PlanStep step{kind, {t.mesh_dim}, -1, -1, cur, std::move(next)};
  if (IsShard(t.src)) step.tensor_dim = std::get<Shard>(t.src).dim;
  if (IsShard(t.dst)) {
    if (kind == StepKind::kAllToAll) {
      step.dst_tensor_dim = std::get<Shard>(t.dst).dim;
    } else {
      step.tensor_dim = std::get<Shard>(t.dst).dim;
    }
  }
  if (ValidateStep(step).ok()) return step;
  Status box = CheckStepBoxes(step);
  if (!box.ok()) {
    return InternalError("greedy transform " + ToString(t.src) + " -> " + ToString(t.dst) + " on mesh dim " +
                         std::to_string(t.mesh_dim) + " is not executable: " + box.message());
  }
  return step;
}

}  // namespace

StatusOr<Plan> PlanGreedy(const Layout& from, const Layout& to, DType dtype, const Topology& topo) {
  MF_RETURN_IF_ERROR(topo.ValidateForMesh(from.mesh().ndim()));
  MF_RETURN_IF_ERROR(CheckPlannable(from, to));
  if (!from.has_default_shard_order() || !to.has_default_shard_order()) {
    return InvalidArgumentError("the greedy reference planner needs default shard orders: " + from.PlacementsString() +
                                " -> " + to.PlacementsString());
  }
  if (from == to) return IdentityPlan(from, dtype, PlannerKind::kGreedy);
  Plan plan{from, to, dtype, PlannerKind::kGreedy, {}, 0, {}, 0, std::nullopt};
  const int nd = from.mesh().ndim();
  Placements cur = from.placements();
  const Placements& dst = to.placements();
  std::vector<Transform> transforms;
  if (!(from == to)) {
    if (nd == 1) {
      transforms.push_back(Transform{0, cur[0], dst[0]});
    } else {
      int64_t num_shards = 1;
      for (int m = 0; m < nd; ++m) {
        if (IsShard(cur[m])) num_shards *= from.mesh().dim_size(m);
      }
      if (num_shards > 1) {
        for (int m = nd - 1; m >= 0; --m) {
          Placement target = dst[m];
          if (IsShard(target)) {
            const int t = std::get<Shard>(target).dim;
            std::vector<int> cur_sharding, dst_sharding;
            for (int i = 0; i < m; ++i) {
              if (IsShard(cur[i], t)) cur_sharding.push_back(i);
              if (IsShard(dst[i], t)) dst_sharding.push_back(i);
            }
            if (cur_sharding != dst_sharding) target = Replicate{};
          }
          if (!(cur[m] == target)) {
            transforms.push_back(Transform{m, cur[m], target});
            cur[m] = target;
          }
        }
      }
      for (int m = 0; m < nd; ++m) {
        if (!(cur[m] == dst[m])) {
          transforms.push_back(Transform{m, cur[m], dst[m]});
          cur[m] = dst[m];
        }
      }
    }
  }
  Layout state = from;
  for (const Transform& t : transforms) {
    MF_ASSIGN_OR_RETURN(PlanStep step, Apply(state, t));
    state = step.to;
    plan.steps.push_back(std::move(step));
  }
  if (!(state == to)) {
    return InternalError("greedy plan ends at " + state.ToString() + " instead of " + to.ToString());
  }
  MF_RETURN_IF_ERROR(FillPlanCosts(plan, topo));
  return plan;
}

}  // namespace meshflow
