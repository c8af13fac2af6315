// train_mlp: a 2-layer MLP regression trained with AdamW for 20 steps on one rank, then on 4
// thread ranks under each parallel plan: ddp, zero1, fsdp, tp, fsdp+tp. The plans are only
// layouts (of the batch, the params and the optimizer state); autograd (autograd/) computes the
// gradients with sharded ops, and the optimizer (optim/optimizer.h) redistributes each gradient to
// its state layout, so every collective is one the planner chose.
//
//   bazel run --config=opt //examples:train_mlp
//   bazel run //examples:train_mlp -- --plans ddp,fsdp --steps 5 --check
//
// One JSON line per run:
//   {"plan": "fsdp", "ranks": 4, "initial_loss": ..., "final_loss": ..., "max_param_diff_vs_single": ...,
//    "bytes_per_rank": {"params": ..., "grads": ..., "optimizer": ...}}
// initial_loss is the loss before the first update, final_loss after the last one;
// max_param_diff_vs_single is the largest |param - single-rank param| after the last step (f32);
// bytes_per_rank is rank 0's Optimizer::BytesPerRank after the last step. The lines are written
// by base/json.h's JsonWriter: numbers are the shortest text that parses back to the same double
// (a loss of 0.1f prints as 0.10000000149011612, a difference of 2^-23 as 1.1920928955078125e-07),
// and a value that is not finite is null.
//
// Then (--program PLAN, default fsdp) the same training as one compiled program
// (train/compiled_step.h: forward + backward + AdamW update, every collective inserted by the
// planner), printed with its cost and peak live bytes per rank, and one more JSON line with
// "mode": "compiled" and "peak_live_bytes_per_rank".
//
// With --check the exit code is 1 unless every run's loss decreased, every plan's params match the
// single rank within 1e-4 (the compiled run too), and the bytes per rank are exactly 1/4 of the single rank's where the
// plan shards them (zero1: grads and optimizer state; fsdp: params, grads and optimizer state).
#include <algorithm>
#include <span>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/base/cli.h"
#include "meshflow/base/json.h"
#include "meshflow/base/lcg.h"
#include "meshflow/base/parse.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/compiler/program.h"
#include "meshflow/train/compiled_step.h"
#include "meshflow/optim/optimizer.h"

namespace meshflow {
namespace {

constexpr const char* kUsage =
    "usage: train_mlp [--plans LIST] [--steps N] [--program PLAN] [--check]\n"
    "\n"
    "Trains a 2-layer MLP regression (x[32,16] -> 32 -> 8, gelu, MSE) with AdamW on one rank, then on 4\n"
    "thread ranks under each plan, and prints one JSON line per run.\n"
    "\n"
    "flags:\n"
    "  --plans LIST  comma-separated subset of ddp,zero1,fsdp,tp,fsdp+tp (default: all)\n"
    "  --steps N     optimizer steps per run, 1..1000 (default 20)\n"
    "  --program PLAN  also train PLAN (one of ddp,zero1,fsdp,tp,fsdp+tp; default fsdp) as one compiled\n"
    "                program (forward + backward + AdamW update, train/compiled_step.h), print it with\n"
    "                every inserted collective and its peak live bytes per rank; 'none' skips it\n"
    "  --check       exit 1 unless every run matches the single rank (see the header of train_mlp.cc)\n"
    "  -h, --help    print this help and exit\n"
    "\n"
    "exit codes: 0 success, 1 a run or a check failed, 2 bad input (message on stderr).\n";

constexpr int64_t kBatch = 32, kIn = 16, kHidden = 32, kOut = 8;

// The params, in order: w1 [16,32], b1 [32], w2 [32,8], b2 [8].
const char* const kParamNames[] = {"w1", "b1", "w2", "b2"};
const std::vector<int64_t> kParamShapes[] = {{kIn, kHidden}, {kHidden}, {kHidden, kOut}, {kOut}};

// Deterministic pseudo-random values in [-scale, scale].
Tensor Values(std::vector<int64_t> shape, uint32_t seed, double scale) {
  Tensor t = Tensor::Zeros(DType::kF32, std::move(shape));
  Lcg32 g = Lcg32::Seeded(seed, 12345);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, scale * g.NextSymmetric());
  return t;
}

struct Problem {
  Tensor x = Values({kBatch, kIn}, 1, 1.0);
  Tensor y;  // targets: a fixed random 2-layer teacher
  std::vector<Tensor> init;
  Problem() {
    const Tensor a = Values({kIn, kOut}, 7, 0.5);
    y = Tensor::Zeros(DType::kF32, {kBatch, kOut});
    for (int64_t b = 0; b < kBatch; ++b) {
      for (int64_t o = 0; o < kOut; ++o) {
        double s = 0;
        for (int64_t i = 0; i < kIn; ++i) s += x.GetAsDouble(b * kIn + i) * a.GetAsDouble(i * kOut + o);
        y.SetFromDouble(b * kOut + o, std::tanh(s));
      }
    }
    init = {Values(kParamShapes[0], 2, 0.25), Values(kParamShapes[1], 3, 0.05), Values(kParamShapes[2], 4, 0.18),
            Values(kParamShapes[3], 5, 0.05)};
  }
};

// A parallel plan: the mesh, the batch layout (of x and y: dim 0 is the batch) and, per param, its
// layout and its optimizer-state layout (nullopt: the param's).
struct PlanSpec {
  std::string name;
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> mesh_names;
  Placements batch;
  std::vector<Placements> params;
  std::vector<std::optional<Placements>> state;
};

std::vector<PlanSpec> AllPlans() {
  const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1};
  return {
      {"single", {1}, {"dp"}, {r}, {{r}, {r}, {r}, {r}}, {{}, {}, {}, {}}},
      {"ddp", {4}, {"dp"}, {s0}, {{r}, {r}, {r}, {r}}, {{}, {}, {}, {}}},
      {"zero1", {4}, {"dp"}, {s0}, {{r}, {r}, {r}, {r}}, {Placements{s0}, Placements{s0}, Placements{s0}, Placements{s0}}},
      {"fsdp", {4}, {"dp"}, {s0}, {{s0}, {s0}, {s0}, {s0}}, {{}, {}, {}, {}}},
      // Megatron: w1 column-parallel (with b1), w2 row-parallel; b2 replicated.
      {"tp", {4}, {"tp"}, {r}, {{s1}, {s0}, {s0}, {r}}, {{}, {}, {}, {}}},
      // dp x tp: the tp layouts above, each param also sharded over dp on a dim tp leaves whole.
      {"fsdp+tp", {2, 2}, {"dp", "tp"}, {s0, r}, {{s0, s1}, {s0, s0}, {s1, s0}, {s0, r}}, {{}, {}, {}, {}}},
  };
}

struct RunResult {
  double initial_loss = 0;
  double final_loss = 0;
  std::vector<Tensor> params;  // full values after the last step
  OptimizerBytes bytes;
};

// loss = mean((gelu(x w1 + b1) w2 + b2 - y)^2)
StatusOr<Variable> Loss(const std::vector<Variable>& p, const Variable& x, const Variable& y, RankContext& c) {
  MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(x, p[0], c));
  MF_ASSIGN_OR_RETURN(Variable hb, autograd::Add(h, p[1], c));
  MF_ASSIGN_OR_RETURN(Variable a, autograd::Gelu(hb, c));
  MF_ASSIGN_OR_RETURN(Variable o, autograd::Matmul(a, p[2], c));
  MF_ASSIGN_OR_RETURN(Variable ob, autograd::Add(o, p[3], c));
  MF_ASSIGN_OR_RETURN(Variable d, autograd::Sub(ob, y, c));
  MF_ASSIGN_OR_RETURN(Variable sq, autograd::Mul(d, d, c));
  return autograd::Mean(sq, {}, false, c);
}

StatusOr<RunResult> Train(const PlanSpec& plan, const Problem& prob, int steps) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(plan.mesh_shape, plan.mesh_names));
  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(mesh.size()));
  RunResult result;
  result.params.assign(4, Tensor::Zeros(DType::kF32, {}));
  MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.world_rank();
    std::vector<Variable> params;
    std::vector<ParamSpec> specs;
    for (size_t i = 0; i < 4; ++i) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(kParamShapes[i], mesh, plan.params[i]));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(prob.init[i], l, rank));
      MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), true));
      params.push_back(std::move(v));
    }
    for (size_t i = 0; i < 4; ++i) {
      std::optional<Layout> state;
      if (plan.state[i]) {
        MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(kParamShapes[i], mesh, *plan.state[i]));
        state = std::move(l);
      }
      specs.push_back(ParamSpec{kParamNames[i], params[i].mutable_leaf_value(), std::move(state)});
    }
    AdamWOptions options;
    options.lr = 1e-2;
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(std::move(specs), options, ctx));
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({kBatch, kIn}, mesh, plan.batch));
    MF_ASSIGN_OR_RETURN(Layout yl, Layout::Create({kBatch, kOut}, mesh, plan.batch));
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(prob.x, xl, rank));
    MF_ASSIGN_OR_RETURN(DTensor yd, Distribute(prob.y, yl, rank));
    MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(std::move(xd), false));
    MF_ASSIGN_OR_RETURN(Variable y, Variable::Leaf(std::move(yd), false));
    double initial = 0, final_loss = 0;
    for (int step = 0; step <= steps; ++step) {
      MF_ASSIGN_OR_RETURN(Variable loss, Loss(params, x, y, ctx));
      MF_ASSIGN_OR_RETURN(Tensor l, FullTensor(loss.value(), ctx));
      if (step == 0) initial = l.GetAsDouble(0);
      final_loss = l.GetAsDouble(0);
      if (step == steps) break;
      MF_RETURN_IF_ERROR(Backward(loss, ctx));
      std::vector<const DTensor*> grads;
      for (const Variable& p : params) grads.push_back(p.grad() ? &*p.grad() : nullptr);
      MF_RETURN_IF_ERROR(opt->Step(grads, ctx));
      for (Variable& p : params) p.ZeroGrad();
    }
    std::vector<Tensor> full;
    for (const Variable& p : params) {
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(p.value(), ctx));
      full.push_back(std::move(f));
    }
    if (rank == 0) {
      result.initial_loss = initial;
      result.final_loss = final_loss;
      result.params = std::move(full);
      result.bytes = opt->BytesPerRank();
    }
    return Status::Ok();
  }));
  return result;
}

// The same model as one compiled training step (train/compiled_step.h): the forward graph with
// the plan's layouts as annotations; CompileTrainStep appends backward and update.
struct CompiledRun {
  RunResult result;
  std::string program;  // CompiledTrainStep::ToText
  int64_t peak_live_bytes = 0;
};

StatusOr<CompiledRun> TrainCompiled(const PlanSpec& plan, const Problem& prob, int steps) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(plan.mesh_shape, plan.mesh_names));
  Graph g(mesh);
  MF_ASSIGN_OR_RETURN(ValueId x, g.Input("x", {kBatch, kIn}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId y, g.Input("y", {kBatch, kOut}, DType::kF32));
  MF_RETURN_IF_ERROR(g.Annotate(x, plan.batch));
  MF_RETURN_IF_ERROR(g.Annotate(y, plan.batch));
  std::vector<ValueId> p;
  TrainStepSpec spec;
  for (size_t i = 0; i < 4; ++i) {
    MF_ASSIGN_OR_RETURN(ValueId v, g.Param(kParamNames[i], kParamShapes[i], DType::kF32));
    MF_RETURN_IF_ERROR(g.Annotate(v, plan.params[i]));
    p.push_back(v);
    std::optional<Layout> state;
    if (plan.state[i]) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(kParamShapes[i], mesh, *plan.state[i]));
      state = std::move(l);
    }
    spec.state_layouts.push_back(std::move(state));
  }
  // loss = mean((gelu(x w1 + b1) w2 + b2 - y)^2), as Loss above.
  MF_ASSIGN_OR_RETURN(ValueId h, g.Apply(OpSpec::Matmul(), {x, p[0]}, "h"));
  MF_ASSIGN_OR_RETURN(ValueId hb, g.Apply(OpSpec::Binary(BinaryOp::kAdd), {h, p[1]}, "hb"));
  MF_ASSIGN_OR_RETURN(ValueId a, g.Apply(OpSpec::Unary(UnaryOp::kGelu), {hb}, "a"));
  MF_ASSIGN_OR_RETURN(ValueId o, g.Apply(OpSpec::Matmul(), {a, p[2]}, "o"));
  MF_ASSIGN_OR_RETURN(ValueId ob, g.Apply(OpSpec::Binary(BinaryOp::kAdd), {o, p[3]}, "ob"));
  MF_ASSIGN_OR_RETURN(ValueId d, g.Apply(OpSpec::Binary(BinaryOp::kSub), {ob, y}, "d"));
  MF_ASSIGN_OR_RETURN(ValueId sq, g.Apply(OpSpec::Binary(BinaryOp::kMul), {d, d}, "sq"));
  MF_ASSIGN_OR_RETURN(ValueId loss, g.Apply(OpSpec::Reduce(ReduceKind::kMean, {}, false), {sq}, "loss"));
  // The forward alone, for the loss after the last update.
  Graph forward = g;
  MF_RETURN_IF_ERROR(forward.MarkOutput(loss));
  MF_ASSIGN_OR_RETURN(Program eval, Compile(forward));
  spec.loss = loss;
  spec.params = p;
  AdamWOptions options;
  options.lr = 1e-2;
  spec.optimizer = options;
  MF_ASSIGN_OR_RETURN(CompiledTrainStep compiled, CompileTrainStep(std::move(g), spec));
  CompiledRun out;
  out.program = compiled.ToText();
  out.peak_live_bytes = ReportMemory(compiled.program).max_peak_live_bytes;
  auto step = std::make_shared<const CompiledTrainStep>(std::move(compiled));
  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(mesh.size()));
  out.result.params.assign(4, Tensor::Zeros(DType::kF32, {}));
  MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.world_rank();
    std::vector<DTensor> params;
    for (size_t i = 0; i < 4; ++i) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(kParamShapes[i], mesh, plan.params[i]));
      MF_ASSIGN_OR_RETURN(DTensor dt, Distribute(prob.init[i], l, rank));
      params.push_back(std::move(dt));
    }
    MF_ASSIGN_OR_RETURN(TrainStepRunner runner, TrainStepRunner::Create(step, std::move(params)));
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({kBatch, kIn}, mesh, plan.batch));
    MF_ASSIGN_OR_RETURN(Layout yl, Layout::Create({kBatch, kOut}, mesh, plan.batch));
    std::vector<DTensor> batch;
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(prob.x, xl, rank));
    MF_ASSIGN_OR_RETURN(DTensor yd, Distribute(prob.y, yl, rank));
    batch.push_back(std::move(xd));
    batch.push_back(std::move(yd));
    double initial = 0;
    for (int s = 0; s < steps; ++s) {
      MF_ASSIGN_OR_RETURN(double l, runner.Step(batch, ctx));
      if (s == 0) initial = l;
    }
    // The forward program's inputs: x, y, then the params (declaration order).
    std::vector<const DTensor*> in = {&batch[0], &batch[1]};
    for (const DTensor& t : runner.params()) in.push_back(&t);
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> final_loss, ExecuteBorrowed(eval, ctx, in));
    MF_ASSIGN_OR_RETURN(Tensor fl, FullTensor(final_loss[0], ctx));
    std::vector<Tensor> full;
    for (const DTensor& t : runner.params()) {
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(t, ctx));
      full.push_back(std::move(f));
    }
    if (rank == 0) {
      out.result.initial_loss = initial;
      out.result.final_loss = fl.GetAsDouble(0);
      out.result.params = std::move(full);
      out.result.bytes = runner.BytesPerRank();
    }
    return Status::Ok();
  }));
  return out;
}

double MaxDiff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape()) return INFINITY;
    for (int64_t j = 0; j < a[i].NumElements(); ++j) d = std::max(d, std::abs(a[i].GetAsDouble(j) - b[i].GetAsDouble(j)));
  }
  return d;
}

// One run's JSON line (see the header); `peak_live_bytes` only for the compiled run, which also
// gets "mode": "compiled".
std::string RunJson(const std::string& plan, int64_t ranks, const RunResult& r, double diff,
                    std::optional<int64_t> peak_live_bytes) {
  JsonWriter w(JsonStyle::kSpaced);
  w.BeginObject();
  w.Key("plan").String(plan);
  if (peak_live_bytes) w.Key("mode").String("compiled");
  w.Key("ranks").Int(ranks);
  w.Key("initial_loss").Double(r.initial_loss);
  w.Key("final_loss").Double(r.final_loss);
  w.Key("max_param_diff_vs_single").Double(diff);
  w.Key("bytes_per_rank").BeginObject();
  w.Key("params").Int(r.bytes.params).Key("grads").Int(r.bytes.grads).Key("optimizer").Int(r.bytes.optimizer);
  w.EndObject();
  if (peak_live_bytes) w.Key("peak_live_bytes_per_rank").Int(*peak_live_bytes);
  w.EndObject();
  return *std::move(w).Finish();  // well formed by construction
}

int Main(int argc, char** argv) {
  if (HasHelpFlag(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::vector<std::string> wanted;
  int steps = 20;
  bool check = false;
  std::string program_plan = "fsdp";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--plans" || arg == "--steps" || arg == "--program") && i + 1 >= argc) {
      std::fprintf(stderr, "train_mlp: %s needs a value; see 'train_mlp --help'\n", argv[i]);
      return 2;
    }
    if (arg == "--plans") {
      std::string_view list = argv[++i];
      while (!list.empty()) {
        const size_t comma = list.find(',');
        const std::string_view name = list.substr(0, comma);
        StatusOr<size_t> c = ParseChoice("--plans", name, {"ddp", "zero1", "fsdp", "tp", "fsdp+tp"});
        if (!c.ok()) {
          std::fprintf(stderr, "train_mlp: %s\n", c.status().message().c_str());
          return 2;
        }
        wanted.emplace_back(name);
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
    } else if (arg == "--steps") {
      StatusOr<int64_t> n = ParseInt64(argv[++i], "--steps");
      if (!n.ok() || *n < 1 || *n > 1000) {
        std::fprintf(stderr, "train_mlp: --steps '%s' must be an integer in [1, 1000]\n", argv[i]);
        return 2;
      }
      steps = static_cast<int>(*n);
    } else if (arg == "--program") {
      StatusOr<size_t> c = ParseChoice("--program", argv[++i], {"ddp", "zero1", "fsdp", "tp", "fsdp+tp", "none"});
      if (!c.ok()) {
        std::fprintf(stderr, "train_mlp: %s\n", c.status().message().c_str());
        return 2;
      }
      program_plan = argv[i];
    } else if (arg == "--check") {
      check = true;
    } else {
      std::fprintf(stderr, "train_mlp: %s\n", UnknownArgumentError("train_mlp", arg).message().c_str());
      return 2;
    }
  }
  const Problem prob;
  std::optional<RunResult> single;
  int failures = 0;
  for (const PlanSpec& plan : AllPlans()) {
    if (plan.name != "single" && !wanted.empty() && std::find(wanted.begin(), wanted.end(), plan.name) == wanted.end()) {
      continue;
    }
    StatusOr<RunResult> r = Train(plan, prob, steps);
    if (!r.ok()) {
      std::fprintf(stderr, "train_mlp: plan %s: %s\n", plan.name.c_str(), r.status().ToString().c_str());
      ++failures;
      continue;
    }
    if (plan.name == "single") single = *r;
    const double diff = single ? MaxDiff(r->params, single->params) : INFINITY;
    int64_t ranks = 1;
    for (int64_t d : plan.mesh_shape) ranks *= d;
    std::printf("%s\n", RunJson(plan.name, ranks, *r, diff, std::nullopt).c_str());
    std::fflush(stdout);
    if (!check || !single) continue;
    std::vector<std::string> bad;
    if (!(r->final_loss < r->initial_loss)) bad.push_back("the loss did not decrease");
    if (!(diff <= 1e-4)) bad.push_back("params differ from the single rank by " + std::to_string(diff));
    const OptimizerBytes& s = single->bytes;
    const OptimizerBytes& b = r->bytes;
    if (plan.name == "ddp" && !(b == s)) bad.push_back("ddp bytes differ from the single rank's");
    if (plan.name == "zero1" && !(b.params == s.params && b.grads * 4 == s.grads && b.optimizer * 4 == s.optimizer)) {
      bad.push_back("zero1 bytes are not params x1, grads and optimizer x1/4");
    }
    if (plan.name == "fsdp" && !(b.params * 4 == s.params && b.grads * 4 == s.grads && b.optimizer * 4 == s.optimizer)) {
      bad.push_back("fsdp bytes are not x1/4");
    }
    for (const std::string& m : bad) std::fprintf(stderr, "train_mlp: plan %s: check failed: %s\n", plan.name.c_str(), m.c_str());
    failures += static_cast<int>(bad.size());
  }
  if (program_plan != "none" && single) {
    for (const PlanSpec& plan : AllPlans()) {
      if (plan.name != program_plan) continue;
      StatusOr<CompiledRun> c = TrainCompiled(plan, prob, steps);
      if (!c.ok()) {
        std::fprintf(stderr, "train_mlp: compiled plan %s: %s\n", plan.name.c_str(), c.status().ToString().c_str());
        ++failures;
        continue;
      }
      const RunResult& r = c->result;
      const double diff = MaxDiff(r.params, single->params);
      int64_t ranks = 1;
      for (int64_t dim : plan.mesh_shape) ranks *= dim;
      std::printf("compiled training step, plan %s (forward + backward + AdamW update in one program):\n%s",
                  plan.name.c_str(), c->program.c_str());
      std::printf("%s\n", RunJson(plan.name, ranks, r, diff, c->peak_live_bytes).c_str());
      std::fflush(stdout);
      if (!check) continue;
      std::vector<std::string> bad;
      if (!(r.final_loss < r.initial_loss)) bad.push_back("the loss did not decrease");
      if (!(diff <= 1e-4)) bad.push_back("params differ from the single rank by " + std::to_string(diff));
      for (const std::string& m : bad) {
        std::fprintf(stderr, "train_mlp: compiled plan %s: check failed: %s\n", plan.name.c_str(), m.c_str());
      }
      failures += static_cast<int>(bad.size());
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
