// Executor throughput on the in-process world against memcpy of the same bytes, in one run.
//
//   bazel run --config=opt //bench:executor_bench -- --benchmark_min_time=0.2
//
// Each timed op redistributes an f32 n x cols tensor on a 4-rank world ([S(0)] -> [S(1)]
// all-to-all on a 1-D mesh, and [S(0)] -> [R] all-gather). bytes_per_second counts the bytes
// every rank receives (the plan's bytes_received_per_rank, summed: the bytes that must move).
//
// Steady state: every world->Run first runs kWarmup redistributions on the same MeshComms (its
// step-buffer pool fills), then times kReps of them one by one between barriers. Before each rep
// the source shard is restored into the rank's existing tensor (a copy-assign into capacity it
// already holds, outside the timed part), so a rep touches no page the previous one did not.
// Counters:
//   x_memcpy       op bandwidth / single-thread memcpy bandwidth of the same bytes (measured in
//                  this benchmark, same buffers every time, warm)
//   faults_per_op  minor + major page faults of the process (getrusage) per redistribution over
//                  the timed reps, restores included
// BM_Memcpy copies the all-gather's total bytes with one thread (the same figure as memcpy_GBps).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
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

int64_t PageFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_minflt) + static_cast<int64_t>(u.ru_majflt);
}

// Bytes per second of a single-thread memcpy of `bytes` (warm buffers, best of a few reps).
double MemcpyBandwidth(int64_t bytes) {
  std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes), 0);
  double best = 0;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::max(best, static_cast<double>(bytes) / s);  // rep 0 faults the pages in
  }
  return best;
}

void RunRedistribute(benchmark::State& state, const Placements& from_p, const Placements& to_p, int64_t cols = 256) {
  const int64_t n = state.range(0);  // rows of an n x cols f32 tensor
  constexpr int kWarmup = 3;         // untimed redistributions per world->Run
  constexpr int kReps = 8;           // timed redistributions per world->Run (amortizes thread start)
  DeviceMesh mesh = *DeviceMesh::Create({kRanks});
  Layout from = *Layout::Create({n, cols}, mesh, from_p);
  Layout to = *Layout::Create({n, cols}, mesh, to_p);
  std::shared_ptr<const Plan> plan = *PlanFor(from, to, DType::kF32);
  const Tensor global = Tensor::Iota(DType::kF32, {n, cols});
  auto world = std::move(ThreadWorld::Create(kRanks).value());
  int64_t bytes = 0;
  for (int64_t b : plan->bytes_received_per_rank) bytes += b;
  int64_t faults = 0, timed_ops = 0;
  double op_seconds = 0;
  for (auto _ : state) {
    double seconds = 0;
    Status s = world->Run([&](Communicator& comm) -> Status {
      MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, mesh));
      MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, comm.world_rank()));
      Tensor local = x.local();
      for (int i = 0; i < kWarmup; ++i) {
        local = x.local();
        MF_RETURN_IF_ERROR(ExecutePlan(*plan, comms, local));
      }
      MF_RETURN_IF_ERROR(comm.Barrier());
      const int64_t f0 = PageFaults();
      double t = 0;
      for (int i = 0; i < kReps; ++i) {
        local = x.local();  // copy-assign: reuses local's capacity
        MF_RETURN_IF_ERROR(comm.Barrier());
        const auto t0 = std::chrono::steady_clock::now();
        MF_RETURN_IF_ERROR(ExecutePlan(*plan, comms, local));
        MF_RETURN_IF_ERROR(comm.Barrier());
        t += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      if (comm.rank() == 0) {
        faults += PageFaults() - f0;
        seconds = t;
      }
      return Status();
    });
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    timed_ops += kReps;
    op_seconds += seconds;
    state.SetIterationTime(seconds / kReps);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["bytes_per_op"] = static_cast<double>(bytes);
  const double memcpy_bw = MemcpyBandwidth(bytes);
  state.counters["memcpy_GBps"] = memcpy_bw / 1e9;
  // Op bandwidth over all timed reps.
  state.counters["x_memcpy"] = op_seconds > 0 ? static_cast<double>(bytes) * timed_ops / op_seconds / memcpy_bw : 0.0;
  state.counters["faults_per_op"] = timed_ops ? static_cast<double>(faults) / timed_ops : 0.0;
}

void BM_AllToAll(benchmark::State& state) { RunRedistribute(state, {Shard{0}}, {Shard{1}}); }
void BM_AllGather(benchmark::State& state) { RunRedistribute(state, {Shard{0}}, {Replicate{}}); }
// n = 16384 is a 16 MiB tensor, 65536 a 64 MiB one.
BENCHMARK(BM_AllToAll)->RangeMultiplier(4)->Range(1024, 65536)->UseManualTime()->Unit(benchmark::kMicrosecond);
// The same bytes as a square-ish n x 2048 tensor (bench/comm's redistribute shape at 16 MiB).
void BM_AllToAllWide(benchmark::State& state) { RunRedistribute(state, {Shard{0}}, {Shard{1}}, 2048); }
BENCHMARK(BM_AllToAllWide)->Arg(2048)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllGather)->RangeMultiplier(4)->Range(1024, 65536)->UseManualTime()->Unit(benchmark::kMicrosecond);

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
BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(1024, 65536)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
