// Property test of redistribution on the MPI backend (the mpirun twin of
// tests/redistribute_property_test.cc), run by tests/mpi/BUILD.bazel under mpirun -np 4 and 8:
//
//   mpi_redistribute_property_test [CASES] [SEED]
//
// Random (mesh, shape, dtype, source layout, target layout) cases on meshes that cover the world
// (4 ranks: 4, 2x2, 1x4; 8 ranks: 8, 2x4, 2x2x2), every planner. Every rank generates the same cases
// from a fixed seed, plans independently (plans must agree: the backend's header check rejects
// ranks that run different collectives) and compares its own result with the reference computed
// from the global tensor alone:
//   - Partial-free targets: the local shard is bit-exact equal to ReferenceLocal;
//   - every target: FullTensor (which reduces Partial values) equals the global tensor;
//   - the bytes this rank received (MPI byte counters) equal the plan's modelled bytes, which are
//     never below the lower bound.
// Failures are combined over the world; rank 0 prints "N passed, M failed". Exit code 0 iff none.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collectives/dtensor_api.h"
#include "collectives/executor.h"
#include "collectives/mesh_comms.h"
#include "collectives/mpi/mpi_communicator.h"
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
  Generator(uint32_t seed, int world_size) : rng_(seed) {
    if (world_size == 4) {
      shapes_ = {{4}, {2, 2}, {1, 4}};
    } else if (world_size == 8) {
      shapes_ = {{8}, {2, 4}, {2, 2, 2}};
    } else {
      shapes_ = {{world_size}, {1, world_size}};
    }
  }

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

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
    DeviceMesh mesh =
        *DeviceMesh::Create(shapes_[static_cast<size_t>(Uniform(0, static_cast<int>(shapes_.size()) - 1))]);
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
  std::vector<std::vector<int64_t>> shapes_;
};

// Small integers so that every sum/avg is exact in every dtype (bf16 holds integers <= 256).
Tensor GlobalFor(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i * 7) % 97) - 40);
  return t;
}

// Runs one case with one planner on this rank; returns a description of the first failure, or "".
std::string RunCase(const Case& c, PlannerKind planner, MeshComms& comms) {
  auto from = Layout::Create(c.shape, c.mesh, c.from, c.from_order);
  auto to = Layout::Create(c.shape, c.mesh, c.to, c.to_order);
  if (!from.ok() || !to.ok()) return "bad generated layout: " + from.status().ToString() + to.status().ToString();
  RedistributeOptions options;
  options.planner = planner;
  auto plan = PlanFor(*from, *to, c.dtype, options);
  if (!plan.ok()) {
    // Expected refusals (identical on every rank): greedy with explicit shard orders, direct from
    // Partial sources.
    if (planner == PlannerKind::kOptimal) return "optimal planner failed: " + plan.status().ToString();
    return "";
  }
  const Plan& p = **plan;
  if (p.lower_bound_bytes_per_rank && p.max_bytes_received_per_rank < *p.lower_bound_bytes_per_rank) {
    return "plan bytes below the lower bound";
  }
  const Tensor global = GlobalFor(c.dtype, c.shape);
  Communicator& comm = comms.world();
  const int r = comm.world_rank();
  auto run = [&]() -> StatusOr<std::string> {
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, *from, r));
    Tensor local = x.local();
    comm.ResetCounters();
    MF_RETURN_IF_ERROR(ExecutePlan(p, comms, local));
    const ByteCounters counted = comm.counters();
    MF_ASSIGN_OR_RETURN(DTensor y, DTensor::FromLocal(local, *to, r));
    std::string err;
    if (!to->HasPartial()) {
      MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, *to, r));
      if (!(local == want)) err = "got " + local.ToString() + " want " + want.ToString();
    }
    const int64_t modelled = p.bytes_received_per_rank.empty() ? 0 : p.bytes_received_per_rank[*c.mesh.IndexOf(r)];
    if (err.empty() && counted.bytes_received != modelled) {
      err = "received " + std::to_string(counted.bytes_received) + " bytes, plan models " + std::to_string(modelled);
    }
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, comms));
    if (err.empty() && !(full == global)) err = "FullTensor differs: " + full.ToString();
    return err;
  };
  StatusOr<std::string> result = run();
  if (!result.ok()) return "run failed: " + result.status().ToString();
  return *result;
}

int Main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 300;
  const uint32_t seed = argc > 2 ? static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 20261203u;
  MpiFinalizeGuard finalize;
  auto world_or = MpiWorld();
  if (!world_or.ok()) MpiAbort(world_or.status());
  std::shared_ptr<Communicator> world = *world_or;
  const int me = world->rank();

  std::map<std::string, std::unique_ptr<MeshComms>> comms_by_mesh;  // groups are split once per mesh
  Generator gen(seed, world->size());
  std::vector<std::string> names;
  std::vector<int64_t> failed;
  int printed = 0;
  std::map<std::string, double> seconds;  // wall time per (mesh, planner), printed by rank 0
  for (int i = 0; i < cases; ++i) {
    const Case c = gen.Next();
    std::unique_ptr<MeshComms>& comms = comms_by_mesh[c.mesh.ToString()];
    if (comms == nullptr) {
      auto created = MeshComms::Create(world, c.mesh);
      if (!created.ok()) MpiAbort(created.status());
      comms = std::make_unique<MeshComms>(std::move(*created));
    }
    for (PlannerKind planner : {PlannerKind::kOptimal, PlannerKind::kGreedy, PlannerKind::kDirect}) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::string f = RunCase(c, planner, *comms);
      seconds[c.mesh.ToString() + " " + std::string(PlannerKindName(planner))] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      names.push_back("case " + std::to_string(i) + " " + c.ToString() + " planner " +
                      std::string(PlannerKindName(planner)));
      failed.push_back(f.empty() ? 0 : 1);
      if (!f.empty() && printed++ < 10)
        std::fprintf(stderr, "rank %d: FAILED %s: %s\n", me, names.back().c_str(), f.c_str());
    }
  }
  Status s =
      world->AllReduce(failed.data(), failed.data(), static_cast<int64_t>(failed.size()), DType::kI64, ReduceOp::kMax);
  if (!s.ok()) MpiAbort(s);
  int passed = 0, bad = 0;
  for (size_t i = 0; i < failed.size(); ++i) {
    if (failed[i] == 0) {
      ++passed;
    } else if (++bad <= 20 && me == 0) {
      std::printf("FAILED: %s\n", names[i].c_str());
    }
  }
  if (me == 0) {
    for (const auto& [name, secs] : seconds) std::printf("  %-24s %7.2f s\n", name.c_str(), secs);
    std::printf("mpi redistribute property, %d ranks, %d cases x 3 planners, seed %u: %d passed, %d failed\n",
                world->size(), cases, seed, passed, bad);
    std::fflush(stdout);
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
