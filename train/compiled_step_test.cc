// The compiled training step (forward + backward + optimizer update in one program): on one rank
// it gives the bits of the eager autograd + Optimizer step; under DDP, ZeRO-1, FSDP, TP and mixed
// layouts on 2, 2x2 and 2x2x2 thread ranks 20 steps end with the one-rank params; the program
// holds the collectives each plan implies and less memory where params or state are sharded; bad
// input is refused, naming the value.
#include "meshflow/train/compiled_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/autograd/functions.h"
#include "meshflow/base/strings.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/ops/test_util.h"

namespace meshflow {
namespace {

using ::meshflow::testing::UniformValues;
using ::meshflow::testing::WorldOf;

// x [12,8] -> matmul w1 [8,16] + b1 -> tanh -> matmul w2 [16,4] -> MSE against y [12,4].
const std::vector<std::vector<int64_t>> kShapes = {{8, 16}, {16}, {16, 4}};
const char* const kNames[] = {"w1", "b1", "w2"};

std::vector<Tensor> Init() { return {UniformValues({8, 16}, 1, 0.35), UniformValues({16}, 2, 0.1), UniformValues({16, 4}, 3, 0.25)}; }
Tensor X() { return UniformValues({12, 8}, 4, 1.0); }
Tensor Y() { return UniformValues({12, 4}, 5, 0.5); }

struct PlanSpec {
  std::string name;
  std::vector<int64_t> mesh;
  Placements batch;
  std::vector<Placements> params;
  std::vector<std::optional<Placements>> state;  // empty: the params' layouts
};

struct MlpGraph {
  Graph g;
  ValueId x = -1, y = -1, loss = -1;
  std::vector<ValueId> params;
};

StatusOr<MlpGraph> BuildMlp(const DeviceMesh& mesh, const PlanSpec& plan) {
  MlpGraph m{Graph(mesh), -1, -1, -1, {}};
  Graph& g = m.g;
  MF_ASSIGN_OR_RETURN(m.x, g.Input("x", {12, 8}, DType::kF32));
  MF_ASSIGN_OR_RETURN(m.y, g.Input("y", {12, 4}, DType::kF32));
  for (size_t i = 0; i < 3; ++i) {
    MF_ASSIGN_OR_RETURN(ValueId p, g.Param(kNames[i], kShapes[i], DType::kF32));
    MF_RETURN_IF_ERROR(g.Annotate(p, plan.params[i]));
    m.params.push_back(p);
  }
  MF_RETURN_IF_ERROR(g.Annotate(m.x, plan.batch));
  MF_RETURN_IF_ERROR(g.Annotate(m.y, plan.batch));
  MF_ASSIGN_OR_RETURN(ValueId h, g.Apply(OpSpec::Matmul(), {m.x, m.params[0]}, "h"));
  MF_ASSIGN_OR_RETURN(ValueId hb, g.Apply(OpSpec::Binary(BinaryOp::kAdd), {h, m.params[1]}, "hb"));
  MF_ASSIGN_OR_RETURN(ValueId a, g.Apply(OpSpec::Unary(UnaryOp::kTanh), {hb}, "a"));
  MF_ASSIGN_OR_RETURN(ValueId o, g.Apply(OpSpec::Matmul(), {a, m.params[2]}, "o"));
  MF_ASSIGN_OR_RETURN(ValueId d, g.Apply(OpSpec::Binary(BinaryOp::kSub), {o, m.y}, "d"));
  MF_ASSIGN_OR_RETURN(ValueId sq, g.Apply(OpSpec::Binary(BinaryOp::kMul), {d, d}, "sq"));
  MF_ASSIGN_OR_RETURN(m.loss, g.Apply(OpSpec::Reduce(ReduceKind::kMean, {}, false), {sq}, "loss"));
  return m;
}

StatusOr<CompiledTrainStep> CompileMlp(const PlanSpec& plan, const OptimizerOptions& options,
                                       std::optional<double> clip = std::nullopt) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(plan.mesh));
  MF_ASSIGN_OR_RETURN(MlpGraph m, BuildMlp(mesh, plan));
  TrainStepSpec spec{m.loss, m.params, {}, options, clip};
  for (size_t i = 0; i < plan.state.size(); ++i) {
    std::optional<Layout> l;
    if (plan.state[i]) {
      MF_ASSIGN_OR_RETURN(Layout s, Layout::Create(kShapes[i], mesh, *plan.state[i]));
      l = std::move(s);
    }
    spec.state_layouts.push_back(std::move(l));
  }
  return CompileTrainStep(std::move(m.g), spec);
}

struct RunOut {
  std::vector<Tensor> params;  // full values after the last step
  std::vector<double> losses;
  std::vector<double> norms;   // with clipping: the global gradient norm of every step
  OptimizerBytes bytes;        // rank 0
};

// Runs `steps` compiled steps; lr_at(step) (if set) is applied before each step.
Status RunCompiled(const PlanSpec& plan, const OptimizerOptions& options, int steps, RunOut* out,
                   std::shared_ptr<const CompiledTrainStep>* keep = nullptr, std::optional<double> clip = std::nullopt) {
  MF_ASSIGN_OR_RETURN(CompiledTrainStep c, CompileMlp(plan, options, clip));
  auto step = std::make_shared<const CompiledTrainStep>(std::move(c));
  if (keep != nullptr) *keep = step;
  const DeviceMesh& mesh = step->program.graph.mesh();
  const std::vector<Tensor> init = Init();
  out->params.assign(3, Tensor::Zeros(DType::kF32, {}));
  out->losses.clear();
  out->norms.clear();
  return WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.world_rank();
    std::vector<DTensor> params;
    for (size_t i = 0; i < 3; ++i) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(kShapes[i], mesh, plan.params[i]));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(init[i], l, rank));
      params.push_back(std::move(d));
    }
    MF_ASSIGN_OR_RETURN(TrainStepRunner runner, TrainStepRunner::Create(step, std::move(params)));
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({12, 8}, mesh, plan.batch));
    MF_ASSIGN_OR_RETURN(Layout yl, Layout::Create({12, 4}, mesh, plan.batch));
    std::vector<DTensor> batch;
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(X(), xl, rank));
    MF_ASSIGN_OR_RETURN(DTensor yd, Distribute(Y(), yl, rank));
    batch.push_back(std::move(xd));
    batch.push_back(std::move(yd));
    for (int s = 0; s < steps; ++s) {
      MF_ASSIGN_OR_RETURN(double loss, runner.Step(batch, ctx));
      if (rank == 0) out->losses.push_back(loss);
      if (rank == 0 && runner.last_grad_norm()) out->norms.push_back(*runner.last_grad_norm());
    }
    for (size_t i = 0; i < 3; ++i) {
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(runner.params()[i], ctx));
      if (rank == 0) out->params[i] = std::move(f);
    }
    if (rank == 0) out->bytes = runner.BytesPerRank();
    return Status::Ok();
  });
}

// The same steps with eager autograd + Optimizer on one rank.
Status RunEagerSingle(const OptimizerOptions& options, int steps, RunOut* out, std::optional<double> clip = std::nullopt) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({1}));
  const std::vector<Tensor> init = Init();
  out->params.clear();
  out->losses.clear();
  out->norms.clear();
  return WorldOf(1).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    std::vector<Variable> p;
    std::vector<ParamSpec> specs;
    for (size_t i = 0; i < 3; ++i) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(kShapes[i], mesh, {Replicate{}}));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(init[i], l, 0));
      MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), true));
      p.push_back(std::move(v));
    }
    for (size_t i = 0; i < 3; ++i) specs.push_back(ParamSpec{kNames[i], p[i].mutable_leaf_value(), std::nullopt});
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, Optimizer::Create(std::move(specs), options, ctx));
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({12, 8}, mesh, {Replicate{}}));
    MF_ASSIGN_OR_RETURN(Layout yl, Layout::Create({12, 4}, mesh, {Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(X(), xl, 0));
    MF_ASSIGN_OR_RETURN(DTensor yd, Distribute(Y(), yl, 0));
    MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(std::move(xd), false));
    MF_ASSIGN_OR_RETURN(Variable y, Variable::Leaf(std::move(yd), false));
    for (int s = 0; s < steps; ++s) {
      MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(x, p[0], ctx));
      MF_ASSIGN_OR_RETURN(Variable hb, autograd::Add(h, p[1], ctx));
      MF_ASSIGN_OR_RETURN(Variable a, autograd::Unary(UnaryOp::kTanh, hb, ctx));
      MF_ASSIGN_OR_RETURN(Variable o, autograd::Matmul(a, p[2], ctx));
      MF_ASSIGN_OR_RETURN(Variable d, autograd::Sub(o, y, ctx));
      MF_ASSIGN_OR_RETURN(Variable sq, autograd::Mul(d, d, ctx));
      MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(sq, {}, false, ctx));
      out->losses.push_back(loss.value().local().GetAsDouble(0));
      MF_RETURN_IF_ERROR(Backward(loss, ctx));
      std::vector<const DTensor*> grads;
      for (const Variable& v : p) grads.push_back(&*v.grad());
      MF_RETURN_IF_ERROR(opt->Step(grads, ctx, {.max_grad_norm = clip}));
      if (opt->last_grad_norm()) out->norms.push_back(*opt->last_grad_norm());
      for (Variable& v : p) v.ZeroGrad();
    }
    for (const Variable& v : p) out->params.push_back(v.value().local());
    return Status::Ok();
  });
}

const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1};

PlanSpec Single() { return {"single", {1}, {r}, {{r}, {r}, {r}}, {}}; }

double MaxDiff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape()) return INFINITY;
    for (int64_t j = 0; j < a[i].NumElements(); ++j) d = std::max(d, std::abs(a[i].GetAsDouble(j) - b[i].GetAsDouble(j)));
  }
  return d;
}

AdamWOptions Adam() {
  AdamWOptions o;
  o.lr = 5e-3;
  return o;
}

TEST(CompiledStepTest, OneRankGivesTheBitsOfTheEagerStep) {
  SgdOptions nesterov;
  nesterov.lr = 0.05;
  nesterov.momentum = 0.9;
  nesterov.weight_decay = 1e-3;
  nesterov.momentum_kind = MomentumKind::kNesterov;
  SgdOptions damped;
  damped.lr = 0.05;
  damped.momentum = 0.8;
  damped.dampening = 0.3;
  SgdOptions plain;
  plain.lr = 0.1;
  for (const OptimizerOptions& o : std::vector<OptimizerOptions>{Adam(), nesterov, damped, plain}) {
    RunOut compiled, eager;
    ASSERT_TRUE(RunCompiled(Single(), o, 5, &compiled).ok());
    ASSERT_TRUE(RunEagerSingle(o, 5, &eager).ok());
    EXPECT_EQ(compiled.losses, eager.losses);
    EXPECT_EQ(MaxDiff(compiled.params, eager.params), 0.0);
    EXPECT_LT(compiled.losses.back(), compiled.losses.front());
  }
}

TEST(CompiledStepTest, TwentyAdamWStepsOnEveryPlanMatchOneRank) {
  using P = Placements;
  using S = std::optional<Placements>;
  RunOut want;
  ASSERT_TRUE(RunCompiled(Single(), Adam(), 20, &want).ok());
  const std::vector<PlanSpec> plans = {
      {"ddp-2", {2}, {s0}, {{r}, {r}, {r}}, {}},
      {"zero1-2", {2}, {s0}, {{r}, {r}, {r}}, {P{s0}, P{s0}, P{s0}}},
      {"fsdp-2", {2}, {s0}, {{s0}, {s0}, {s0}}, {}},
      {"tp-2", {2}, {r}, {{s1}, {s0}, {s0}}, {}},
      {"dp x tp 2x2", {2, 2}, {s0, r}, {{r, s1}, {r, s0}, {r, s0}}, {}},
      {"fsdp x tp 2x2", {2, 2}, {s0, r}, {{s0, s1}, {s0, s0}, {s1, s0}}, {}},
      {"dp x fsdp x tp 2x2x2", {2, 2, 2}, {s0, s0, r}, {{r, s0, s1}, {r, s0, s0}, {r, s1, s0}}, {S(), S(), S()}},
  };
  for (const PlanSpec& plan : plans) {
    RunOut got;
    const Status st = RunCompiled(plan, Adam(), 20, &got);
    ASSERT_TRUE(st.ok()) << plan.name << ": " << st;
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t k = 0; k < got.losses.size(); ++k) EXPECT_NEAR(got.losses[k], want.losses[k], 1e-5) << plan.name << " step " << k;
    EXPECT_LE(MaxDiff(got.params, want.params), 2e-4) << plan.name;
  }
}

// Clipping by the global norm in the program: the eager optimizer's max_grad_norm to rounding
// (its sums run in double, the program's in f32) on one rank, and every plan matches one rank.
TEST(CompiledStepTest, GradientClippingMatchesTheEagerOptimizerAndEveryPlan) {
  const double clip = 0.05;
  RunOut eager, single, unclipped;
  ASSERT_TRUE(RunEagerSingle(Adam(), 10, &eager, clip).ok());
  std::shared_ptr<const CompiledTrainStep> step;
  ASSERT_TRUE(RunCompiled(Single(), Adam(), 10, &single, &step, clip).ok());
  ASSERT_TRUE(RunCompiled(Single(), Adam(), 10, &unclipped).ok());
  ASSERT_EQ(single.norms.size(), 10u);
  ASSERT_EQ(eager.norms.size(), 10u);
  for (size_t k = 0; k < 10; ++k) {
    EXPECT_NEAR(single.norms[k], eager.norms[k], 1e-6 * eager.norms[k]) << "step " << k;
    EXPECT_NEAR(single.losses[k], eager.losses[k], 1e-6) << "step " << k;
  }
  EXPECT_GT(eager.norms[0], clip);  // clipping is active, and it changes the result
  EXPECT_LE(MaxDiff(single.params, eager.params), 1e-5);
  EXPECT_GT(MaxDiff(single.params, unclipped.params), 1e-4);
  EXPECT_NE(step->ToText().find("grad_norm"), std::string::npos);
  EXPECT_NE(step->ToText().find("clip.max_norm"), std::string::npos);

  using P = Placements;
  const std::vector<PlanSpec> plans = {
      {"ddp-2", {2}, {s0}, {{r}, {r}, {r}}, {}},
      {"zero1-2", {2}, {s0}, {{r}, {r}, {r}}, {P{s0}, P{s0}, P{s0}}},
      {"fsdp x tp 2x2", {2, 2}, {s0, r}, {{s0, s1}, {s0, s0}, {s1, s0}}, {}},
  };
  for (const PlanSpec& plan : plans) {
    RunOut got;
    const Status st = RunCompiled(plan, Adam(), 10, &got, nullptr, clip);
    ASSERT_TRUE(st.ok()) << plan.name << ": " << st;
    ASSERT_EQ(got.norms.size(), 10u) << plan.name;
    for (size_t k = 0; k < 10; ++k) {
      EXPECT_NEAR(got.norms[k], single.norms[k], 1e-5 * single.norms[k]) << plan.name << " step " << k;
      EXPECT_NEAR(got.losses[k], single.losses[k], 1e-5) << plan.name << " step " << k;
    }
    EXPECT_LE(MaxDiff(got.params, single.params), 1e-4) << plan.name;
  }
  // A norm below max_grad_norm leaves the step unchanged (the coefficient is capped at 1).
  RunOut loose;
  ASSERT_TRUE(RunCompiled(Single(), Adam(), 3, &loose, nullptr, 1e6).ok());
  RunOut plain;
  ASSERT_TRUE(RunCompiled(Single(), Adam(), 3, &plain).ok());
  EXPECT_EQ(MaxDiff(loose.params, plain.params), 0.0);
  EXPECT_EQ(loose.losses, plain.losses);
}

// Collectives of redistributions that move an op result to its annotation (e.g. a new param back
// to its layout).
int AnnotationCollectives(const Program& p) {
  int n = 0;
  for (const ProgramStep& st : p.steps) {
    const RedistributeStep* r = std::get_if<RedistributeStep>(&st);
    if (r == nullptr || !r->for_annotation) continue;
    for (const PlanStep& s : r->plan->steps) n += IsLocalStep(s.kind) ? 0 : 1;
  }
  return n;
}

int Count(const CostReport& c, const std::string& kind) {
  auto it = c.collectives_by_kind.find(kind);
  return it == c.collectives_by_kind.end() ? 0 : it->second;
}

TEST(CompiledStepTest, ProgramHoldsThePlansCollectivesAndShardedPlansUseLessMemory) {
  using P = Placements;
  const PlanSpec ddp{"ddp", {4}, {s0}, {{r}, {r}, {r}}, {}};
  const PlanSpec zero1{"zero1", {4}, {s0}, {{r}, {r}, {r}}, {P{s0}, P{s0}, P{s0}}};
  const PlanSpec fsdp{"fsdp", {4}, {s0}, {{s0}, {s0}, {s0}}, {}};
  const CompiledTrainStep cd = CompileMlp(ddp, Adam()).value();
  const CompiledTrainStep cz = CompileMlp(zero1, Adam()).value();
  const CompiledTrainStep cf = CompileMlp(fsdp, Adam()).value();
  const CostReport d = ReportCost(cd.program), z = ReportCost(cz.program), f = ReportCost(cf.program);
  // DDP: Partial(sum) gradients reduced whole (all-reduce), the update runs replicated and the
  // new params need no move; nothing is reduce-scattered.
  EXPECT_GE(Count(d, "all_reduce"), 1) << cd.ToText();
  EXPECT_EQ(Count(d, "reduce_scatter"), 0) << cd.ToText();
  EXPECT_EQ(AnnotationCollectives(cd.program), 0) << cd.ToText();
  // ZeRO-1: gradients reduce-scattered to the sharded state, each new param all-gathered.
  EXPECT_GE(Count(z, "reduce_scatter"), 1) << cz.ToText();
  EXPECT_EQ(Count(z, "all_reduce"), 0) << cz.ToText();
  EXPECT_EQ(AnnotationCollectives(cz.program), 3) << cz.ToText();
  // FSDP: sharded weights gathered for use; the update runs on the shards, no move after it.
  EXPECT_GE(Count(f, "all_gather"), 2) << cf.ToText();
  EXPECT_EQ(AnnotationCollectives(cf.program), 0) << cf.ToText();
  // The gradient of the input x (computed by matmul's VJP with w1's) is dead code: no step.
  EXPECT_LT(d.ops, static_cast<int>(cd.program.graph.nodes().size()));
  const MemoryReport md = ReportMemory(cd.program), mz = ReportMemory(cz.program), mf = ReportMemory(cf.program);
  EXPECT_LT(mf.max_peak_live_bytes, md.max_peak_live_bytes);
  EXPECT_LT(mz.max_peak_live_bytes, md.max_peak_live_bytes);
  const std::string text = cf.ToText();
  EXPECT_NE(text.find("peak live bytes per rank: max " + std::to_string(mf.max_peak_live_bytes)), std::string::npos);
  EXPECT_NE(text.find("w1.exp_avg"), std::string::npos);
  EXPECT_NE(text.find("d_w1"), std::string::npos);
  // Bytes per rank: fsdp holds a quarter of ddp's params and state.
  RunOut rd, rf;
  ASSERT_TRUE(RunCompiled(ddp, Adam(), 1, &rd).ok());
  ASSERT_TRUE(RunCompiled(fsdp, Adam(), 1, &rf).ok());
  EXPECT_EQ(rf.bytes.params * 4, rd.bytes.params);
  EXPECT_EQ(rf.bytes.optimizer * 4, rd.bytes.optimizer);
  EXPECT_EQ(rd.bytes.optimizer, 2 * rd.bytes.params);
}

TEST(CompiledStepTest, LrIsAnInputOfEveryStep) {
  const CompiledTrainStep c = CompileMlp(Single(), Adam()).value();
  auto step = std::make_shared<const CompiledTrainStep>(c);
  const DeviceMesh mesh = step->program.graph.mesh();
  const Status st = WorldOf(1).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    std::vector<DTensor> params;
    const std::vector<Tensor> init = Init();
    for (size_t i = 0; i < 3; ++i) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(kShapes[i], mesh, {Replicate{}}));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(init[i], l, 0));
      params.push_back(std::move(d));
    }
    MF_ASSIGN_OR_RETURN(TrainStepRunner runner, TrainStepRunner::Create(step, params));
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({12, 8}, mesh, {Replicate{}}));
    MF_ASSIGN_OR_RETURN(Layout yl, Layout::Create({12, 4}, mesh, {Replicate{}}));
    std::vector<DTensor> batch = {Distribute(X(), xl, 0).value(), Distribute(Y(), yl, 0).value()};
    // lr 0: decay 1 and step size 0, so the params keep their bits (the moments still move).
    EXPECT_TRUE(runner.set_lr(0).ok());
    MF_RETURN_IF_ERROR(runner.Step(batch, ctx).status());
    EXPECT_EQ(runner.step_count(), 1);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(runner.params()[i].local().data<float>()[0], params[i].local().data<float>()[0]);
    EXPECT_NE(runner.state()[0][0].local().data<float>()[0], 0.0f);
    EXPECT_TRUE(runner.set_lr(0.01).ok());
    MF_RETURN_IF_ERROR(runner.Step(batch, ctx).status());
    EXPECT_NE(runner.params()[0].local().data<float>()[0], params[0].local().data<float>()[0]);
    // Bad input: nothing updated.
    const Status nan = runner.set_lr(NAN);
    EXPECT_EQ(nan.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(nan.message().find("lr"), std::string::npos);
    EXPECT_EQ(runner.lr(), 0.01);
    const DTensor before = runner.params()[0];
    const std::vector<DTensor> one = {batch[0]};
    const Status short_batch = runner.Step(one, ctx).status();
    EXPECT_EQ(short_batch.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(short_batch.message().find("1 batch tensors, the step takes 2 (x, y)"), std::string::npos) << short_batch;
    const std::vector<DTensor> swapped = {batch[1], batch[0]};
    const Status wrong_shape = runner.Step(swapped, ctx).status();
    EXPECT_EQ(wrong_shape.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(wrong_shape.message().find("input 'x'"), std::string::npos) << wrong_shape;
    EXPECT_EQ(runner.step_count(), 2);
    EXPECT_EQ(runner.params()[0].local().data<float>()[0], before.local().data<float>()[0]);
    // A param in the wrong layout or count.
    MF_ASSIGN_OR_RETURN(DeviceMesh m1, DeviceMesh::Create({1}));
    EXPECT_EQ(TrainStepRunner::Create(step, {params[0]}).status().code(), StatusCode::kInvalidArgument);
    std::vector<DTensor> swapped_params = {params[1], params[0], params[2]};
    const Status bad_param = TrainStepRunner::Create(step, swapped_params).status();
    EXPECT_NE(bad_param.message().find("param 'w1'"), std::string::npos) << bad_param;
    EXPECT_EQ(TrainStepRunner::Create(nullptr, params).status().code(), StatusCode::kInvalidArgument);
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
}

Status CompileError(const std::function<Status(MlpGraph&, TrainStepSpec&)>& edit) {
  const DeviceMesh mesh = DeviceMesh::Create({2}).value();
  MlpGraph m = BuildMlp(mesh, {"ddp", {2}, {s0}, {{r}, {r}, {r}}, {}}).value();
  TrainStepSpec spec{m.loss, m.params, {}, Adam()};
  MF_RETURN_IF_ERROR(edit(m, spec));
  return CompileTrainStep(std::move(m.g), spec).status();
}

void ExpectError(const std::function<Status(MlpGraph&, TrainStepSpec&)>& edit, StatusCode code, const std::string& text) {
  const Status s = CompileError(edit);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(text), std::string::npos) << s;
}

TEST(CompiledStepTest, BadSpecsAreRefusedNamingTheValue) {
  ExpectError([](MlpGraph&, TrainStepSpec& s) { s.params.clear(); return Status::Ok(); }, StatusCode::kInvalidArgument,
              "no params");
  ExpectError([](MlpGraph& m, TrainStepSpec& s) { s.params.push_back(m.x); return Status::Ok(); },
              StatusCode::kInvalidArgument, "params[3] (id 0) is not a param");
  ExpectError([](MlpGraph& m, TrainStepSpec& s) { s.params.push_back(m.params[0]); return Status::Ok(); },
              StatusCode::kInvalidArgument, "param 'w1' is listed twice");
  ExpectError(
      [](MlpGraph& m, TrainStepSpec& s) {
        MF_ASSIGN_OR_RETURN(ValueId w, m.g.Param("w3", {4}, DType::kF32));
        s.params.push_back(w);
        return Status::Ok();
      },
      StatusCode::kInvalidArgument, "param 'w3' has no layout annotation");
  ExpectError(
      [](MlpGraph& m, TrainStepSpec& s) {
        MF_ASSIGN_OR_RETURN(ValueId w, m.g.Param("w3", {4}, DType::kF32));
        MF_RETURN_IF_ERROR(m.g.Annotate(w, "R"));
        s.params.push_back(w);
        return Status::Ok();
      },
      StatusCode::kInvalidArgument, "does not depend on param 'w3'");
  ExpectError(
      [](MlpGraph& m, TrainStepSpec& s) {
        MF_ASSIGN_OR_RETURN(ValueId w, m.g.Param("w3", {4}, DType::kF32));
        MF_RETURN_IF_ERROR(m.g.Annotate(w, "P(sum)"));
        s.params.push_back(w);
        return Status::Ok();
      },
      StatusCode::kInvalidArgument, "param 'w3' is annotated P(sum)");
  ExpectError([](MlpGraph&, TrainStepSpec& s) { s.state_layouts.resize(2); return Status::Ok(); },
              StatusCode::kInvalidArgument, "2 state layouts for 3 params");
  ExpectError(
      [](MlpGraph& m, TrainStepSpec& s) {
        s.state_layouts.resize(3);
        MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({16, 4}, m.g.mesh(), {Shard{0}}));
        s.state_layouts[0] = l;
        return Status::Ok();
      },
      StatusCode::kInvalidArgument, "of param 'w1' does not match");
  ExpectError(
      [](MlpGraph& m, TrainStepSpec& s) {
        s.state_layouts.resize(3);
        MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({8, 16}, m.g.mesh(), {Partial{}}));
        s.state_layouts[0] = l;
        return Status::Ok();
      },
      StatusCode::kInvalidArgument, "has a Partial placement");
  ExpectError([](MlpGraph& m, TrainStepSpec&) { return m.g.Annotate(m.loss, "P(sum)"); }, StatusCode::kInvalidArgument,
              "the loss 'loss' is annotated P(sum)");
  ExpectError(
      [](MlpGraph&, TrainStepSpec& s) {
        AdamWOptions o;
        o.beta1 = 1.5;
        s.optimizer = o;
        return Status::Ok();
      },
      StatusCode::kInvalidArgument, "beta1");
  ExpectError(
      [](MlpGraph& m, TrainStepSpec&) { return m.g.Input("w1.exp_avg", {1}, DType::kF32).status(); },
      StatusCode::kInvalidArgument, "state of param 'w1'");
  ExpectError([](MlpGraph& m, TrainStepSpec& s) { s.loss = m.params[0]; return Status::Ok(); },
              StatusCode::kInvalidArgument, "the loss 'w1' does not depend on param 'b1'");
  ExpectError([](MlpGraph&, TrainStepSpec& s) { s.loss = 999; return Status::Ok(); }, StatusCode::kInvalidArgument,
              "loss id 999");
  for (double bad : {-1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    ExpectError([bad](MlpGraph&, TrainStepSpec& s) { s.max_grad_norm = bad; return Status::Ok(); },
                StatusCode::kInvalidArgument, "max_grad_norm " + DoubleString(bad) + " must be >= 0 and finite");
  }
  ExpectError(
      [](MlpGraph& m, TrainStepSpec& s) {
        MF_ASSIGN_OR_RETURN(ValueId w, m.g.Param("w64", {4}, DType::kF64));
        MF_RETURN_IF_ERROR(m.g.Annotate(w, "R"));
        s.params.push_back(w);
        s.max_grad_norm = 1.0;
        return Status::Ok();
      },
      StatusCode::kInvalidArgument, "gradient clipping needs every param in one dtype; param 'w64' is f64");
  // bf16 params: master weights live in the eager optimizer only.
  const DeviceMesh mesh = DeviceMesh::Create({1}).value();
  Graph g(mesh);
  const ValueId w = g.Param("w", {4}, DType::kBF16).value();
  ASSERT_TRUE(g.Annotate(w, "R").ok());
  const ValueId l = g.Apply(OpSpec::Reduce(ReduceKind::kSum, {}, false), {w}, "l").value();
  const Status bf16 = CompileTrainStep(g, TrainStepSpec{l, {w}, {}, Adam()}).status();
  EXPECT_EQ(bf16.code(), StatusCode::kUnimplemented) << bf16;
  EXPECT_NE(bf16.message().find("param 'w' is bf16"), std::string::npos) << bf16;
}

}  // namespace
}  // namespace meshflow
