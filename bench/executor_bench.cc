// Executor throughput on the in-process world against memcpy of the same bytes, in one run.
//
//   bazel run --config=opt //bench:executor_bench -- --benchmark_min_time=0.2
//
// Each timed op redistributes an f32 n x cols tensor on a 4-rank world ([S(0)] -> [S(1)]
// all-to-all on a 1-D mesh, and [S(0)] -> [R] all-gather). bytes_per_second counts the bytes
// every rank receives (the plan's bytes_received_per_rank, summed: the bytes that must move).
//
// Steady state: every world->Run first runs kWarmup redistributions on the same RankContext (its
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
#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "meshflow/bench/memcpy_bandwidth.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/send_recv_cache.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/planner/direct.h"

namespace meshflow {
namespace {

constexpr int kRanks = 4;

int64_t PageFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_minflt) + static_cast<int64_t>(u.ru_majflt);
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
      MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
      MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, comm.world_rank()));
      Tensor local = x.local();
      for (int i = 0; i < kWarmup; ++i) {
        local = x.local();
        MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, local));
      }
      MF_RETURN_IF_ERROR(comm.Barrier());
      const int64_t f0 = PageFaults();
      double t = 0;
      for (int i = 0; i < kReps; ++i) {
        local = x.local();  // copy-assign: reuses local's capacity
        MF_RETURN_IF_ERROR(comm.Barrier());
        const auto t0 = std::chrono::steady_clock::now();
        MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, local));
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

// ---- send_recv bookkeeping of one rank (planner/direct.h, runtime/send_recv_cache.h) ----
//
//   bazel run --config=opt //bench:executor_bench -- --benchmark_filter='SendRecv'
//
// Args: mesh (0: 2x2x2 = 8 ranks, 1: 8x8x8 = 512, 2: 16x16x8 = 2048), case (0: S(0),S(1),S(2) ->
// S(2),S(1),S(0); 1: S(0),S(0),S(0) -> S(1),S(1),S(1)), shape (0: [4096, 4096, 64]; 1: uneven
// [4093, 4099, 61]). Times what one rank computes for a send_recv step, without running the world:
//   BM_SendRecvOneRank    DirectPiecesOfRank for one rank (the executor's cache miss: flat
//                         pieces, no allocation per piece)
//   BM_SendRecvOneRankBoxes  DirectTransfersOfRank for one rank (the same, one Box per transfer:
//                         what the executor built before)
//   BM_SendRecvWorld      DirectTransfers of the whole world (what every rank computed before)
//   BM_SendRecvCacheHit   SendRecvCache::Find of the step (what a repeated execution costs)
// Counter `transfers`: the rank's sends + receives (the peers it exchanges with).

struct SendRecvCase {
  Layout from, to;
  int rank;  // an interior rank: mesh index size/2 + 3 (mod size)
};

SendRecvCase MakeSendRecvCase(const benchmark::State& state) {
  static const std::vector<std::vector<int64_t>> kMeshes = {{2, 2, 2}, {8, 8, 8}, {16, 16, 8}};
  static const std::vector<std::vector<int64_t>> kShapes = {{4096, 4096, 64}, {4093, 4099, 61}};
  const DeviceMesh mesh = *DeviceMesh::Create(kMeshes[static_cast<size_t>(state.range(0))]);
  const std::vector<int64_t>& shape = kShapes[static_cast<size_t>(state.range(2))];
  const Placements from = state.range(1) == 0 ? Placements{Shard{0}, Shard{1}, Shard{2}}
                                              : Placements{Shard{0}, Shard{0}, Shard{0}};
  const Placements to = state.range(1) == 0 ? Placements{Shard{2}, Shard{1}, Shard{0}}
                                            : Placements{Shard{1}, Shard{1}, Shard{1}};
  return SendRecvCase{*Layout::Create(shape, mesh, from), *Layout::Create(shape, mesh, to),
                      mesh.ranks()[static_cast<size_t>((mesh.size() / 2 + 3) % mesh.size())]};
}

void SendRecvArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"mesh", "case", "shape"});
  for (int64_t shape : {0, 1}) {
    for (int64_t c : {0, 1}) {
      for (int64_t m : {0, 1, 2}) b->Args({m, c, shape});
    }
  }
}

// glibc gives freed memory at the top of the heap back to the kernel once more than 128 KiB of it
// is free (M_TRIM_THRESHOLD), so a loop that builds and frees the ~0.2 MB of a 2048-rank all-to-all
// faults it in again on every iteration (several us per fault on a VM) and times the allocator; the
// executor builds a schedule once and keeps it in its SendRecvCache. This benchmark raises the
// threshold while it runs (restored after); `faults_per_op` shows what is left.
void BM_SendRecvOneRank(benchmark::State& state) {
  const SendRecvCase c = MakeSendRecvCase(state);
  size_t transfers = 0;
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  const int64_t faults_before = PageFaults();
  for (auto _ : state) {
    StatusOr<RankPieces> p = DirectPiecesOfRank(c.from, c.to, c.rank);
    transfers = p->sends.size() + p->recvs.size();
    benchmark::DoNotOptimize(p);
  }
  state.counters["faults_per_op"] =
      static_cast<double>(PageFaults() - faults_before) / static_cast<double>(std::max<int64_t>(1, state.iterations()));
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
  state.counters["transfers"] = static_cast<double>(transfers);
}
BENCHMARK(BM_SendRecvOneRank)->Apply(SendRecvArgs)->Unit(benchmark::kMicrosecond);

void BM_SendRecvOneRankBoxes(benchmark::State& state) {
  const SendRecvCase c = MakeSendRecvCase(state);
  size_t transfers = 0;
  for (auto _ : state) {
    StatusOr<std::vector<Transfer>> t = DirectTransfersOfRank(c.from, c.to, c.rank);
    transfers = t->size();
    benchmark::DoNotOptimize(t);
  }
  state.counters["transfers"] = static_cast<double>(transfers);
}
BENCHMARK(BM_SendRecvOneRankBoxes)->Apply(SendRecvArgs)->Unit(benchmark::kMicrosecond);

void BM_SendRecvWorld(benchmark::State& state) {
  const SendRecvCase c = MakeSendRecvCase(state);
  size_t transfers = 0;
  for (auto _ : state) {
    StatusOr<std::vector<Transfer>> t = DirectTransfers(c.from, c.to);
    transfers = static_cast<size_t>(std::count_if(t->begin(), t->end(), [&](const Transfer& x) {
      return x.src_rank == c.rank || x.dst_rank == c.rank;
    }));
    benchmark::DoNotOptimize(t);
  }
  state.counters["transfers"] = static_cast<double>(transfers);
}
// ~0.5 s per call at 2048 ranks: few iterations.
BENCHMARK(BM_SendRecvWorld)->Apply(SendRecvArgs)->Iterations(3)->Unit(benchmark::kMicrosecond);

void BM_SendRecvCacheHit(benchmark::State& state) {
  const SendRecvCase c = MakeSendRecvCase(state);
  SendRecvCache cache;
  cache.Insert(c.from, c.to, SendRecvSchedule{});
  // The executor looks the step up with the plan's own layouts; equal copies give the same cost.
  for (auto _ : state) benchmark::DoNotOptimize(cache.Find(c.from, c.to));
}
BENCHMARK(BM_SendRecvCacheHit)->Args({2, 0, 0})->Args({2, 1, 1})->ArgNames({"mesh", "case", "shape"});

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
