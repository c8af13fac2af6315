// Planner benchmarks: optimal search uncached vs cached, greedy reference, for 1-D..4-D meshes, and
// the cached lookup and uncached planning against the rank count (8, 512, 2048 ranks).
//
//   bazel run --config=opt //bench:planner_bench
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/greedy_reference.h"
#include "meshflow/planner/plan_cache.h"
#include "meshflow/planner/search.h"

namespace meshflow {
namespace {

struct Problem {
  Layout from, to;
};

// A "transpose the sharding" problem on an ndim mesh of 2s: S(0),S(1),... -> reversed.
Problem MakeProblem(int ndim) {
  std::vector<int64_t> mesh_shape(static_cast<size_t>(ndim), 2);
  DeviceMesh mesh = *DeviceMesh::Create(mesh_shape);
  std::vector<int64_t> shape(static_cast<size_t>(ndim), 64);
  if (ndim == 1) shape = {64, 64};
  Placements from, to;
  const int rank = static_cast<int>(shape.size());
  for (int m = 0; m < ndim; ++m) {
    from.push_back(Shard{m % rank});
    to.push_back(Shard{(rank - 1 - m % rank + rank) % rank});
  }
  if (ndim == 1) to = {Shard{1}};
  return Problem{*Layout::Create(shape, mesh, from), *Layout::Create(shape, mesh, to)};
}

void BM_PlanOptimalUncached(benchmark::State& state) {
  const Problem p = MakeProblem(static_cast<int>(state.range(0)));
  const Topology topo;
  for (auto _ : state) {
    auto plan = PlanRedistribution(p.from, p.to, DType::kF32, topo);
    if (!plan.ok()) state.SkipWithError(plan.status().ToString().c_str());
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_PlanOptimalUncached)->DenseRange(1, 4)->Unit(benchmark::kMicrosecond);

void BM_PlanOptimalCached(benchmark::State& state) {
  const Problem p = MakeProblem(static_cast<int>(state.range(0)));
  const Topology topo;
  PlanCache cache;
  (void)cache.GetOrPlan(p.from, p.to, DType::kF32, topo);
  for (auto _ : state) {
    auto plan = cache.GetOrPlan(p.from, p.to, DType::kF32, topo);
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_PlanOptimalCached)->DenseRange(1, 4)->Unit(benchmark::kNanosecond);

// A cache hit against the rank count: `S(0),S(1),S(2)` -> `S(2),S(1),S(0)` of [64,64,64] on
// 2x2x2 (8 ranks), 8x8x8 (512) and 16x16x8 (2048). The layouts of the lookup are fresh copies of
// separately created (equal) meshes, as a caller re-creating its mesh would pass them: the hit
// must not hash or compare rank lists (DeviceMesh::fingerprint, O(1) mesh equality).
void BM_PlanCachedLookupVsRanks(benchmark::State& state) {
  const std::vector<int64_t> mesh_shape = {state.range(0), state.range(1), state.range(2)};
  auto layouts = [&]() {
    const DeviceMesh mesh = *DeviceMesh::Create(mesh_shape, {"a", "b", "c"});
    return Problem{*Layout::Create({64, 64, 64}, mesh, {Shard{0}, Shard{1}, Shard{2}}),
                   *Layout::Create({64, 64, 64}, mesh, {Shard{2}, Shard{1}, Shard{0}})};
  };
  const Topology topo;
  PlanCache cache;
  {
    const Problem warm = layouts();
    auto plan = cache.GetOrPlan(warm.from, warm.to, DType::kF32, topo);
    if (!plan.ok()) state.SkipWithError(plan.status().ToString().c_str());
  }
  const Problem p = layouts();
  for (auto _ : state) {
    auto plan = cache.GetOrPlan(p.from, p.to, DType::kF32, topo);
    benchmark::DoNotOptimize(plan);
  }
  state.counters["ranks"] = static_cast<double>(mesh_shape[0] * mesh_shape[1] * mesh_shape[2]);
  state.counters["misses"] = static_cast<double>(cache.misses());
}
BENCHMARK(BM_PlanCachedLookupVsRanks)
    ->Args({2, 2, 2})
    ->Args({8, 8, 8})
    ->Args({16, 16, 8})
    ->Unit(benchmark::kNanosecond);

// Uncached optimal planning against the rank count (the planner must not enumerate ranks or rank
// pairs per edge). Cases (arg 0): 0 = `S(0),S(1),S(2)` -> `S(2),S(1),S(0)`, 1 = `S(0),S(0),S(0)`
// -> `S(1),S(1),S(1)`, 2 = `P,S(0),S(1)` -> `S(1),S(0),R` (Partial source), all of [3000,2500,100]
// (uneven on every mesh below) on the mesh (args 1..3): 2x2x2, 8x8x8, 16x16x8; 3 =
// `P,S(0),S(1),S(2)` -> `S(2),S(1),S(0),R` on 2x4x4x8 (256 ranks).
void BM_PlanUncachedVsRanks(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  std::vector<int64_t> mesh_shape = {state.range(1), state.range(2), state.range(3)};
  Placements from, to;
  const Placement p = Partial{ReduceOp::kSum};
  switch (which) {
    case 0:
      from = {Shard{0}, Shard{1}, Shard{2}};
      to = {Shard{2}, Shard{1}, Shard{0}};
      break;
    case 1:
      from = {Shard{0}, Shard{0}, Shard{0}};
      to = {Shard{1}, Shard{1}, Shard{1}};
      break;
    case 2:
      from = {p, Shard{0}, Shard{1}};
      to = {Shard{1}, Shard{0}, Replicate{}};
      break;
    default:
      mesh_shape = {2, 4, 4, 8};
      from = {p, Shard{0}, Shard{1}, Shard{2}};
      to = {Shard{2}, Shard{1}, Shard{0}, Replicate{}};
      break;
  }
  const DeviceMesh mesh = *DeviceMesh::Create(mesh_shape);
  const Layout a = *Layout::Create({3000, 2500, 100}, mesh, from);
  const Layout b = *Layout::Create({3000, 2500, 100}, mesh, to);
  const Topology topo;
  for (auto _ : state) {
    auto plan = PlanRedistribution(a, b, DType::kF32, topo);
    if (!plan.ok()) state.SkipWithError(plan.status().ToString().c_str());
    benchmark::DoNotOptimize(plan);
  }
  state.counters["ranks"] = static_cast<double>(mesh.size());
}
BENCHMARK(BM_PlanUncachedVsRanks)
    ->Args({0, 2, 2, 2})
    ->Args({0, 8, 8, 8})
    ->Args({0, 16, 16, 8})
    ->Args({1, 2, 2, 2})
    ->Args({1, 8, 8, 8})
    ->Args({1, 16, 16, 8})
    ->Args({2, 2, 2, 2})
    ->Args({2, 8, 8, 8})
    ->Args({2, 16, 16, 8})
    ->Args({3, 2, 4, 4})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);

void BM_PlanGreedy(benchmark::State& state) {
  const Problem p = MakeProblem(static_cast<int>(state.range(0)));
  const Topology topo;
  for (auto _ : state) {
    auto plan = PlanGreedy(p.from, p.to, DType::kF32, topo);
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_PlanGreedy)->DenseRange(1, 4)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
