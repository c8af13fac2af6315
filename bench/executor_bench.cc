// Executor throughput on the in-process world against memcpy of the same bytes, in one run.
//
//   bazel run --config=opt //bench:executor_bench
//
// Each timed op redistributes an f32 tensor on a 4-rank world ([S(0)] -> [S(1)] all-to-all on
// a 1-D mesh, and [S(0)] -> [R] all-gather); bytes_per_second counts the bytes every rank
// receives. BM_Memcpy copies the same total bytes with one thread, the bandwidth ceiling of a
// shared-memory transfer on this machine.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "meshflow/collectives/dtensor_api.h"
#include "meshflow/collectives/executor.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"

namespace meshflow {
namespace {

constexpr int kRanks = 4;

void RunRedistribute(benchmark::State& state, const Placements& from_p, const Placements& to_p, int64_t cols = 256) {
  const int64_t n = state.range(0);  // rows of an n x cols f32 tensor
  constexpr int kReps = 16;          // redistributions per world->Run (amortizes thread start)
  DeviceMesh mesh = *DeviceMesh::Create({kRanks});
  Layout from = *Layout::Create({n, cols}, mesh, from_p);
  Layout to = *Layout::Create({n, cols}, mesh, to_p);
  std::shared_ptr<const Plan> plan = *PlanFor(from, to, DType::kF32);
  const Tensor global = Tensor::Iota(DType::kF32, {n, cols});
  auto world = std::move(ThreadWorld::Create(kRanks).value());
  for (auto _ : state) {
    double seconds = 0;
    Status s = world->Run([&](Communicator& comm) -> Status {
      MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, mesh));
      MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, comm.world_rank()));
      MF_RETURN_IF_ERROR(comm.Barrier());
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kReps; ++i) {
        Tensor local = x.local();
        MF_RETURN_IF_ERROR(ExecutePlan(*plan, comms, local));
      }
      MF_RETURN_IF_ERROR(comm.Barrier());
      if (comm.rank() == 0) seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return Status();
    });
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    state.SetIterationTime(seconds / kReps);
  }
  int64_t bytes = 0;
  for (int64_t b : plan->bytes_received_per_rank) bytes += b;
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["bytes_per_op"] = static_cast<double>(bytes);
}

void BM_AllToAll(benchmark::State& state) { RunRedistribute(state, {Shard{0}}, {Shard{1}}); }
void BM_AllGather(benchmark::State& state) { RunRedistribute(state, {Shard{0}}, {Replicate{}}); }
BENCHMARK(BM_AllToAll)->RangeMultiplier(4)->Range(64, 16384)->UseManualTime()->Unit(benchmark::kMicrosecond);
// The same bytes as a square-ish n x 2048 tensor (bench/comm's redistribute shape at 16 MiB).
void BM_AllToAllWide(benchmark::State& state) { RunRedistribute(state, {Shard{0}}, {Shard{1}}, 2048); }
BENCHMARK(BM_AllToAllWide)->Arg(2048)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllGather)->RangeMultiplier(4)->Range(64, 16384)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_Memcpy(benchmark::State& state) {
  // Same bytes as BM_AllGather's total received: (k-1)/k of the tensor on each of k ranks.
  const int64_t bytes = state.range(0) * 256 * 4 * (kRanks - 1);
  std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(64, 16384)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
