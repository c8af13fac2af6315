#include "meshflow/planner/transforms.h"

#include <algorithm>
#include <string>

namespace meshflow {
namespace {

std::string DimsString(const std::vector<int>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string What(StepKind kind, const std::vector<int>& dims) {
  return std::string(StepKindName(kind)) + " on mesh dims " + DimsString(dims);
}

Status CheckMeshDims(const Layout& from, StepKind kind, const std::vector<int>& dims) {
  if (dims.empty()) return InvalidArgumentError(What(kind, dims) + ": needs at least one mesh dim");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= from.mesh().ndim()) {
      return InvalidArgumentError(What(kind, dims) + ": mesh dim " + std::to_string(dims[i]) +
                                  " out of range for " + from.mesh().ToString());
    }
    for (size_t j = 0; j < i; ++j) {
      if (dims[j] == dims[i]) {
        return InvalidArgumentError(What(kind, dims) + ": mesh dim " + std::to_string(dims[i]) + " repeated");
      }
    }
  }
  return Status();
}

Status CheckTensorDim(const Layout& from, StepKind kind, const std::vector<int>& dims, int t) {
  if (t < 0 || t >= from.tensor_rank()) {
    return InvalidArgumentError(What(kind, dims) + ": tensor dim " + std::to_string(t) + " out of range for a rank-" +
                                std::to_string(from.tensor_rank()) + " tensor");
  }
  return Status();
}

Status BadPlacement(StepKind kind, const std::vector<int>& dims, int m, const Layout& from, const char* want) {
  return InvalidArgumentError(What(kind, dims) + ": mesh dim " + std::to_string(m) + " is " +
                              ToString(from.placement(m)) + ", needs " + want + " (layout " +
                              from.PlacementsString() + ")");
}

StatusOr<PlanStep> Finish(StepKind kind, const Layout& from, std::vector<int> dims, Placements placements,
                          ShardOrder order, int tensor_dim, int dst_tensor_dim) {
  MF_ASSIGN_OR_RETURN(Layout to, from.WithPlacements(std::move(placements), std::move(order)));
  PlanStep step{kind, std::move(dims), tensor_dim, dst_tensor_dim, from, std::move(to)};
  return step;
}

bool SameKindPlacement(const Placement& a, const Placement& b) { return a == b; }

// The shared rule of all_gather and local_shard_to_partial: every m in `mesh_dims` is Shard and,
// per tensor dim, the dims of M sharding it are the innermost suffix of its order. Removes them
// from `order`; *single_dim = the one tensor dim M shards, or -1 when it shards several.
Status RemoveInnermostShards(const Layout& from, StepKind kind, const std::vector<int>& mesh_dims, ShardOrder& order,
                             int* single_dim) {
  *single_dim = -2;
  for (int m : mesh_dims) {
    if (!IsShard(from.placement(m))) return BadPlacement(kind, mesh_dims, m, from, "Shard");
    const int t = std::get<Shard>(from.placement(m)).dim;
    *single_dim = *single_dim == -2 || *single_dim == t ? t : -1;
  }
  for (int t = 0; t < from.tensor_rank(); ++t) {
    std::vector<int>& o = order[t];
    size_t k = 0;
    for (int m : mesh_dims) k += std::count(o.begin(), o.end(), m);
    for (size_t i = o.size() - k; i < o.size(); ++i) {
      if (std::find(mesh_dims.begin(), mesh_dims.end(), o[i]) == mesh_dims.end()) {
        return InvalidArgumentError(What(kind, mesh_dims) + ": the " +
                                    (kind == StepKind::kAllGather ? "gathered" : "changed") +
                                    " mesh dims of tensor dim " + std::to_string(t) +
                                    " are not the innermost of its shard order " + DimsString(o) + " (layout " +
                                    from.PlacementsString() + ")");
      }
    }
    o.resize(o.size() - k);
  }
  return Status();
}

}  // namespace

StatusOr<PlanStep> AllGatherStep(const Layout& from, std::vector<int> mesh_dims) {
  const StepKind kind = StepKind::kAllGather;
  MF_RETURN_IF_ERROR(CheckMeshDims(from, kind, mesh_dims));
  Placements ps = from.placements();
  ShardOrder order = from.shard_order();
  int single_dim = -1;
  MF_RETURN_IF_ERROR(RemoveInnermostShards(from, kind, mesh_dims, order, &single_dim));
  for (int m : mesh_dims) ps[m] = Replicate{};
  std::sort(mesh_dims.begin(), mesh_dims.end());
  return Finish(kind, from, std::move(mesh_dims), std::move(ps), std::move(order), single_dim, -1);
}

StatusOr<PlanStep> LocalSliceStep(const Layout& from, std::vector<int> mesh_dims, int tensor_dim) {
  const StepKind kind = StepKind::kLocalSlice;
  MF_RETURN_IF_ERROR(CheckMeshDims(from, kind, mesh_dims));
  MF_RETURN_IF_ERROR(CheckTensorDim(from, kind, mesh_dims, tensor_dim));
  Placements ps = from.placements();
  ShardOrder order = from.shard_order();
  for (int m : mesh_dims) {
    if (!IsReplicate(ps[m])) return BadPlacement(kind, mesh_dims, m, from, "Replicate");
    ps[m] = Shard{tensor_dim};
    order[tensor_dim].push_back(m);
  }
  return Finish(kind, from, std::move(mesh_dims), std::move(ps), std::move(order), tensor_dim, -1);
}

StatusOr<PlanStep> AllReduceStep(const Layout& from, std::vector<int> mesh_dims) {
  const StepKind kind = StepKind::kAllReduce;
  MF_RETURN_IF_ERROR(CheckMeshDims(from, kind, mesh_dims));
  Placements ps = from.placements();
  for (int m : mesh_dims) {
    if (!IsPartial(ps[m])) return BadPlacement(kind, mesh_dims, m, from, "Partial");
    ps[m] = Replicate{};
  }
  return Finish(kind, from, std::move(mesh_dims), std::move(ps), from.shard_order(), -1, -1);
}

StatusOr<PlanStep> ReduceScatterStep(const Layout& from, std::vector<int> mesh_dims, int tensor_dim) {
  const StepKind kind = StepKind::kReduceScatter;
  MF_RETURN_IF_ERROR(CheckMeshDims(from, kind, mesh_dims));
  MF_RETURN_IF_ERROR(CheckTensorDim(from, kind, mesh_dims, tensor_dim));
  Placements ps = from.placements();
  ShardOrder order = from.shard_order();
  for (int m : mesh_dims) {
    if (!IsPartial(ps[m])) return BadPlacement(kind, mesh_dims, m, from, "Partial");
    ps[m] = Shard{tensor_dim};
    order[tensor_dim].push_back(m);
  }
  return Finish(kind, from, std::move(mesh_dims), std::move(ps), std::move(order), tensor_dim, -1);
}

StatusOr<PlanStep> AllToAllStep(const Layout& from, std::vector<int> mesh_dims, int src_tensor_dim,
                                int dst_tensor_dim) {
  const StepKind kind = StepKind::kAllToAll;
  MF_RETURN_IF_ERROR(CheckMeshDims(from, kind, mesh_dims));
  MF_RETURN_IF_ERROR(CheckTensorDim(from, kind, mesh_dims, src_tensor_dim));
  MF_RETURN_IF_ERROR(CheckTensorDim(from, kind, mesh_dims, dst_tensor_dim));
  if (src_tensor_dim == dst_tensor_dim) {
    return InvalidArgumentError(What(kind, mesh_dims) + ": source and target tensor dim are both " +
                                std::to_string(src_tensor_dim));
  }
  Placements ps = from.placements();
  ShardOrder order = from.shard_order();
  for (int m : mesh_dims) {
    if (!IsShard(ps[m], src_tensor_dim)) {
      return BadPlacement(kind, mesh_dims, m, from, ("Shard(" + std::to_string(src_tensor_dim) + ")").c_str());
    }
  }
  std::vector<int>& src = order[src_tensor_dim];
  const size_t k = mesh_dims.size();
  for (size_t i = src.size() - k; i < src.size(); ++i) {
    if (std::find(mesh_dims.begin(), mesh_dims.end(), src[i]) == mesh_dims.end()) {
      return InvalidArgumentError(What(kind, mesh_dims) + ": not the innermost mesh dims of tensor dim " +
                                  std::to_string(src_tensor_dim) + "'s shard order " + DimsString(src) +
                                  " (layout " + from.PlacementsString() + ")");
    }
  }
  src.resize(src.size() - k);
  for (int m : mesh_dims) {
    ps[m] = Shard{dst_tensor_dim};
    order[dst_tensor_dim].push_back(m);
  }
  return Finish(kind, from, std::move(mesh_dims), std::move(ps), std::move(order), src_tensor_dim, dst_tensor_dim);
}

StatusOr<PlanStep> LocalPartialStep(const Layout& from, std::vector<int> mesh_dims, ReduceOp op) {
  const StepKind kind = StepKind::kLocalPartial;
  MF_RETURN_IF_ERROR(CheckMeshDims(from, kind, mesh_dims));
  if (const auto have = from.partial_op(); have && *have != op) {
    return InvalidArgumentError(What(kind, mesh_dims) + ": cannot add Partial(" + std::string(ReduceOpName(op)) +
                                ") to a layout already Partial(" + std::string(ReduceOpName(*have)) + ")");
  }
  Placements ps = from.placements();
  for (int m : mesh_dims) {
    if (!IsReplicate(ps[m])) return BadPlacement(kind, mesh_dims, m, from, "Replicate");
    ps[m] = Partial{op};
  }
  return Finish(kind, from, std::move(mesh_dims), std::move(ps), from.shard_order(), -1, -1);
}

StatusOr<PlanStep> LocalShardToPartialStep(const Layout& from, std::vector<int> mesh_dims, ReduceOp op) {
  const StepKind kind = StepKind::kLocalShardToPartial;
  MF_RETURN_IF_ERROR(CheckMeshDims(from, kind, mesh_dims));
  if (op == ReduceOp::kAvg) {
    // avg has no identity: the group's mean of (own shard, filler) is not the value. Scaling the
    // shard by the group size and filling with 0 is exact neither for integers (overflow) nor
    // for floats (x*3/3 rounds), so avg targets gather (all_gather + local_partial) instead.
    return InvalidArgumentError(What(kind, mesh_dims) + ": Shard -> Partial(avg) has no exact local form (avg has no "
                                "identity element); gather first (layout " + from.PlacementsString() + ")");
  }
  if (const auto have = from.partial_op(); have && *have != op) {
    return InvalidArgumentError(What(kind, mesh_dims) + ": cannot add Partial(" + std::string(ReduceOpName(op)) +
                                ") to a layout already Partial(" + std::string(ReduceOpName(*have)) + ")");
  }
  Placements ps = from.placements();
  ShardOrder order = from.shard_order();
  int single_dim = -1;
  MF_RETURN_IF_ERROR(RemoveInnermostShards(from, kind, mesh_dims, order, &single_dim));
  for (int m : mesh_dims) ps[m] = Partial{op};
  std::sort(mesh_dims.begin(), mesh_dims.end());
  return Finish(kind, from, std::move(mesh_dims), std::move(ps), std::move(order), single_dim, -1);
}

StatusOr<PlanStep> SendRecvStep(const Layout& from, const Layout& to) {
  if (!(from.mesh() == to.mesh()) || from.global_shape() != to.global_shape()) {
    return InvalidArgumentError("send_recv needs the same mesh and shape: " + from.ToString() + " vs " +
                                to.ToString());
  }
  if (from.HasPartial() || to.HasPartial()) {
    return InvalidArgumentError("send_recv needs Partial-free layouts: " + from.PlacementsString() + " -> " +
                                to.PlacementsString());
  }
  std::vector<int> dims(static_cast<size_t>(from.mesh().ndim()));
  for (int d = 0; d < from.mesh().ndim(); ++d) dims[d] = d;
  return PlanStep{StepKind::kSendRecv, std::move(dims), -1, -1, from, to};
}

Status ValidateStep(const PlanStep& step) {
  const std::string name = std::string(StepKindName(step.kind)) + " step " + step.from.PlacementsString() + " -> " +
                           step.to.PlacementsString();
  StatusOr<PlanStep> rebuilt = InvalidArgumentError("unknown step kind");
  switch (step.kind) {
    case StepKind::kAllGather: rebuilt = AllGatherStep(step.from, step.mesh_dims); break;
    case StepKind::kLocalSlice: rebuilt = LocalSliceStep(step.from, step.mesh_dims, step.tensor_dim); break;
    case StepKind::kAllReduce: rebuilt = AllReduceStep(step.from, step.mesh_dims); break;
    case StepKind::kReduceScatter: rebuilt = ReduceScatterStep(step.from, step.mesh_dims, step.tensor_dim); break;
    case StepKind::kAllToAll:
      rebuilt = AllToAllStep(step.from, step.mesh_dims, step.tensor_dim, step.dst_tensor_dim);
      break;
    case StepKind::kLocalPartial: {
      const std::optional<ReduceOp> op = step.to.partial_op();
      if (!op) return InvalidArgumentError(name + ": target has no Partial");
      rebuilt = LocalPartialStep(step.from, step.mesh_dims, *op);
      break;
    }
    case StepKind::kLocalShardToPartial: {
      const std::optional<ReduceOp> op = step.to.partial_op();
      if (!op) return InvalidArgumentError(name + ": target has no Partial");
      rebuilt = LocalShardToPartialStep(step.from, step.mesh_dims, *op);
      break;
    }
    case StepKind::kSendRecv: {
      rebuilt = SendRecvStep(step.from, step.to);
      if (rebuilt.ok() && rebuilt->mesh_dims != step.mesh_dims) {
        return InvalidArgumentError(name + ": send_recv must name all mesh dims, not " + DimsString(step.mesh_dims));
      }
      break;
    }
  }
  if (!rebuilt.ok()) return rebuilt.status().WithContext(name);
  if (!(rebuilt->to == step.to)) {
    return InvalidArgumentError(name + ": the rule gives " + rebuilt->to.PlacementsString() + " instead");
  }
  return Status();
}

namespace {

bool IsS(const Placement& p) { return IsShard(p); }
bool IsR(const Placement& p) { return IsReplicate(p); }
bool IsP(const Placement& p) { return IsPartial(p); }

// `a` is empty or inside `b`.
bool Inside(const Box& a, const Box& b) { return a.empty() || Intersect(a, b) == a; }

// Sum over the parts of |part ∩ target| equals |target|, with pairwise disjoint parts.
bool Tiles(const std::vector<const Box*>& parts, const Box& target) {
  int64_t sum = 0;
  for (size_t a = 0; a < parts.size(); ++a) {
    sum += Intersect(*parts[a], target).NumElements();
    for (size_t b = 0; b < a; ++b) {
      if (!Intersect(*parts[a], *parts[b]).empty()) return false;
    }
  }
  return sum == target.NumElements();
}

// CheckStepBoxes' per-kind checks of one step, over every rank's source and target boxes.
class StepBoxChecker {
 public:
  StepBoxChecker(const PlanStep& step, std::string name)
      : step_(step),
        name_(std::move(name)),
        mesh_(step.from.mesh()),
        fb_(step.from.AllLocalBoxes()),
        tb_(step.to.AllLocalBoxes()) {}

  Status Check() const {
    switch (step_.kind) {
      case StepKind::kAllGather:
      case StepKind::kLocalShardToPartial: return CheckGathering();
      case StepKind::kReduceScatter: return CheckReduceScatter();
      case StepKind::kAllReduce: return CheckAllReduce();
      case StepKind::kAllToAll: return CheckAllToAll();
      case StepKind::kLocalSlice: return CheckLocalSlice();
      case StepKind::kLocalPartial: return CheckLocalPartial();
      case StepKind::kSendRecv:
        if (step_.from.HasPartial() || step_.to.HasPartial()) {
          return InvalidArgumentError(name_ + ": send_recv with Partial");
        }
        return Status();
    }
    return InvalidArgumentError(name_ + ": unknown kind");
  }

 private:
  // Placement kinds on the step's dims.
  bool AllDims(bool (*pred_from)(const Placement&), bool (*pred_to)(const Placement&)) const {
    for (int m : step_.mesh_dims) {
      if (!pred_from(step_.from.placement(m)) || !pred_to(step_.to.placement(m))) return false;
    }
    return true;
  }
  // The mesh indices of rank i's group over the step's dims.
  StatusOr<std::vector<size_t>> GroupOf(size_t i) const {
    MF_ASSIGN_OR_RETURN(std::vector<int> g, mesh_.Group(mesh_.ranks()[i], step_.mesh_dims));
    std::vector<size_t> out;
    for (int r : g) {
      MF_ASSIGN_OR_RETURN(int idx, mesh_.IndexOf(r));
      out.push_back(static_cast<size_t>(idx));
    }
    return out;
  }
  Status Fail(size_t i, const std::string& why) const {
    return InvalidArgumentError(name_ + ": rank " + std::to_string(mesh_.ranks()[i]) + " " + why + " (from box " +
                                fb_[i].ToString() + ", to box " + tb_[i].ToString() + ")");
  }

  // all_gather and local_shard_to_partial: the group's shards tile the new box (for the latter,
  // the reduction over the group of (own shard, identity elsewhere) is the gathered value).
  Status CheckGathering() const {
    if (step_.kind == StepKind::kAllGather && !AllDims(IsS, IsR)) {
      return InvalidArgumentError(name_ + ": all_gather needs S -> R on its mesh dims");
    }
    if (step_.kind == StepKind::kLocalShardToPartial && !AllDims(IsS, IsP)) {
      return InvalidArgumentError(name_ + ": local_shard_to_partial needs S -> P on its mesh dims");
    }
    for (size_t i = 0; i < fb_.size(); ++i) {
      MF_ASSIGN_OR_RETURN(std::vector<size_t> g, GroupOf(i));
      std::vector<const Box*> parts;
      for (size_t q : g) {
        if (!Inside(fb_[q], tb_[i])) return Fail(i, "gets a member block " + fb_[q].ToString() + " outside its target");
        parts.push_back(&fb_[q]);
      }
      if (!Tiles(parts, tb_[i])) return Fail(i, "is not tiled by its group's source blocks");
    }
    return Status();
  }
  Status CheckReduceScatter() const {
    if (!AllDims(IsP, IsS)) return InvalidArgumentError(name_ + ": reduce_scatter needs P -> S on its mesh dims");
    for (size_t i = 0; i < fb_.size(); ++i) {
      MF_ASSIGN_OR_RETURN(std::vector<size_t> g, GroupOf(i));
      for (size_t q : g) {
        if (!Inside(tb_[i], fb_[q])) return Fail(i, "needs data outside member block " + fb_[q].ToString());
      }
    }
    return Status();
  }
  Status CheckAllReduce() const {
    if (!AllDims(IsP, IsR)) return InvalidArgumentError(name_ + ": all_reduce needs P -> R on its mesh dims");
    for (size_t i = 0; i < fb_.size(); ++i) {
      MF_ASSIGN_OR_RETURN(std::vector<size_t> g, GroupOf(i));
      if (!(fb_[i] == tb_[i])) return Fail(i, "changes its box in an all_reduce");
      for (size_t q : g) {
        if (!(fb_[q] == fb_[i])) return Fail(i, "reduces with a member holding another box " + fb_[q].ToString());
      }
    }
    return Status();
  }
  Status CheckAllToAll() const {
    if (!AllDims(IsS, IsS)) return InvalidArgumentError(name_ + ": all_to_all needs S -> S on its mesh dims");
    for (size_t i = 0; i < fb_.size(); ++i) {
      MF_ASSIGN_OR_RETURN(std::vector<size_t> g, GroupOf(i));
      std::vector<const Box*> parts;
      for (size_t q : g) parts.push_back(&fb_[q]);
      if (!Tiles(parts, tb_[i])) return Fail(i, "is not covered exactly once by its group's source blocks");
    }
    return Status();
  }
  Status CheckLocalSlice() const {
    if (!AllDims(IsR, IsS)) return InvalidArgumentError(name_ + ": local_slice needs R -> S on its mesh dims");
    for (size_t i = 0; i < fb_.size(); ++i) {
      if (!Inside(tb_[i], fb_[i])) return Fail(i, "slices outside its source box");
    }
    return Status();
  }
  Status CheckLocalPartial() const {
    if (!AllDims(IsR, IsP)) return InvalidArgumentError(name_ + ": local_partial needs R -> P on its mesh dims");
    for (size_t i = 0; i < fb_.size(); ++i) {
      if (!(fb_[i] == tb_[i])) return Fail(i, "changes its box in a local_partial");
    }
    return Status();
  }

  const PlanStep& step_;
  const std::string name_;
  const DeviceMesh& mesh_;
  const std::vector<Box> fb_;
  const std::vector<Box> tb_;
};

}  // namespace

Status CheckStepBoxes(const PlanStep& step) {
  const Layout& from = step.from;
  const Layout& to = step.to;
  std::string name = std::string(StepKindName(step.kind)) + " step " + from.PlacementsString() + " -> " +
                     to.PlacementsString();
  if (!(from.mesh() == to.mesh()) || from.global_shape() != to.global_shape()) {
    return InvalidArgumentError(name + ": layouts on different meshes or shapes");
  }
  if (step.kind != StepKind::kSendRecv) {
    MF_RETURN_IF_ERROR(CheckMeshDims(from, step.kind, step.mesh_dims));
    for (int m = 0; m < from.mesh().ndim(); ++m) {
      const bool in = std::find(step.mesh_dims.begin(), step.mesh_dims.end(), m) != step.mesh_dims.end();
      if (!in && !SameKindPlacement(from.placement(m), to.placement(m))) {
        return InvalidArgumentError(name + ": mesh dim " + std::to_string(m) + " is not in the step but changes");
      }
    }
  }
  return StepBoxChecker(step, std::move(name)).Check();
}

}  // namespace meshflow
