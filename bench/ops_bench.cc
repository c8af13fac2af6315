// Steady-state dispatch overhead of the eager sharded ops (runtime/eager.h).
//
// BM_Dispatch/<op>: ChooseStrategy on a cache hit: the rule lookup + strategy cache + (cached)
// plans, i.e. everything an op does besides the kernel and the communication. One rank (1-rank
// mesh), tiny tensors. Target < 1 us.
// BM_EagerOp/<op>: the whole op on a 1-rank world (dispatch + tiny kernel + wrapping the result).
// Ops 0-3 (matmul, add, sum, softmax) take S(0) inputs; the others (permute, reshape, layer norm,
// embedding, concat, slice, cross-entropy) take Replicate inputs (ids / targets i64).
// BM_PlanCacheLookup: for comparison, one PlanFor hit in the process-wide PlanCache (string key);
// the dispatch cache stores its plans, so steady-state dispatch does not pay this.
//
//   bazel run -c opt //bench:ops_bench
#include <benchmark/benchmark.h>

#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/ops/kernels.h"

namespace meshflow {
namespace {

OpSpec SpecFor(int which) {
  switch (which) {
    case 0: return OpSpec::Matmul();
    case 1: return OpSpec::Binary(BinaryOp::kAdd);
    case 2: return OpSpec::Reduce(ReduceKind::kSum, {1}, false);
    case 3: return OpSpec::Softmax(-1, false);
    case 4: return OpSpec::Permute({1, 0});
    case 5: return OpSpec::Reshape({4});
    case 6: return OpSpec::LayerNorm(1, true, true);
    case 7: return OpSpec::Embedding();
    case 8: return OpSpec::Concat(0, 3);
    case 9: return OpSpec::Slice(1, 0, 1, 1);
    default: return OpSpec::CrossEntropy(LossReduction::kMean);
  }
}
constexpr int kNumSpecs = 11;

int SpecIndex(const OpSpec& op) {
  for (int i = 0; i < kNumSpecs; ++i) {
    if (SpecFor(i) == op) return i;
  }
  return -1;
}

struct Inputs {
  std::vector<DTensor> tensors;
  std::vector<const DTensor*> ptrs;
};

// Tiny 2x2 f32 operands (norm weight / bias [2]; embedding ids / cross-entropy targets i64 [2]).
Inputs MakeInputs(const OpSpec& op) {
  DeviceMesh mesh = *DeviceMesh::Create({1});
  Inputs in;
  for (int i = 0; i < op.num_operands(); ++i) {
    const bool vec = op.get<NormParams>() != nullptr && i > 0;
    const bool ints = (op.get<EmbeddingParams>() != nullptr || op.get<CrossEntropyParams>() != nullptr) && i == 1;
    const std::vector<int64_t> shape = vec || ints ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 2};
    Tensor t = ints ? Tensor::Zeros(DType::kI64, shape) : Tensor::Iota(DType::kF32, shape);
    // The first four keep their historical S(0) inputs; the others take R so that no 1-rank
    // redistribution (a plan with steps) is timed, only dispatch + kernel + wrapping.
    const Placement p = SpecIndex(op) < 4 ? Placement{Shard{0}} : Placement{Replicate{}};
    in.tensors.push_back(*Distribute(t, *Layout::Create(shape, mesh, {p}), 0));
  }
  for (const DTensor& t : in.tensors) in.ptrs.push_back(&t);
  return in;
}

void BM_Dispatch(benchmark::State& state) {
  const OpSpec op = SpecFor(static_cast<int>(state.range(0)));
  Inputs in = MakeInputs(op);
  if (auto c = ChooseStrategy(op, in.ptrs); !c.ok()) state.SkipWithError(c.status().ToString().c_str());
  for (auto _ : state) {
    auto c = ChooseStrategy(op, in.ptrs);
    benchmark::DoNotOptimize(c);
  }
  state.SetLabel(op.ToString());
}
BENCHMARK(BM_Dispatch)->DenseRange(0, kNumSpecs - 1);

void BM_EagerOp(benchmark::State& state) {
  const OpSpec op = SpecFor(static_cast<int>(state.range(0)));
  Inputs in = MakeInputs(op);
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(1).value());
  Status st = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, *DeviceMesh::Create({1})));
    for (auto _ : state) {
      auto y = RunOp(op, in.ptrs, ctx);
      benchmark::DoNotOptimize(y);
    }
    return Status::Ok();
  });
  if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  state.SetLabel(op.ToString());
}
BENCHMARK(BM_EagerOp)->DenseRange(0, kNumSpecs - 1);

// Local permute kernel on an attention-sized f32 tensor [8,128,16,64] (1 Mi elements): arg 0 is
// the head swap (0,2,1,3) (64-element contiguous runs), arg 1 the last-two-dims transpose
// (element gather). Bytes processed = read + write.
void BM_PermuteKernel(benchmark::State& state) {
  const Tensor x = Tensor::Iota(DType::kF32, {8, 128, 16, 64});
  const std::vector<int> perm = state.range(0) == 0 ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0, 1, 3, 2};
  for (auto _ : state) {
    auto y = PermuteKernel(x, perm);
    benchmark::DoNotOptimize(y);
  }
  state.SetBytesProcessed(state.iterations() * 2 * x.NumBytes());
  state.SetLabel(state.range(0) == 0 ? "perm(0,2,1,3)" : "perm(0,1,3,2)");
}
BENCHMARK(BM_PermuteKernel)->Arg(0)->Arg(1);

void BM_PlanCacheLookup(benchmark::State& state) {
  DeviceMesh mesh = *DeviceMesh::Create({1});
  Layout from = *Layout::Create({2, 2}, mesh, {Shard{0}});
  Layout to = *Layout::Create({2, 2}, mesh, {Replicate{}});
  for (auto _ : state) {
    auto p = PlanFor(from, to, DType::kF32);
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_PlanCacheLookup);

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
