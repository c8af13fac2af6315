// Training step time under parallel plans vs one rank, on the threads world or under mpirun.
//
// BM_TrainStep/<model>/<plan>: one steady-state training step of the whole world (every rank runs
// it; the time is the wall time of rank 0's step loop, whose iterations every rank follows).
// Models:
//   mlp           2-layer MLP (x [64,256] -> 1024 -> 256, gelu, MSE), f32, eager: forward,
//                 Backward, AdamW Step, ZeroGrad (autograd/, optim/optimizer.h)
//   mlp_compiled  the same MLP as one compiled program (train/compiled_step.h: forward + backward
//                 + AdamW update, every collective chosen by the planner), TrainStepRunner::Step
//   gpt1          a 1-layer GPT (lm/gpt.h: token + position embedding, one pre-norm transformer
//                 block with 4-head causal attention and a gelu MLP, final norm, LM head;
//                 vocab 256, seq 64, dim 64, mlp 256: lm/gpt.h's defaults with
//                 one layer), batch 16 x 64 tokens, eager, AdamW,
//                 the parallel plans of lm/plan.h
// Plans: single (one rank), then ddp, zero1, fsdp, tp (mlp: the layouts of examples/train_mlp;
// gpt1: lm/plan.h) and, for gpt1 on an even world, fsdp+tp (dp = world / 2, tp = 2).
//
// Worlds: started plainly, the multi-rank plans run on --ranks (default 4) thread ranks in this
// process (collectives/threads). Under mpirun (launch/world.h finds the launcher) they run on the
// MPI world of all processes; rank 0 runs Google Benchmark and tells the other processes which
// case to run, and they follow its step loop (a broadcast per step). The single-rank cases run in
// rank 0's process alone while the other processes sleep (a polling wait that yields the CPU), so
// one run gives the single-rank baseline and the plans under the same conditions.
//
//   bazel run --config=opt //bench:train_bench                              # 4 thread ranks
//   mpirun -np 4 bazel-bin/bench/train_bench --benchmark_min_time=0.5       # 4 processes
//
// On a machine with fewer cores than ranks the ranks share cores, so the ratio to the single rank
// mixes parallel speedup with communication and oversubscription.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/base/lcg.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/launch/world.h"
#include "meshflow/lm/gpt.h"
#include "meshflow/lm/plan.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/train/compiled_step.h"
#include "meshflow/optim/optimizer.h"

namespace meshflow {
namespace {

constexpr int64_t kB = 64, kIn = 256, kHidden = 1024, kOut = 256;

enum Model { kMlp = 0, kMlpCompiled = 1, kMlpCompiledCpu = 2, kGpt1 = 3 };
constexpr const char* kModelNames[] = {"mlp", "mlp_compiled", "mlp_compiled_cpu", "gpt1"};
constexpr const char* kPlanNames[] = {"single", "ddp", "zero1", "fsdp", "tp", "fsdp+tp"};

struct Case {
  int model = kMlp;
  int plan = 0;  // index into kPlanNames
};

// Under mpirun: the MPI world (rank 0 drives the benchmarks); null on the threads world.
Communicator* g_mpi_world = nullptr;
int g_ranks = 4;  // ranks of the multi-rank plans

Tensor Values(std::vector<int64_t> shape, uint32_t seed, double scale) {
  Tensor t = Tensor::Zeros(DType::kF32, std::move(shape));
  Lcg32 g = Lcg32::Seeded(seed, 7);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, scale * g.NextSymmetric());
  return t;
}

// The MLP's layouts on a 1-D mesh (those of examples/train_mlp, without biases).
struct MlpPlan {
  Placement batch, w1, w2;
  std::optional<Placement> state;  // nullopt: the param's layout
};

MlpPlan MlpPlanFor(int plan) {
  const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1};
  switch (plan) {
    case 0: return {r, r, r, std::nullopt};
    case 1: return {s0, r, r, std::nullopt};
    case 2: return {s0, r, r, Placement{s0}};
    case 3: return {s0, s0, s0, std::nullopt};
    default: return {r, s1, s0, std::nullopt};
  }
}

// One rank's training step of a case, set up once; Step is collective over the case's world.
using StepFn = std::function<Status()>;

StatusOr<StepFn> MlpEager(const MlpPlan& plan, const DeviceMesh& mesh, std::shared_ptr<RankContext> ctx) {
  const int rank = ctx->world_rank();
  auto leaf = [&](const Tensor& t, Placement p, bool grad) -> StatusOr<Variable> {
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(t.shape(), mesh, {p}));
    MF_ASSIGN_OR_RETURN(DTensor d, Distribute(t, l, rank));
    return Variable::Leaf(std::move(d), grad);
  };
  MF_ASSIGN_OR_RETURN(Variable xv, leaf(Values({kB, kIn}, 1, 1.0), plan.batch, false));
  MF_ASSIGN_OR_RETURN(Variable yv, leaf(Values({kB, kOut}, 2, 0.5), plan.batch, false));
  MF_ASSIGN_OR_RETURN(Variable p1, leaf(Values({kIn, kHidden}, 3, 0.06), plan.w1, true));
  MF_ASSIGN_OR_RETURN(Variable p2, leaf(Values({kHidden, kOut}, 4, 0.03), plan.w2, true));
  std::vector<Variable> p = {p1, p2};
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < p.size(); ++i) {
    std::optional<Layout> s;
    if (plan.state) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(p[i].value().global_shape(), mesh, {*plan.state}));
      s = std::move(l);
    }
    specs.push_back(ParamSpec{i == 0 ? "w1" : "w2", p[i].mutable_leaf_value(), std::move(s)});
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt_u, AdamW::Create(std::move(specs), AdamWOptions{}, *ctx));
  std::shared_ptr<Optimizer> opt = std::move(opt_u);
  return StepFn([=]() mutable -> Status {
    RankContext& c = *ctx;
    MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(xv, p[0], c));
    MF_ASSIGN_OR_RETURN(Variable a, autograd::Gelu(h, c));
    MF_ASSIGN_OR_RETURN(Variable o, autograd::Matmul(a, p[1], c));
    MF_ASSIGN_OR_RETURN(Variable d, autograd::Sub(o, yv, c));
    MF_ASSIGN_OR_RETURN(Variable sq, autograd::Mul(d, d, c));
    MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(sq, {}, false, c));
    MF_RETURN_IF_ERROR(Backward(loss, c));
    const DTensor* grads[2] = {&*p[0].grad(), &*p[1].grad()};
    MF_RETURN_IF_ERROR(opt->Step(grads, c));
    p[0].ZeroGrad();
    p[1].ZeroGrad();
    return Status::Ok();
  });
}

// The cost model of mlp_compiled_cpu: this machine's threads world rather than the default's
// GPU links (bandwidth of a memcpy, latency of a barrier of threads) and the rate of the CPU
// matmul kernel, so that propagation weighs repeated work against moved bytes.
PropagationOptions CpuCostModel() {
  PropagationOptions o;
  o.topology.bw_intra_gbps = 10;
  o.topology.lat_intra_us = 5;
  o.compute_gflops = 5;
  return o;
}

StatusOr<StepFn> MlpCompiled(const MlpPlan& plan, const DeviceMesh& mesh, std::shared_ptr<RankContext> ctx,
                             const PropagationOptions& options) {
  const int rank = ctx->world_rank();
  Graph g(mesh);
  MF_ASSIGN_OR_RETURN(ValueId x, g.Input("x", {kB, kIn}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId y, g.Input("y", {kB, kOut}, DType::kF32));
  MF_RETURN_IF_ERROR(g.Annotate(x, {plan.batch}));
  MF_RETURN_IF_ERROR(g.Annotate(y, {plan.batch}));
  MF_ASSIGN_OR_RETURN(ValueId w1, g.Param("w1", {kIn, kHidden}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId w2, g.Param("w2", {kHidden, kOut}, DType::kF32));
  MF_RETURN_IF_ERROR(g.Annotate(w1, {plan.w1}));
  MF_RETURN_IF_ERROR(g.Annotate(w2, {plan.w2}));
  MF_ASSIGN_OR_RETURN(ValueId h, g.Apply(OpSpec::Matmul(), {x, w1}, "h"));
  MF_ASSIGN_OR_RETURN(ValueId a, g.Apply(OpSpec::Unary(UnaryOp::kGelu), {h}, "a"));
  MF_ASSIGN_OR_RETURN(ValueId o, g.Apply(OpSpec::Matmul(), {a, w2}, "o"));
  MF_ASSIGN_OR_RETURN(ValueId d, g.Apply(OpSpec::Binary(BinaryOp::kSub), {o, y}, "d"));
  MF_ASSIGN_OR_RETURN(ValueId sq, g.Apply(OpSpec::Binary(BinaryOp::kMul), {d, d}, "sq"));
  MF_ASSIGN_OR_RETURN(ValueId loss, g.Apply(OpSpec::Reduce(ReduceKind::kMean, {}, false), {sq}, "loss"));
  TrainStepSpec spec{.loss = loss, .params = {w1, w2}, .optimizer = AdamWOptions{}};
  const Tensor w1v = Values({kIn, kHidden}, 3, 0.06), w2v = Values({kHidden, kOut}, 4, 0.03);
  for (const Tensor* w : {&w1v, &w2v}) {
    std::optional<Layout> s;
    if (plan.state) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(w->shape(), mesh, {*plan.state}));
      s = std::move(l);
    }
    spec.state_layouts.push_back(std::move(s));
  }
  MF_ASSIGN_OR_RETURN(CompiledTrainStep compiled, CompileTrainStep(std::move(g), spec, options));
  if (std::getenv("MF_TRAIN_BENCH_PRINT") != nullptr && rank == 0) std::printf("%s", compiled.ToText().c_str());
  auto step = std::make_shared<const CompiledTrainStep>(std::move(compiled));
  std::vector<DTensor> params;
  MF_ASSIGN_OR_RETURN(Layout l1, Layout::Create({kIn, kHidden}, mesh, {plan.w1}));
  MF_ASSIGN_OR_RETURN(Layout l2, Layout::Create({kHidden, kOut}, mesh, {plan.w2}));
  MF_ASSIGN_OR_RETURN(DTensor d1, Distribute(w1v, l1, rank));
  MF_ASSIGN_OR_RETURN(DTensor d2, Distribute(w2v, l2, rank));
  params.push_back(std::move(d1));
  params.push_back(std::move(d2));
  MF_ASSIGN_OR_RETURN(TrainStepRunner runner_v, TrainStepRunner::Create(step, std::move(params)));
  auto runner = std::make_shared<TrainStepRunner>(std::move(runner_v));
  MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({kB, kIn}, mesh, {plan.batch}));
  MF_ASSIGN_OR_RETURN(Layout yl, Layout::Create({kB, kOut}, mesh, {plan.batch}));
  auto batch = std::make_shared<std::vector<DTensor>>();
  MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(Values({kB, kIn}, 1, 1.0), xl, rank));
  MF_ASSIGN_OR_RETURN(DTensor yd, Distribute(Values({kB, kOut}, 2, 0.5), yl, rank));
  batch->push_back(std::move(xd));
  batch->push_back(std::move(yd));
  return StepFn([=]() -> Status { return runner->Step(*batch, *ctx).status(); });
}

constexpr int64_t kGptBatch = 16;

StatusOr<StepFn> Gpt1(int plan_index, int world, Communicator& comm, std::shared_ptr<RankContext>& comms_out) {
  lm::GptConfig cfg;
  cfg.layers = 1;
  lm::MeshSpec spec{{1}, {"dp"}};
  std::optional<lm::PlanKind> plan;
  if (plan_index > 0) {
    MF_ASSIGN_OR_RETURN(lm::PlanKind p, lm::ParsePlan(kPlanNames[plan_index]));
    MF_ASSIGN_OR_RETURN(spec, lm::ResolveMesh(p, std::nullopt, world));
    plan = p;
  }
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(spec.shape, spec.names));
  MF_ASSIGN_OR_RETURN(RankContext comms_v, RankContext::Create(comm, mesh));
  auto ctx = std::make_shared<RankContext>(std::move(comms_v));
  comms_out = ctx;
  MF_ASSIGN_OR_RETURN(std::unique_ptr<lm::Gpt> gpt_u, lm::Gpt::Create(cfg, *ctx));
  std::shared_ptr<lm::Gpt> gpt = std::move(gpt_u);
  std::vector<ParamSpec> specs = gpt->ParamSpecs();
  std::vector<std::string> dp_dims = {"dp"};
  if (plan) {
    MF_ASSIGN_OR_RETURN(lm::AppliedPlan applied, lm::ApplyPlan(*plan, *gpt, *ctx));
    specs = gpt->ParamSpecs();
    for (size_t i = 0; i < specs.size(); ++i) specs[i].state_layout = applied.state_layouts[i];
    dp_dims = applied.dp_dims;
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt_u, AdamW::Create(specs, AdamWOptions{}, *ctx));
  std::shared_ptr<Optimizer> opt = std::move(opt_u);
  // A fixed batch of token windows [16, 65], sharded over the plan's dp dims.
  Tensor tokens = Tensor::Zeros(DType::kI32, {kGptBatch, cfg.seq_len + 1});
  Lcg32 g(12345);
  for (int64_t i = 0; i < tokens.NumElements(); ++i) {
    tokens.SetFromDouble(i, static_cast<double>(g.Next24() % static_cast<uint32_t>(cfg.vocab)));
  }
  Placements batch_p;
  for (const std::string& name : spec.names) {
    const bool dp = std::find(dp_dims.begin(), dp_dims.end(), name) != dp_dims.end();
    batch_p.push_back(dp ? Placement{Shard{0}} : Placement{Replicate{}});
  }
  MF_ASSIGN_OR_RETURN(Layout bl, Layout::Create(tokens.shape(), mesh, batch_p));
  MF_ASSIGN_OR_RETURN(DTensor batch_v, Distribute(tokens, bl, comm.world_rank()));
  auto batch = std::make_shared<DTensor>(std::move(batch_v));
  return StepFn([=]() -> Status {
    MF_ASSIGN_OR_RETURN(Variable loss, gpt->Loss(*batch, *ctx));
    MF_RETURN_IF_ERROR(Backward(loss, *ctx));
    MF_RETURN_IF_ERROR(opt->Step(gpt->Grads(), *ctx));
    gpt->ZeroGrad();
    return Status::Ok();
  });
}

int RanksOf(const Case& c) { return c.plan == 0 ? 1 : g_ranks; }

// One rank's part of a case on `comm` (a world of RanksOf(c) ranks): set up, one warm-up step
// (strategy choice and plans are cached after it), then steps while rank 0's `keep_going` says
// so (broadcast to every rank before each step).
Status RunCase(const Case& c, Communicator& comm, const std::function<bool()>& keep_going) {
  std::shared_ptr<RankContext> ctx;
  StepFn step;
  if (c.model == kGpt1) {
    MF_ASSIGN_OR_RETURN(step, Gpt1(c.plan, comm.size(), comm, ctx));
  } else {
    const bool tp = c.plan == 4;
    MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({comm.size()}, {tp ? "tp" : "dp"}));
    MF_ASSIGN_OR_RETURN(RankContext comms_v, RankContext::Create(comm, mesh));
    ctx = std::make_shared<RankContext>(std::move(comms_v));
    const MlpPlan plan = MlpPlanFor(c.plan);
    if (c.model == kMlp) {
      MF_ASSIGN_OR_RETURN(step, MlpEager(plan, mesh, ctx));
    } else {
      MF_ASSIGN_OR_RETURN(step, MlpCompiled(plan, mesh, ctx,
                                            c.model == kMlpCompiledCpu ? CpuCostModel() : PropagationOptions{}));
    }
  }
  MF_RETURN_IF_ERROR(step());
  int64_t go = 1;
  while (true) {
    if (comm.rank() == 0) go = keep_going() ? 1 : 0;
    MF_RETURN_IF_ERROR(comm.Broadcast(&go, 1, DType::kI64, 0));
    if (go == 0) break;
    MF_RETURN_IF_ERROR(step());
  }
  return Status::Ok();
}

// Rank 0 -> the other MPI processes: which case to run next ({-1, -1}: exit).
constexpr int kCommandTag = 7311;

void SendCommand(const Case& c) {
  int msg[2] = {c.model, c.plan};
  for (int r = 1; r < g_mpi_world->size(); ++r) MPI_Send(msg, 2, MPI_INT, r, kCommandTag, MPI_COMM_WORLD);
}

// Waits for rank 0's next command without spinning on the CPU (rank 0 may be timing a
// single-rank case on it).
Case ReceiveCommand() {
  int msg[2] = {-1, -1};
  MPI_Request req;
  MPI_Irecv(msg, 2, MPI_INT, 0, kCommandTag, MPI_COMM_WORLD, &req);
  int done = 0;
  while (true) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) break;
    const timespec pause{0, 200 * 1000};
    nanosleep(&pause, nullptr);
  }
  return Case{msg[0], msg[1]};
}

void BM_TrainStep(benchmark::State& state, Case c) {
  const int ranks = RanksOf(c);
  auto keep = [&state]() { return state.KeepRunning(); };
  Status st;
  if (g_mpi_world != nullptr && ranks > 1) {
    SendCommand(c);
    st = RunCase(c, *g_mpi_world, keep);
  } else {
    StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(ranks);
    st = world.ok() ? (*world)->Run([&](Communicator& comm) { return RunCase(c, comm, keep); }) : world.status();
  }
  if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  const std::string where = ranks == 1 ? "1 rank" : g_mpi_world != nullptr ? std::to_string(ranks) + " mpi processes"
                                                                            : std::to_string(ranks) + " thread ranks";
  state.SetLabel(std::string(kModelNames[c.model]) + " " + kPlanNames[c.plan] + ", " + where);
}

void RegisterCases() {
  for (int model : {kMlp, kMlpCompiled, kMlpCompiledCpu, kGpt1}) {
    const int plans = model == kGpt1 && g_ranks % 2 == 0 ? 6 : 5;
    for (int plan = 0; plan < plans; ++plan) {
      const std::string name = std::string("BM_TrainStep/") + kModelNames[model] + "/" + kPlanNames[plan];
      benchmark::RegisterBenchmark(name.c_str(), BM_TrainStep, Case{model, plan})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

int Main(int argc, char** argv) {
  // Our own flag first: --ranks N (the threads world's rank count; ignored under mpirun).
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      g_ranks = std::atoi(argv[++i]);
    } else {
      args.push_back(argv[i]);
    }
  }
  int nargs = static_cast<int>(args.size());
  StatusOr<LaunchMode> mode = DetectLaunch(SystemEnv, 1);
  if (!mode.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", mode.status().ToString().c_str());
    return 2;
  }
  if (std::holds_alternative<InProcess>(*mode)) {
    if (g_ranks != 2 && g_ranks != 4) {
      std::fprintf(stderr, "train_bench: --ranks must be 2 or 4 (the GPT's 4 heads are split over them), got %d\n",
                   g_ranks);
      return 2;
    }
    benchmark::Initialize(&nargs, args.data());
    RegisterCases();
    benchmark::RunSpecifiedBenchmarks();
    return 0;
  }
  Status st = RunWorld(*mode, [&](Communicator& world, const RankInfo& me) -> Status {
    g_ranks = me.size;
    if (me.size != 2 && me.size != 4) {
      return InvalidArgumentError("train_bench under mpirun needs 2 or 4 processes (the GPT's 4 heads are split "
                                  "over them), got " + std::to_string(me.size));
    }
    if (me.rank == 0) {
      g_mpi_world = &world;
      benchmark::Initialize(&nargs, args.data());
      RegisterCases();
      benchmark::RunSpecifiedBenchmarks();
      SendCommand(Case{-1, -1});
      return Status::Ok();
    }
    while (true) {
      const Case c = ReceiveCommand();
      if (c.model < 0) return Status::Ok();
      MF_RETURN_IF_ERROR(RunCase(c, world, [] { return false; }));
    }
  });
  if (!st.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
