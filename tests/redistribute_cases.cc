#include "meshflow/tests/redistribute_cases.h"

#include <algorithm>
#include <span>
#include <utility>

#include "meshflow/runtime/executor.h"

namespace meshflow::testing {

std::string RedistributeCase::ToString() const {
  std::string s = mesh.ToString() + " shape [";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "] " + std::string(DTypeName(dtype)) + " " + meshflow::ToString(std::span<const Placement>(from)) +
         " -> " + meshflow::ToString(std::span<const Placement>(to));
}

RedistributeCaseGenerator::RedistributeCaseGenerator(uint32_t seed, std::vector<std::vector<int64_t>> mesh_shapes)
    : rng_(seed), mesh_shapes_(std::move(mesh_shapes)) {}

int RedistributeCaseGenerator::Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

std::vector<int64_t> RedistributeCaseGenerator::Shape() {
  std::vector<int64_t> s(static_cast<size_t>(Uniform(1, 4)));
  for (int64_t& d : s) d = Uniform(0, s.size() >= 3 ? 5 : 9);
  return s;
}

Placements RedistributeCaseGenerator::RandomPlacements(int mesh_ndim, int tensor_rank, ReduceOp op,
                                                       bool allow_partial) {
  Placements p;
  for (int m = 0; m < mesh_ndim; ++m) {
    const int k = Uniform(0, allow_partial ? 5 : 4);
    if (k <= 2) {
      p.push_back(Shard{Uniform(0, tensor_rank - 1)});
    } else if (k <= 4) {
      p.push_back(Replicate{});
    } else {
      p.push_back(Partial{op});
    }
  }
  return p;
}

ShardOrder RedistributeCaseGenerator::RandomOrder(const Placements& p, int tensor_rank) {
  ShardOrder order(static_cast<size_t>(tensor_rank));
  for (size_t m = 0; m < p.size(); ++m) {
    if (IsShard(p[m])) order[std::get<Shard>(p[m]).dim].push_back(static_cast<int>(m));
  }
  for (auto& o : order) std::shuffle(o.begin(), o.end(), rng_);
  return order;
}

RedistributeCase RedistributeCaseGenerator::Next() {
  static const DType kTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
  static const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  DeviceMesh mesh =
      *DeviceMesh::Create(mesh_shapes_[static_cast<size_t>(Uniform(0, static_cast<int>(mesh_shapes_.size()) - 1))]);
  std::vector<int64_t> shape = Shape();
  const int rank = static_cast<int>(shape.size());
  const ReduceOp op = kOps[Uniform(0, 3)];
  const bool partial = Uniform(0, 2) == 0;
  Placements from = RandomPlacements(mesh.ndim(), rank, op, partial);
  Placements to = RandomPlacements(mesh.ndim(), rank, op, partial && Uniform(0, 1) == 0);
  ShardOrder fo = RandomOrder(from, rank), to_o = RandomOrder(to, rank);
  return RedistributeCase{mesh, shape, kTypes[Uniform(0, 4)], from, to, fo, to_o};
}

Tensor GlobalFor(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i * 7) % 97) - 40);
  return t;
}

std::string PlanCase(const RedistributeCase& c, PlannerKind planner, std::optional<PlannedCase>* planned) {
  planned->reset();
  auto from = Layout::Create(c.shape, c.mesh, c.from, c.from_order);
  auto to = Layout::Create(c.shape, c.mesh, c.to, c.to_order);
  if (!from.ok() || !to.ok()) return "bad generated layout: " + from.status().ToString() + to.status().ToString();
  RedistributeOptions options;
  options.planner = planner;
  auto plan = PlanFor(*from, *to, c.dtype, options);
  if (!plan.ok()) {
    // Expected refusals (identical on every rank): greedy with explicit shard orders, direct from
    // Partial sources; Partial -> Partial of the other op never happens (one op per case).
    if (planner == PlannerKind::kOptimal) return "optimal planner failed: " + plan.status().ToString();
    return "";
  }
  const Plan& p = **plan;
  if (p.lower_bound_bytes_per_rank && p.max_bytes_received_per_rank < *p.lower_bound_bytes_per_rank) {
    return "plan bytes below the lower bound";
  }
  planned->emplace(PlannedCase{std::move(*from), std::move(*to), std::move(*plan), GlobalFor(c.dtype, c.shape)});
  return "";
}

StatusOr<std::string> CheckRank(const RedistributeCase& c, const PlannedCase& planned, RankContext& ctx) {
  const Plan& p = *planned.plan;
  const Tensor& global = planned.global;
  Communicator& comm = ctx.world();
  const int r = comm.world_rank();
  MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, planned.from, r));
  Tensor local = x.local();
  comm.ResetCounters();
  MF_RETURN_IF_ERROR(ExecutePlan(p, ctx, local));
  const ByteCounters counted = comm.counters();
  MF_ASSIGN_OR_RETURN(DTensor y, DTensor::FromLocal(local, planned.to, r));
  std::string err;
  if (!planned.to.HasPartial()) {
    MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, planned.to, r));
    if (!(local == want)) err = "got " + local.ToString() + " want " + want.ToString();
  }
  const int64_t modelled = p.bytes_received_per_rank.empty() ? 0 : p.bytes_received_per_rank[*c.mesh.IndexOf(r)];
  if (err.empty() && counted.bytes_received != modelled) {
    err = "received " + std::to_string(counted.bytes_received) + " bytes, plan models " + std::to_string(modelled);
  }
  MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
  if (err.empty() && !(full == global)) err = "FullTensor differs: " + full.ToString();
  return err;
}

}  // namespace meshflow::testing
