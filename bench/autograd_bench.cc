// Autograd bookkeeping on top of eager dispatch (autograd/variable.h).
//
// BM_Op/eager:    one eager op (runtime/eager.h RunOp: add of two f32 [2,2], 1-rank world).
// BM_Op/autograd: the same op through autograd::Add on Variables that require a gradient
//                 (RunOp + recording the node). The difference is the per-op bookkeeping
//                 (target < 1 us).
// BM_Backward:    Backward of sum(x + w) (two recorded ops, three VJP ops, one accumulation).
//
//   bazel run -c opt //bench:autograd_bench
#include <benchmark/benchmark.h>

#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/runtime/eager.h"

namespace meshflow {
namespace {

DTensor Tiny(const DeviceMesh& mesh) {
  return *Distribute(Tensor::Iota(DType::kF32, {2, 2}), *Layout::Create({2, 2}, mesh, {Replicate{}}), 0);
}

template <typename Body>
void OnOneRank(benchmark::State& state, Body body) {
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(1).value());
  const DeviceMesh mesh = *DeviceMesh::Create({1});
  Status st = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return body(ctx, mesh);
  });
  if (!st.ok()) state.SkipWithError(st.ToString().c_str());
}

void BM_Op(benchmark::State& state) {
  const bool autograd = state.range(0) == 1;
  OnOneRank(state, [&](RankContext& ctx, const DeviceMesh& mesh) -> Status {
    const DTensor a = Tiny(mesh), b = Tiny(mesh);
    MF_ASSIGN_OR_RETURN(Variable va, Variable::Leaf(a, true));
    MF_ASSIGN_OR_RETURN(Variable vb, Variable::Leaf(b, true));
    const DTensor* in[2] = {&a, &b};
    const OpSpec add = OpSpec::Binary(BinaryOp::kAdd);
    for (auto _ : state) {
      if (autograd) {
        auto y = autograd::Add(va, vb, ctx);
        benchmark::DoNotOptimize(y);
      } else {
        auto y = RunOp(add, in, ctx);
        benchmark::DoNotOptimize(y);
      }
    }
    return Status::Ok();
  });
  state.SetLabel(autograd ? "autograd" : "eager");
}
BENCHMARK(BM_Op)->Arg(0)->Arg(1);

void BM_Backward(benchmark::State& state) {
  OnOneRank(state, [&](RankContext& ctx, const DeviceMesh& mesh) -> Status {
    MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(Tiny(mesh), false));
    MF_ASSIGN_OR_RETURN(Variable w, Variable::Leaf(Tiny(mesh), true));
    for (auto _ : state) {
      state.PauseTiming();
      MF_ASSIGN_OR_RETURN(Variable s, autograd::Add(x, w, ctx));
      MF_ASSIGN_OR_RETURN(Variable loss, autograd::Sum(s, {}, false, ctx));
      w.ZeroGrad();
      state.ResumeTiming();
      MF_RETURN_IF_ERROR(Backward(loss, ctx));
    }
    return Status::Ok();
  });
}
BENCHMARK(BM_Backward);

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
