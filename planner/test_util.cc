#include "meshflow/planner/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "meshflow/planner/transforms.h"

namespace meshflow::testing {
namespace {

template <typename T>
T OrDie(StatusOr<T> s, const std::string& what) {
  if (!s.ok()) {
    std::fprintf(stderr, "test setup failed (%s): %s\n", what.c_str(), s.status().ToString().c_str());
    std::abort();
  }
  return std::move(s).value();
}

// Calls f(index) for every element of `box`.
template <typename F>
void ForEach(const Box& box, F&& f) {
  if (box.empty()) return;
  std::vector<int64_t> idx = box.offset;
  while (true) {
    f(idx);
    int d = box.rank() - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < box.offset[d] + box.shape[d]) break;
      idx[d] = box.offset[d];
    }
    if (d < 0) return;
  }
}

}  // namespace

DeviceMesh MakeMesh(std::vector<int64_t> shape) { return OrDie(DeviceMesh::Create(std::move(shape)), "mesh"); }

Layout MakeLayout(std::vector<int64_t> shape, const DeviceMesh& mesh, const std::string& placements,
                  const std::string& order) {
  Placements ps = OrDie(ParsePlacements(placements), placements);
  ShardOrder so = OrDie(ParseShardOrder(order), order);
  return OrDie(Layout::Create(std::move(shape), mesh, std::move(ps), std::move(so)), placements + " " + order);
}

Status CheckStepElements(const PlanStep& step) {
  const Layout& from = step.from;
  const Layout& to = step.to;
  const DeviceMesh& mesh = from.mesh();
  const std::string name = std::string(StepKindName(step.kind)) + " " + from.PlacementsString() + " -> " +
                           to.PlacementsString();
  if (!(mesh == to.mesh()) || from.global_shape() != to.global_shape()) return InternalError(name + ": mesh/shape");
  std::vector<int> dims = step.mesh_dims;
  if (step.kind == StepKind::kSendRecv) {
    if (from.HasPartial() || to.HasPartial()) return InternalError(name + ": send_recv with Partial");
    return Status();
  }
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (std::find(dims.begin(), dims.end(), m) == dims.end() && !(from.placement(m) == to.placement(m))) {
      return InternalError(name + ": mesh dim " + std::to_string(m) + " changes outside the step");
    }
  }
  for (int m : dims) {
    const Placement& a = from.placement(m);
    const Placement& b = to.placement(m);
    bool ok = false;
    switch (step.kind) {
      case StepKind::kAllGather: ok = IsShard(a) && IsReplicate(b); break;
      case StepKind::kReduceScatter: ok = IsPartial(a) && IsShard(b); break;
      case StepKind::kAllReduce: ok = IsPartial(a) && IsReplicate(b); break;
      case StepKind::kAllToAll: ok = IsShard(a) && IsShard(b) && !(a == b); break;
      case StepKind::kLocalSlice: ok = IsReplicate(a) && IsShard(b); break;
      case StepKind::kLocalPartial: ok = IsReplicate(a) && IsPartial(b); break;
      case StepKind::kLocalShardToPartial:
        ok = IsShard(a) && IsPartial(b) && std::get<Partial>(b).op != ReduceOp::kAvg;
        break;
      case StepKind::kSendRecv: ok = true; break;
    }
    if (!ok) return InternalError(name + ": wrong placements on mesh dim " + std::to_string(m));
  }
  for (int r : mesh.ranks()) {
    MF_ASSIGN_OR_RETURN(Box fb, from.LocalBox(r));
    MF_ASSIGN_OR_RETURN(Box tb, to.LocalBox(r));
    MF_ASSIGN_OR_RETURN(std::vector<int> group, mesh.Group(r, dims));
    std::vector<Box> members;
    for (int q : group) {
      MF_ASSIGN_OR_RETURN(Box b, from.LocalBox(q));
      members.push_back(std::move(b));
    }
    Status bad;
    ForEach(tb, [&](const std::vector<int64_t>& idx) {
      if (!bad.ok()) return;
      int holders = 0;
      for (const Box& b : members) holders += b.Contains(idx) ? 1 : 0;
      bool ok = true;
      switch (step.kind) {
        case StepKind::kAllGather:
        case StepKind::kLocalShardToPartial:
        case StepKind::kAllToAll: ok = holders == 1; break;
        case StepKind::kReduceScatter: ok = holders == static_cast<int>(members.size()); break;
        case StepKind::kAllReduce:
        case StepKind::kLocalSlice:
        case StepKind::kLocalPartial: ok = fb.Contains(idx); break;
        case StepKind::kSendRecv: break;
      }
      if (!ok) {
        std::string s;
        for (int64_t v : idx) s += std::to_string(v) + ",";
        bad = InternalError(name + ": rank " + std::to_string(r) + " cannot obtain element (" + s + ") of " +
                            tb.ToString() + " (held by " + std::to_string(holders) + " group members)");
      }
    });
    MF_RETURN_IF_ERROR(bad);
    if (step.kind == StepKind::kAllReduce || step.kind == StepKind::kLocalPartial) {
      if (!(fb == tb)) return InternalError(name + ": box changes");
      for (const Box& b : members) {
        if (step.kind == StepKind::kAllReduce && !(b == fb)) return InternalError(name + ": uneven all_reduce");
      }
    }
    if (step.kind == StepKind::kAllGather || step.kind == StepKind::kLocalShardToPartial) {
      for (const Box& b : members) {
        if (!b.empty() && !(Intersect(b, tb) == b)) return InternalError(name + ": member block outside target");
      }
    }
  }
  return Status();
}

Status CheckPlan(const Plan& plan, bool rules) {
  Layout cur = plan.from;
  double us = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    const std::string where = "step " + std::to_string(i) + ": ";
    if (!(s.from == cur)) return InternalError(where + "does not start where the previous ended");
    MF_RETURN_IF_ERROR(CheckStepElements(s).WithContext(where));
    if (rules) MF_RETURN_IF_ERROR(ValidateStep(s).WithContext(where));
    us += s.modelled_us;
    cur = s.to;
  }
  if (!(cur == plan.to)) return InternalError("plan ends at " + cur.ToString() + " not " + plan.to.ToString());
  if (std::abs(us - plan.modelled_us) > 1e-6 * (1 + us)) return InternalError("modelled_us is not the step sum");
  int64_t mx = 0;
  for (int64_t b : plan.bytes_received_per_rank) mx = std::max(mx, b);
  if (mx != plan.max_bytes_received_per_rank) return InternalError("max bytes mismatch");
  const bool identity = plan.steps.empty() && plan.bytes_received_per_rank.empty();  // Plan: no per-rank tables
  if (!identity && static_cast<int>(plan.bytes_received_per_rank.size()) != plan.from.mesh().size()) {
    return InternalError("bytes_received_per_rank has the wrong size");
  }
  return Status();
}

}  // namespace meshflow::testing
