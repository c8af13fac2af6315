// Training step time under parallel plans vs one rank (autograd/ + train/optimizer.h).
//
// BM_TrainStep/<plan>: one steady-state step (forward, Backward, AdamW Step, ZeroGrad) of a
// 2-layer MLP (x [64,256] -> 1024 -> 256, gelu, MSE) in f32, on the threads world: plan 0 is one
// rank; plans 1-4 are ddp, zero1, fsdp and tp on 4 ranks (same layouts as examples/train_mlp).
// The time is the wall time of the whole world's step (every rank runs it). On a machine with
// fewer cores than ranks the ranks share cores, so compare plans with each other and read the
// single-rank time as the work of the whole batch on one core.
//
//   bazel run --config=opt //bench:train_bench
#include <benchmark/benchmark.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/train/optimizer.h"

namespace meshflow {
namespace {

constexpr int64_t kB = 64, kIn = 256, kHidden = 1024, kOut = 256;

Tensor Values(std::vector<int64_t> shape, uint32_t seed, double scale) {
  Tensor t = Tensor::Zeros(DType::kF32, std::move(shape));
  uint32_t s = seed * 2654435761u + 7u;
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.SetFromDouble(i, scale * (static_cast<double>(s >> 8) / static_cast<double>(1u << 24) * 2.0 - 1.0));
  }
  return t;
}

struct Plan {
  const char* name;
  int ranks;
  Placement batch;
  Placement w1, w2;
  std::optional<Placement> state;  // nullopt: the param's layout
};

Plan PlanFor(int i) {
  const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1};
  switch (i) {
    case 0: return {"single", 1, r, r, r, std::nullopt};
    case 1: return {"ddp", 4, s0, r, r, std::nullopt};
    case 2: return {"zero1", 4, s0, r, r, Placement{s0}};
    case 3: return {"fsdp", 4, s0, s0, s0, std::nullopt};
    default: return {"tp", 4, r, s1, s0, std::nullopt};
  }
}

void BM_TrainStep(benchmark::State& state) {
  const Plan plan = PlanFor(static_cast<int>(state.range(0)));
  const DeviceMesh mesh = *DeviceMesh::Create({plan.ranks}, {"dp"});
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(plan.ranks).value());
  const Tensor x = Values({kB, kIn}, 1, 1.0), y = Values({kB, kOut}, 2, 0.5);
  const Tensor w1 = Values({kIn, kHidden}, 3, 0.06), w2 = Values({kHidden, kOut}, 4, 0.03);
  // Rank 0 drives the benchmark loop and tells the other ranks how many steps to run.
  Status st = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, mesh));
    const int rank = comm.world_rank();
    auto leaf = [&](const Tensor& t, Placement p, bool grad) -> StatusOr<Variable> {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(t.shape(), mesh, {p}));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(t, l, rank));
      return Variable::Leaf(std::move(d), grad);
    };
    MF_ASSIGN_OR_RETURN(Variable xv, leaf(x, plan.batch, false));
    MF_ASSIGN_OR_RETURN(Variable yv, leaf(y, plan.batch, false));
    std::vector<Variable> p;
    MF_ASSIGN_OR_RETURN(Variable p1, leaf(w1, plan.w1, true));
    MF_ASSIGN_OR_RETURN(Variable p2, leaf(w2, plan.w2, true));
    p = {p1, p2};
    std::vector<ParamSpec> specs;
    for (size_t i = 0; i < p.size(); ++i) {
      std::optional<Layout> s;
      if (plan.state) {
        MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(p[i].value().global_shape(), mesh, {*plan.state}));
        s = std::move(l);
      }
      specs.push_back(ParamSpec{i == 0 ? "w1" : "w2", p[i].mutable_leaf_value(), std::move(s)});
    }
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(std::move(specs), AdamWOptions{}, comms));
    auto step = [&]() -> Status {
      MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(xv, p[0], comms));
      MF_ASSIGN_OR_RETURN(Variable a, autograd::Gelu(h, comms));
      MF_ASSIGN_OR_RETURN(Variable o, autograd::Matmul(a, p[1], comms));
      MF_ASSIGN_OR_RETURN(Variable d, autograd::Sub(o, yv, comms));
      MF_ASSIGN_OR_RETURN(Variable sq, autograd::Mul(d, d, comms));
      MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(sq, {}, false, comms));
      MF_RETURN_IF_ERROR(Backward(loss, comms));
      const DTensor* grads[2] = {&*p[0].grad(), &*p[1].grad()};
      MF_RETURN_IF_ERROR(opt->Step(grads, comms));
      p[0].ZeroGrad();
      p[1].ZeroGrad();
      return Status::Ok();
    };
    MF_RETURN_IF_ERROR(step());  // warm-up: strategy choice and plans are cached after it
    int64_t go = 1;
    while (true) {
      if (rank == 0) go = state.KeepRunning() ? 1 : 0;
      MF_RETURN_IF_ERROR(comm.Broadcast(&go, 1, DType::kI64, 0));
      if (go == 0) break;
      MF_RETURN_IF_ERROR(step());
    }
    return Status::Ok();
  });
  if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  state.SetLabel(std::string(plan.name) + " x" + std::to_string(plan.ranks));
}
BENCHMARK(BM_TrainStep)->DenseRange(0, 4)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
