// Every example in optim/optimizer.h, train/compiled_step.h and train/checkpointer.h is compiled (and run) here; keep
// them identical.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/train/checkpointer.h"
#include "meshflow/train/compiled_step.h"
#include "meshflow/optim/optimizer.h"

namespace meshflow {
namespace {

// optim/optimizer.h
Status OptimizerExample(const DeviceMesh& mesh, DTensor& w, const DTensor& grad_w, RankContext& ctx) {
  // 4 thread ranks, mesh {4} named "dp"; w is replicated, its AdamW state sharded (ZeRO-1).
  MF_ASSIGN_OR_RETURN(Layout zero, Layout::Create({8, 4}, mesh, {Shard{0}}));
  std::vector<ParamSpec> specs = {{"w", &w, zero}};
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(specs, AdamWOptions{}, ctx));
  std::vector<const DTensor*> grads = {&grad_w};   // e.g. Partial(sum) over dp
  MF_RETURN_IF_ERROR(opt->Step(grads, ctx));       // reduce-scatter, update, all-gather
  return Status::Ok();
}

TEST(TrainDocTest, OptimizerExample) {
  auto world = ThreadWorld::Create(4);
  ASSERT_TRUE(world.ok());
  const DeviceMesh mesh = *DeviceMesh::Create({4}, {"dp"});
  Tensor w0 = Tensor::Zeros(DType::kF32, {8, 4});
  Tensor g0 = Tensor::Zeros(DType::kF32, {8, 4});
  for (int64_t i = 0; i < 32; ++i) {
    w0.SetFromDouble(i, 0.1 * static_cast<double>(i));
    g0.SetFromDouble(i, 1.0);
  }
  std::vector<Tensor> after(4, Tensor::Zeros(DType::kF32, {}));
  const Status st = (*world)->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.world_rank();
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(w0, *Layout::Create({8, 4}, mesh, {Replicate{}}), rank));
    // Every rank's part of a Partial(sum) gradient: the full gradient is 4 * g0 / 4 = g0.
    Tensor part = g0;
    for (int64_t i = 0; i < 32; ++i) part.SetFromDouble(i, 0.25);
    MF_ASSIGN_OR_RETURN(DTensor grad_w,
                        DTensor::FromLocal(part, *Layout::Create({8, 4}, mesh, {Partial{ReduceOp::kSum}}), rank));
    MF_RETURN_IF_ERROR(OptimizerExample(mesh, w, grad_w, ctx));
    after[static_cast<size_t>(rank)] = w.local();
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
  // AdamW's first step moves every element by lr (1e-3) against the gradient's sign, after the
  // decoupled weight decay (1e-2 * lr); every rank holds the same replicated result.
  for (int64_t i = 0; i < 32; ++i) {
    const double p = 0.1 * static_cast<double>(i);
    EXPECT_NEAR(after[0].GetAsDouble(i), p * (1 - 1e-3 * 1e-2) - 1e-3, 1e-6);
    for (int r = 1; r < 4; ++r) EXPECT_EQ(after[static_cast<size_t>(r)].GetAsDouble(i), after[0].GetAsDouble(i));
  }
}

// train/compiled_step.h
Status CompiledStepExample(Graph& g, ValueId sq, ValueId w1, ValueId w2, std::vector<DTensor> my_params,
                           const std::vector<DTensor>& batch, RankContext& ctx, double* out) {
  MF_ASSIGN_OR_RETURN(ValueId loss, g.Apply(OpSpec::Reduce(ReduceKind::kMean, {}, false), {sq}, "loss"));
  TrainStepSpec spec{.loss = loss, .params = {w1, w2}, .optimizer = AdamWOptions{.lr = 1e-2}};
  MF_ASSIGN_OR_RETURN(CompiledTrainStep compiled, CompileTrainStep(g, spec));
  std::printf("%s", compiled.ToText().c_str());
  auto shared = std::make_shared<const CompiledTrainStep>(std::move(compiled));
  // On every rank: its parts of the initial params, then one Step per batch.
  MF_ASSIGN_OR_RETURN(TrainStepRunner runner, TrainStepRunner::Create(shared, std::move(my_params)));
  MF_ASSIGN_OR_RETURN(double loss_value, runner.Step(batch, ctx));
  *out = loss_value;
  return Status::Ok();
}

TEST(TrainDocTest, CompiledStepExample) {
  auto world = ThreadWorld::Create(2);
  ASSERT_TRUE(world.ok());
  const DeviceMesh mesh = *DeviceMesh::Create({2}, {"dp"});
  std::vector<double> losses(2, -1);
  const Status st = (*world)->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.world_rank();
    // x [4,3] (batch-sharded) -> matmul w1 [3,5] -> tanh -> matmul w2 [5,2]; sq = square.
    Graph g(mesh);
    MF_ASSIGN_OR_RETURN(ValueId x, g.Input("x", {4, 3}, DType::kF32));
    MF_ASSIGN_OR_RETURN(ValueId w1, g.Param("w1", {3, 5}, DType::kF32));
    MF_ASSIGN_OR_RETURN(ValueId w2, g.Param("w2", {5, 2}, DType::kF32));
    MF_RETURN_IF_ERROR(g.Annotate(x, "S(0)"));
    MF_RETURN_IF_ERROR(g.Annotate(w1, "R"));
    MF_RETURN_IF_ERROR(g.Annotate(w2, "R"));
    MF_ASSIGN_OR_RETURN(ValueId h, g.Apply(OpSpec::Matmul(), {x, w1}));
    MF_ASSIGN_OR_RETURN(ValueId a, g.Apply(OpSpec::Unary(UnaryOp::kTanh), {h}));
    MF_ASSIGN_OR_RETURN(ValueId y, g.Apply(OpSpec::Matmul(), {a, w2}));
    MF_ASSIGN_OR_RETURN(ValueId sq, g.Apply(OpSpec::Binary(BinaryOp::kMul), {y, y}));
    Tensor x0 = Tensor::Zeros(DType::kF32, {4, 3}), a0 = Tensor::Zeros(DType::kF32, {3, 5}),
           b0 = Tensor::Zeros(DType::kF32, {5, 2});
    for (int64_t i = 0; i < 12; ++i) x0.SetFromDouble(i, 0.1 * static_cast<double>(i) - 0.5);
    for (int64_t i = 0; i < 15; ++i) a0.SetFromDouble(i, 0.05 * static_cast<double>(i % 7) - 0.1);
    for (int64_t i = 0; i < 10; ++i) b0.SetFromDouble(i, 0.1 * static_cast<double>(i % 4) - 0.15);
    const Layout rl1 = *Layout::Create({3, 5}, mesh, {Replicate{}}), rl2 = *Layout::Create({5, 2}, mesh, {Replicate{}});
    std::vector<DTensor> params = {*Distribute(a0, rl1, rank), *Distribute(b0, rl2, rank)};
    std::vector<DTensor> batch = {*Distribute(x0, *Layout::Create({4, 3}, mesh, {Shard{0}}), rank)};
    return CompiledStepExample(g, sq, w1, w2, std::move(params), batch, ctx, &losses[static_cast<size_t>(rank)]);
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_GT(losses[0], 0);
  EXPECT_EQ(losses[0], losses[1]);
}

// train/checkpointer.h
Status CheckpointerExample(const std::string& root, Communicator& world, const DeviceMesh& mesh, const DTensor& w,
                           const std::string& loader_state) {
  MF_ASSIGN_OR_RETURN(auto ckpt, CheckpointManager::Create({.root = root, .keep_last = 2}, world, mesh));
  MF_ASSIGN_OR_RETURN(std::optional<TrainCheckpoint> last, LatestCheckpoint(root));  // resume from it
  for (int64_t step = 1; step <= 100; ++step) {
    // ... one training step ...
    if (step % 50 == 0) MF_RETURN_IF_ERROR(ckpt->Save(step, {{"w", &w}}, loader_state));  // returns at once
  }
  MF_RETURN_IF_ERROR(ckpt->Wait());   // before exiting: the last save's result
  EXPECT_FALSE(last.has_value());
  return Status::Ok();
}

TEST(TrainDocTest, CheckpointerExample) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp ? tmp : "/tmp") + "/doc_ckpt";
  auto world = ThreadWorld::Create(2);
  ASSERT_TRUE(world.ok());
  const DeviceMesh mesh = *DeviceMesh::Create({2}, {"dp"});
  const Status st = (*world)->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(Tensor::Iota(DType::kF32, {4, 2}), *Layout::Create({4, 2}, mesh, {Shard{0}}),
                                              comm.world_rank()));
    return CheckpointerExample(root, comm, mesh, w, "loader state");
  });
  ASSERT_TRUE(st.ok()) << st;
  StatusOr<std::optional<TrainCheckpoint>> last = LatestCheckpoint(root);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->step, 100);
}

}  // namespace
}  // namespace meshflow
