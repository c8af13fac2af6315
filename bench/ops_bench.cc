// Steady-state dispatch overhead of the eager sharded ops (ops/eager.h).
//
// BM_Dispatch/<op>: ChooseStrategy on a cache hit: the rule lookup + strategy cache + (cached)
// plans, i.e. everything an op does besides the kernel and the communication. One rank (1-rank
// mesh), tiny tensors. Target < 1 us.
// BM_EagerOp/<op>: the whole op on a 1-rank world (dispatch + tiny kernel + wrapping the result).
// BM_PlanCacheLookup: for comparison, one PlanFor hit in the process-wide PlanCache (string key);
// the dispatch cache stores its plans, so steady-state dispatch does not pay this.
//
//   bazel run -c opt //bench:ops_bench
#include <benchmark/benchmark.h>

#include "collectives/dtensor_api.h"
#include "collectives/mesh_comms.h"
#include "collectives/threads_world.h"
#include "ops/eager.h"

namespace meshflow::ops {
namespace {

OpSpec SpecFor(int which) {
  switch (which) {
    case 0: return OpSpec::Matmul();
    case 1: return OpSpec::Binary(BinaryOp::kAdd);
    case 2: return OpSpec::Reduce(ReduceKind::kSum, {1}, false);
    default: return OpSpec::Softmax(-1, false);
  }
}

struct Inputs {
  std::vector<DTensor> tensors;
  std::vector<const DTensor*> ptrs;
};

Inputs MakeInputs(const OpSpec& op) {
  DeviceMesh mesh = *DeviceMesh::Create({1});
  Layout l = *Layout::Create({2, 2}, mesh, {Shard{0}});
  Inputs in;
  for (int i = 0; i < op.num_operands(); ++i) in.tensors.push_back(*Distribute(Tensor::Iota(DType::kF32, {2, 2}), l, 0));
  for (const DTensor& t : in.tensors) in.ptrs.push_back(&t);
  return in;
}

void BM_Dispatch(benchmark::State& state) {
  const OpSpec op = SpecFor(static_cast<int>(state.range(0)));
  Inputs in = MakeInputs(op);
  if (!ChooseStrategy(op, in.ptrs).ok()) state.SkipWithError("choose failed");
  for (auto _ : state) {
    auto c = ChooseStrategy(op, in.ptrs);
    benchmark::DoNotOptimize(c);
  }
  state.SetLabel(op.ToString());
}
BENCHMARK(BM_Dispatch)->DenseRange(0, 3);

void BM_EagerOp(benchmark::State& state) {
  const OpSpec op = SpecFor(static_cast<int>(state.range(0)));
  Inputs in = MakeInputs(op);
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(1).value());
  Status st = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, *DeviceMesh::Create({1})));
    for (auto _ : state) {
      auto y = RunOp(op, in.ptrs, comms);
      benchmark::DoNotOptimize(y);
    }
    return Status::Ok();
  });
  if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  state.SetLabel(op.ToString());
}
BENCHMARK(BM_EagerOp)->DenseRange(0, 3);

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
}  // namespace meshflow::ops

BENCHMARK_MAIN();
