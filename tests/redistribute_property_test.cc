// Property test: random (mesh, shape, dtype, source layout, target layout) cases, every planner,
// executed on the in-process world. Every rank's result is compared with the reference computed
// from the global tensor alone:
//   - Partial-free targets: the local shard is bit-exact equal to the global tensor's box slice;
//   - Partial targets: FullTensor (which reduces) equals the global tensor;
// and the bytes each rank received (backend byte counters) equal the plan's modelled bytes, which
// are never below the lower bound.
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/dtensor_api.h"
#include "collectives/executor.h"
#include "collectives/mesh_comms.h"
#include "collectives/threads_world.h"
#include "dtensor/dtensor.h"

namespace meshflow {
namespace {

struct Case {
  DeviceMesh mesh;
  std::vector<int64_t> shape;
  DType dtype;
  Placements from, to;
  ShardOrder from_order, to_order;
  std::string ToString() const {
    std::string s = mesh.ToString() + " shape [";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "] " + std::string(DTypeName(dtype)) + " " + meshflow::ToString(std::span<const Placement>(from)) +
           " -> " + meshflow::ToString(std::span<const Placement>(to));
  }
};

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  DeviceMesh Mesh() {
    static const std::vector<std::vector<int64_t>> kShapes = {
        {1}, {2}, {3}, {4}, {5}, {8}, {1, 2}, {2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}, {1, 4},
        {2, 2, 2}, {2, 1, 3}, {1, 2, 2}, {2, 2, 1}};
    return *DeviceMesh::Create(kShapes[Uniform(0, static_cast<int>(kShapes.size()) - 1)]);
  }

  std::vector<int64_t> Shape() {
    std::vector<int64_t> s(static_cast<size_t>(Uniform(1, 4)));
    for (int64_t& d : s) d = Uniform(0, s.size() >= 3 ? 5 : 9);
    return s;
  }

  Placements RandomPlacements(int mesh_ndim, int tensor_rank, ReduceOp op, bool allow_partial) {
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

  ShardOrder RandomOrder(const Placements& p, int tensor_rank) {
    ShardOrder order(static_cast<size_t>(tensor_rank));
    for (size_t m = 0; m < p.size(); ++m) {
      if (IsShard(p[m])) order[std::get<Shard>(p[m]).dim].push_back(static_cast<int>(m));
    }
    for (auto& o : order) std::shuffle(o.begin(), o.end(), rng_);
    return order;
  }

  Case Next() {
    static const DType kTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
    static const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
    DeviceMesh mesh = Mesh();
    std::vector<int64_t> shape = Shape();
    const int rank = static_cast<int>(shape.size());
    const ReduceOp op = kOps[Uniform(0, 3)];
    const bool partial = Uniform(0, 2) == 0;
    Placements from = RandomPlacements(mesh.ndim(), rank, op, partial);
    Placements to = RandomPlacements(mesh.ndim(), rank, op, partial && Uniform(0, 1) == 0);
    ShardOrder fo = RandomOrder(from, rank), to_o = RandomOrder(to, rank);
    return Case{mesh, shape, kTypes[Uniform(0, 4)], from, to, fo, to_o};
  }

 private:
  std::mt19937 rng_;
};

// Small integers so that every sum/avg is exact in every dtype (bf16 holds integers <= 256).
Tensor GlobalFor(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i * 7) % 97) - 40);
  return t;
}

ThreadWorld& WorldOf(int n) {
  static std::map<int, std::unique_ptr<ThreadWorld>>* worlds = new std::map<int, std::unique_ptr<ThreadWorld>>();
  auto& w = (*worlds)[n];
  if (!w) w = std::move(ThreadWorld::Create(n).value());
  return *w;
}

// Runs one case with one planner; returns a description of the first failure, or "".
std::string RunCase(const Case& c, PlannerKind planner) {
  auto from = Layout::Create(c.shape, c.mesh, c.from, c.from_order);
  auto to = Layout::Create(c.shape, c.mesh, c.to, c.to_order);
  if (!from.ok() || !to.ok()) return "bad generated layout: " + from.status().ToString() + to.status().ToString();
  RedistributeOptions options;
  options.planner = planner;
  auto plan = PlanFor(*from, *to, c.dtype, options);
  if (!plan.ok()) {
    // Expected refusals: greedy with explicit shard orders, direct from Partial sources, and
    // Partial -> Partial of the other op never happens here (one op per case).
    if (planner == PlannerKind::kOptimal) return "optimal planner failed: " + plan.status().ToString();
    return "";
  }
  const Plan& p = **plan;
  if (p.lower_bound_bytes_per_rank && p.max_bytes_received_per_rank < *p.lower_bound_bytes_per_rank) {
    return "plan bytes below the lower bound";
  }
  const Tensor global = GlobalFor(c.dtype, c.shape);
  ThreadWorld& world = WorldOf(c.mesh.size());
  world.ResetCounters();
  std::mutex mu;
  std::string failure;
  Status run = world.Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, c.mesh));
    const int r = comm.world_rank();
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, *from, r));
    Tensor local = x.local();
    MF_RETURN_IF_ERROR(ExecutePlan(p, comms, local));
    const ByteCounters counted = comm.counters();
    MF_ASSIGN_OR_RETURN(DTensor y, DTensor::FromLocal(local, *to, r));
    std::string err;
    if (!to->HasPartial()) {
      MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, *to, r));
      if (!(local == want)) err = "rank " + std::to_string(r) + " got " + local.ToString() + " want " + want.ToString();
    }
    const int64_t modelled = p.bytes_received_per_rank.empty() ? 0 : p.bytes_received_per_rank[*c.mesh.IndexOf(r)];
    if (err.empty() && counted.bytes_received != modelled) {
      err = "rank " + std::to_string(r) + " received " + std::to_string(counted.bytes_received) +
            " bytes, plan models " + std::to_string(modelled);
    }
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, comms));
    if (err.empty() && !(full == global)) err = "rank " + std::to_string(r) + " FullTensor differs: " + full.ToString();
    if (!err.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) failure = err;
    }
    return Status();
  });
  if (!run.ok()) return "run failed: " + run.ToString();
  return failure;
}

TEST(RedistributePropertyTest, RandomCasesMatchReference) {
  Generator gen(20261203);
  constexpr int kCases = 1500;
  int failures = 0;
  for (int i = 0; i < kCases && failures < 10; ++i) {
    const Case c = gen.Next();
    for (PlannerKind planner : {PlannerKind::kOptimal, PlannerKind::kGreedy, PlannerKind::kDirect}) {
      const std::string f = RunCase(c, planner);
      if (!f.empty()) {
        ++failures;
        ADD_FAILURE() << "case " << i << " " << c.ToString() << " planner " << PlannerKindName(planner) << ": " << f;
      }
    }
  }
}

TEST(RedistributePropertyTest, PartialToOtherPartialIsAnError) {
  DeviceMesh mesh = *DeviceMesh::Create({2});
  Layout from = *Layout::Create({4}, mesh, {Partial{ReduceOp::kSum}});
  Layout to = *Layout::Create({4}, mesh, {Partial{ReduceOp::kMax}});
  auto plan = PlanFor(from, to, DType::kF32);
  EXPECT_FALSE(plan.ok());
}

}  // namespace
}  // namespace meshflow
