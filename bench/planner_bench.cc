// Planner benchmarks: optimal search uncached vs cached, greedy reference, for 1-D..4-D meshes.
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
