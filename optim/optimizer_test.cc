#include "meshflow/optim/clip.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

ThreadWorld& WorldOf(int n) {
  static auto* worlds = new std::map<int, std::unique_ptr<ThreadWorld>>();
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& w = (*worlds)[n];
  if (!w) w = std::move(ThreadWorld::Create(n).value());
  return *w;
}

// Runs fn(ctx) on every rank of `mesh` (a fresh RankContext per rank); the first error, if any.
template <typename F>
Status RunOn(const DeviceMesh& mesh, F&& fn) {
  return WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return fn(ctx);
  });
}

// Deterministic pseudo-random values in [-1, 1) (not dyadic: f32 sums depend on the order).
double Val(uint64_t seed, int64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull + 1;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<double>(x % 2000003) / 1000001.5 - 1.0;
}

Tensor Filled(DType dtype, const std::vector<int64_t>& shape, uint64_t seed) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, Val(seed, i));
  return t;
}

DeviceMesh Mesh(std::vector<int64_t> shape, std::vector<std::string> names = {}) {
  return DeviceMesh::Create(std::move(shape), std::move(names)).value();
}

Layout MakeLayout(const std::vector<int64_t>& shape, const DeviceMesh& mesh, const std::string& placements) {
  return Layout::Create(shape, mesh, ParsePlacements(placements).value()).value();
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.NumElements()));
  for (int64_t i = 0; i < t.NumElements(); ++i) v[static_cast<size_t>(i)] = t.GetAsDouble(i);
  return v;
}

// A gradient given as one part per "partial index" (the linear index of a rank's coordinates over
// the Partial mesh dims of its layout); the gradient is the f32 sum of the parts. Non-Partial
// layouts use one part.
struct PartialGrad {
  std::vector<Tensor> parts;
  Tensor full;  // sum of the parts (f32, summed in double then rounded)
};

int NumPartialParts(const Layout& layout) {
  int n = 1;
  for (int d = 0; d < layout.mesh().ndim(); ++d) {
    if (IsPartial(layout.placement(d))) n *= static_cast<int>(layout.mesh().shape()[static_cast<size_t>(d)]);
  }
  return n;
}

PartialGrad MakeGrad(const std::vector<int64_t>& shape, int num_parts, uint64_t seed, DType part_dtype = DType::kF32) {
  PartialGrad g;
  for (int r = 0; r < num_parts; ++r) g.parts.push_back(Filled(part_dtype, shape, seed * 131 + static_cast<uint64_t>(r)));
  g.full = Tensor::Zeros(DType::kF32, shape);
  for (int64_t i = 0; i < g.full.NumElements(); ++i) {
    double s = 0;
    for (const Tensor& p : g.parts) s += p.GetAsDouble(i);
    g.full.SetFromDouble(i, s);
  }
  return g;
}

// This rank's local part of `g` under `layout`.
StatusOr<DTensor> LocalGrad(const PartialGrad& g, const Layout& layout, int rank) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, layout.mesh().Coordinate(rank));
  int64_t index = 0;
  for (int d = 0; d < layout.mesh().ndim(); ++d) {
    if (IsPartial(layout.placement(d))) {
      index = index * layout.mesh().shape()[static_cast<size_t>(d)] + coord[static_cast<size_t>(d)];
    }
  }
  const Tensor& source = layout.HasPartial() ? g.parts[static_cast<size_t>(index)] : g.full;
  MF_ASSIGN_OR_RETURN(Box box, layout.LocalBox(rank));
  return DTensor::FromLocal(source.Slice(box), layout, rank);
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double abs_tol, double rel_tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], abs_tol + rel_tol * std::abs(want[i])) << what << " element " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Single-rank steps against hand-computed references (f64).

struct SingleRankRun {
  std::vector<double> param;
  int64_t step_count = 0;
};

// `steps` steps of `options` on one f64 param of shape {3, 2} on a 1-rank world, gradient k =
// Filled(seed 10 + k).
SingleRankRun RunSingleRankF64(const OptimizerOptions& options, int steps) {
  SingleRankRun out;
  const DeviceMesh mesh = Mesh({1});
  const Status st = RunOn(mesh, [&](RankContext& ctx) -> Status {
    const Layout layout = MakeLayout({3, 2}, mesh, "R");
    MF_ASSIGN_OR_RETURN(DTensor p, Distribute(Filled(DType::kF64, {3, 2}, 1), layout, 0));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, Optimizer::Create({{"p", &p, std::nullopt}}, options, ctx));
    for (int k = 0; k < steps; ++k) {
      MF_ASSIGN_OR_RETURN(DTensor g, Distribute(Filled(DType::kF64, {3, 2}, 10 + static_cast<uint64_t>(k)), layout, 0));
      const std::vector<const DTensor*> grads = {&g};
      MF_RETURN_IF_ERROR(opt->Step(grads, ctx));
    }
    out.param = Values(p.local());
    out.step_count = opt->step_count();
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(OptimizerTest, SgdMomentumMatchesHandComputed) {
  for (MomentumKind kind : {MomentumKind::kClassic, MomentumKind::kNesterov}) {
    SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.dampening = kind == MomentumKind::kClassic ? 0.25 : 0.0;
    o.weight_decay = 0.01;
    o.momentum_kind = kind;
    const int steps = 3;
    const SingleRankRun got = RunSingleRankF64(o, steps);
    EXPECT_EQ(got.step_count, steps);
    const Tensor p0 = Filled(DType::kF64, {3, 2}, 1);
    std::vector<double> want;
    for (int64_t i = 0; i < 6; ++i) {
      double p = p0.GetAsDouble(i), buf = 0;
      for (int k = 0; k < steps; ++k) {
        double d = Val(10 + static_cast<uint64_t>(k), i) + 0.01 * p;
        buf = k == 0 ? d : 0.9 * buf + (1 - o.dampening) * d;
        d = kind == MomentumKind::kNesterov ? d + 0.9 * buf : buf;
        p -= 0.1 * d;
      }
      want.push_back(p);
    }
    ExpectNear(got.param, want, 1e-14, 0, kind == MomentumKind::kClassic ? "classic" : "nesterov");
  }
}

TEST(OptimizerTest, SgdWithoutMomentumMatchesHandComputed) {
  SgdOptions o;
  o.lr = 0.5;
  const SingleRankRun got = RunSingleRankF64(o, 2);
  const Tensor p0 = Filled(DType::kF64, {3, 2}, 1);
  std::vector<double> want;
  for (int64_t i = 0; i < 6; ++i) want.push_back(p0.GetAsDouble(i) - 0.5 * Val(10, i) - 0.5 * Val(11, i));
  ExpectNear(got.param, want, 1e-15, 0, "sgd");
}

TEST(OptimizerTest, AdamWMatchesHandComputed) {
  AdamWOptions o;
  o.lr = 0.01;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.weight_decay = 0.1;
  const int steps = 4;
  const SingleRankRun got = RunSingleRankF64(o, steps);
  const Tensor p0 = Filled(DType::kF64, {3, 2}, 1);
  std::vector<double> want;
  for (int64_t i = 0; i < 6; ++i) {
    double p = p0.GetAsDouble(i), m = 0, v = 0;
    for (int k = 0; k < steps; ++k) {
      const double g = Val(10 + static_cast<uint64_t>(k), i);
      const int t = k + 1;
      p *= 1 - o.lr * o.weight_decay;
      m = o.beta1 * m + (1 - o.beta1) * g;
      v = o.beta2 * v + (1 - o.beta2) * g * g;
      const double m_hat = m / (1 - std::pow(o.beta1, t));
      const double v_hat = v / (1 - std::pow(o.beta2, t));
      p -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
    want.push_back(p);
  }
  ExpectNear(got.param, want, 1e-13, 0, "adamw");
}

// A bf16 param gets an f32 master; the param is the master rounded to bf16 after every step.
TEST(OptimizerTest, Bf16ParamKeepsF32Master) {
  const DeviceMesh mesh = Mesh({1});
  const Status st = RunOn(mesh, [&](RankContext& ctx) -> Status {
    const Layout layout = MakeLayout({4, 3}, mesh, "R");
    MF_ASSIGN_OR_RETURN(DTensor p, Distribute(Filled(DType::kBF16, {4, 3}, 3), layout, 0));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create({{"p", &p, std::nullopt}}, AdamWOptions{}, ctx));
    EXPECT_EQ(opt->compute_dtype(0), DType::kF32);
    MF_ASSIGN_OR_RETURN(DTensor g, Distribute(Filled(DType::kBF16, {4, 3}, 4), layout, 0));
    const std::vector<const DTensor*> grads = {&g};
    MF_RETURN_IF_ERROR(opt->Step(grads, ctx));
    const std::vector<StateTensor> state = opt->StateTensors();
    EXPECT_EQ(state.size(), 3u);
    const DTensor* master = nullptr;
    for (const StateTensor& s : state) {
      if (s.name == "p.master") master = s.tensor;
    }
    EXPECT_NE(master, nullptr);
    if (master == nullptr) return Status::Ok();
    EXPECT_EQ(master->dtype(), DType::kF32);
    EXPECT_EQ(p.dtype(), DType::kBF16);
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(p.local().GetAsDouble(i),
                static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(master->local().GetAsDouble(i))))));
    }
    const OptimizerBytes bytes = opt->BytesPerRank();
    EXPECT_EQ(bytes.params, 12 * 2);
    EXPECT_EQ(bytes.grads, 12 * 4);
    EXPECT_EQ(bytes.optimizer, 3 * 12 * 4);
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// ---------------------------------------------------------------------------------------------
// Multi-rank layouts (DDP, ZeRO-1, FSDP, TP) against the single-rank optimizer.

struct PlanSpec {
  std::string name;
  // Param, state ("" = the param's layout) and gradient placements for w {5, 3} and b {7}.
  std::string w_param, w_state, w_grad;
  std::string b_param, b_state, b_grad;
  bool tp_mesh = false;  // mesh {n/2, 2} ("dp", "tp") instead of {n} ("dp")
};

const std::vector<PlanSpec>& Plans() {
  static const auto* plans = new std::vector<PlanSpec>{
      {"ddp", "R", "", "P(sum)", "R", "", "P(sum)", false},
      {"zero1", "R", "S(0)", "P(sum)", "R", "S(0)", "P(sum)", false},
      {"fsdp", "S(0)", "", "P(sum)", "S(0)", "", "P(sum)", false},
      {"tp", "R,S(1)", "", "P(sum),S(1)", "R,S(0)", "", "P(sum),S(0)", true},
      {"zero1+tp", "R,S(1)", "S(0),S(1)", "P(sum),S(1)", "R,S(0)", "S(0),S(0)", "P(sum),R", true},
      {"fsdp+tp", "S(0),S(1)", "", "P(sum),S(1)", "S(0),R", "", "P(sum),R", true},
  };
  return *plans;
}

struct MultiRunResult {
  std::vector<std::vector<double>> params;  // full params after the steps, rank 0's view
  std::optional<double> last_norm;
  OptimizerBytes bytes;  // rank 0
};

const std::vector<std::vector<int64_t>> kShapes = {{5, 3}, {7}};
constexpr int kSteps = 3;

using StepGrads = std::vector<std::vector<PartialGrad>>;  // [step][param]

// Gradients for kSteps steps with one part per Partial index of the given gradient placements.
StepGrads MakeStepGrads(const DeviceMesh& mesh, const std::vector<std::string>& grad_pl,
                        DType part_dtype = DType::kF32) {
  StepGrads grads(kSteps);
  for (int k = 0; k < kSteps; ++k) {
    for (size_t i = 0; i < kShapes.size(); ++i) {
      grads[static_cast<size_t>(k)].push_back(MakeGrad(kShapes[i], NumPartialParts(MakeLayout(kShapes[i], mesh, grad_pl[i])),
                                                       100 * static_cast<uint64_t>(k) + i, part_dtype));
    }
  }
  return grads;
}

// kSteps steps of `options` on `mesh` with the gradients `grads`, each given under grad_pl.
// The single-rank reference is the same function with mesh {1} and all-Replicate layouts (the
// gradients are then the full sums of the parts).
MultiRunResult RunPlan(const DeviceMesh& mesh, const std::vector<std::string>& param_pl,
                       const std::vector<std::string>& state_pl, const std::vector<std::string>& grad_pl,
                       const OptimizerOptions& options, std::optional<double> max_norm, const StepGrads& grads,
                       DType param_dtype = DType::kF32) {
  MultiRunResult result;
  std::vector<Layout> grad_layouts;
  for (size_t i = 0; i < kShapes.size(); ++i) grad_layouts.push_back(MakeLayout(kShapes[i], mesh, grad_pl[i]));
  std::mutex mu;
  std::vector<std::vector<std::vector<double>>> per_rank(static_cast<size_t>(mesh.size()));
  std::vector<std::optional<double>> norms(static_cast<size_t>(mesh.size()));
  const Status st = RunOn(mesh, [&](RankContext& ctx) -> Status {
    const int rank = ctx.world_rank();
    std::vector<DTensor> params;
    params.reserve(kShapes.size());
    std::vector<ParamSpec> specs;
    for (size_t i = 0; i < kShapes.size(); ++i) {
      MF_ASSIGN_OR_RETURN(DTensor p, Distribute(Filled(param_dtype, kShapes[i], 7 + i),
                                                MakeLayout(kShapes[i], mesh, param_pl[i]), rank));
      params.push_back(std::move(p));
    }
    for (size_t i = 0; i < kShapes.size(); ++i) {
      std::optional<Layout> state;
      if (!state_pl[i].empty()) state = MakeLayout(kShapes[i], mesh, state_pl[i]);
      specs.push_back({"p" + std::to_string(i), &params[i], state});
    }
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, Optimizer::Create(specs, options, ctx));
    StepOptions step_options;
    step_options.max_grad_norm = max_norm;
    for (int k = 0; k < kSteps; ++k) {
      std::vector<DTensor> g;
      for (size_t i = 0; i < kShapes.size(); ++i) {
        MF_ASSIGN_OR_RETURN(DTensor gi, LocalGrad(grads[static_cast<size_t>(k)][i], grad_layouts[i], rank));
        g.push_back(std::move(gi));
      }
      const std::vector<const DTensor*> ptrs = {&g[0], &g[1]};
      MF_RETURN_IF_ERROR(opt->Step(ptrs, ctx, step_options));
    }
    std::vector<std::vector<double>> full;
    for (const DTensor& p : params) {
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(p, ctx));
      full.push_back(Values(f));
    }
    std::lock_guard<std::mutex> lock(mu);
    per_rank[static_cast<size_t>(rank)] = std::move(full);
    norms[static_cast<size_t>(rank)] = opt->last_grad_norm();
    if (rank == 0) result.bytes = opt->BytesPerRank();
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return result;
  // Every rank holds bit-identical params and gets the same norm.
  for (size_t r = 1; r < per_rank.size(); ++r) {
    EXPECT_EQ(per_rank[r], per_rank[0]) << "rank " << r;
    EXPECT_EQ(norms[r], norms[0]) << "rank " << r;
  }
  result.params = per_rank[0];
  result.last_norm = norms[0];
  return result;
}

MultiRunResult RunSingle(const OptimizerOptions& options, std::optional<double> max_norm, const StepGrads& grads,
                         DType param_dtype = DType::kF32) {
  return RunPlan(Mesh({1}), {"R", "R"}, {"", ""}, {"R", "R"}, options, max_norm, grads, param_dtype);
}

std::vector<std::string> Split(const std::string& a, const std::string& b) { return {a, b}; }

TEST(OptimizerTest, LayoutsMatchSingleRank) {
  SgdOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  sgd.weight_decay = 0.01;
  AdamWOptions adamw;
  adamw.lr = 0.05;
  adamw.weight_decay = 0.1;
  const std::vector<std::pair<std::string, OptimizerOptions>> optimizers = {{"sgd", sgd}, {"adamw", adamw}};
  for (const auto& [opt_name, options] : optimizers) {
    for (std::optional<double> max_norm : {std::optional<double>(), std::optional<double>(0.5)}) {
      for (int n : {2, 4, 8}) {
        for (const PlanSpec& plan : Plans()) {
          const std::string what = opt_name + " " + plan.name + " n=" + std::to_string(n) +
                                   (max_norm.has_value() ? " clip" : "");
          SCOPED_TRACE(what);
          const DeviceMesh mesh = plan.tp_mesh ? Mesh({n / 2, 2}, {"dp", "tp"}) : Mesh({n}, {"dp"});
          const std::vector<std::string> grad_pl = Split(plan.w_grad, plan.b_grad);
          const StepGrads grads = MakeStepGrads(mesh, grad_pl);
          const MultiRunResult want = RunSingle(options, max_norm, grads);
          ASSERT_EQ(want.params.size(), 2u);
          const MultiRunResult got = RunPlan(mesh, Split(plan.w_param, plan.b_param),
                                             Split(plan.w_state, plan.b_state), grad_pl, options, max_norm, grads);
          ASSERT_EQ(got.params.size(), 2u);
          for (size_t i = 0; i < 2; ++i) {
            ExpectNear(got.params[i], want.params[i], 2e-6, 2e-6, "param " + std::to_string(i));
          }
          ASSERT_EQ(got.last_norm.has_value(), max_norm.has_value());
          if (max_norm.has_value()) {
            EXPECT_NEAR(*got.last_norm, *want.last_norm, 1e-6 * *want.last_norm);
          }
        }
      }
    }
  }
}

// bf16 params and bf16 Partial gradients: f32 masters in the state layouts, gradients reduced in
// f32. Params are compared after rounding to bf16, within one bf16 ulp of the single-rank result
// (the f32 masters differ by reduction order only; a rounding boundary may fall between them).
TEST(OptimizerTest, Bf16LayoutsMatchSingleRank) {
  AdamWOptions adamw;
  adamw.lr = 0.05;
  for (const PlanSpec& plan : Plans()) {
    const int n = 4;
    SCOPED_TRACE(plan.name);
    const DeviceMesh mesh = plan.tp_mesh ? Mesh({n / 2, 2}, {"dp", "tp"}) : Mesh({n}, {"dp"});
    const std::vector<std::string> grad_pl = Split(plan.w_grad, plan.b_grad);
    const StepGrads grads = MakeStepGrads(mesh, grad_pl, DType::kBF16);
    const MultiRunResult want = RunSingle(adamw, 1.0, grads, DType::kBF16);
    const MultiRunResult got = RunPlan(mesh, Split(plan.w_param, plan.b_param), Split(plan.w_state, plan.b_state),
                                       grad_pl, adamw, 1.0, grads, DType::kBF16);
    ASSERT_EQ(got.params.size(), 2u);
    ASSERT_EQ(want.params.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ExpectNear(got.params[i], want.params[i], 1e-6, 1.0 / 128, "param " + std::to_string(i));
    }
  }
}

// Bytes per rank follow the state layouts: ZeRO-1 holds the moments of its dp shard only.
TEST(OptimizerTest, BytesPerRankFollowLayouts) {
  AdamWOptions adamw;
  const DeviceMesh mesh = Mesh({4}, {"dp"});
  // w {5,3}: rows split 2,2,1,0 over 4 ranks -> rank 0 holds 2 rows = 6 elements; b {7}: 2 elements.
  const std::vector<std::string> grad_pl = {"P(sum)", "P(sum)"};
  const StepGrads grads = MakeStepGrads(mesh, grad_pl);
  const MultiRunResult ddp = RunPlan(mesh, {"R", "R"}, {"", ""}, grad_pl, adamw, std::nullopt, grads);
  const MultiRunResult zero = RunPlan(mesh, {"R", "R"}, {"S(0)", "S(0)"}, grad_pl, adamw, std::nullopt, grads);
  const MultiRunResult fsdp = RunPlan(mesh, {"S(0)", "S(0)"}, {"", ""}, grad_pl, adamw, std::nullopt, grads);
  EXPECT_EQ(ddp.bytes, (OptimizerBytes{(15 + 7) * 4, (15 + 7) * 4, 2 * (15 + 7) * 4}));
  EXPECT_EQ(zero.bytes, (OptimizerBytes{(15 + 7) * 4, (6 + 2) * 4, 2 * (6 + 2) * 4}));
  EXPECT_EQ(fsdp.bytes, (OptimizerBytes{(6 + 2) * 4, (6 + 2) * 4, 2 * (6 + 2) * 4}));
}

// ---------------------------------------------------------------------------------------------
// Global-norm clipping.

struct NormCase {
  std::vector<int64_t> mesh;
  std::vector<std::string> placements;  // one per gradient
};

TEST(OptimizerTest, ClipGradNormMatchesSingleRank) {
  const std::vector<std::vector<int64_t>> shapes = {{6, 4}, {5}, {3, 5}, {4, 3}};
  const std::vector<NormCase> cases = {
      {{2}, {"S(0)", "R", "P(sum)", "S(1)"}},
      {{4}, {"S(0)", "R", "P(sum)", "P(sum)"}},
      {{8}, {"S(1)", "S(0)", "P(sum)", "R"}},
      {{2, 2}, {"S(0),S(1)", "R,S(0)", "P(sum),S(1)", "P(sum),P(sum)"}},
      {{2, 4}, {"S(1),S(0)", "R,R", "P(sum),R", "R,P(sum)"}},
      {{2, 2, 2}, {"S(0),R,S(1)", "S(0),S(0),S(0)", "P(sum),S(0),P(sum)", "R,P(sum),S(1)"}},
  };
  for (const NormCase& c : cases) {
    const DeviceMesh mesh = Mesh(c.mesh);
    SCOPED_TRACE(mesh.ToString());
    std::vector<Layout> layouts;
    std::vector<PartialGrad> grads;
    double want_sq = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      layouts.push_back(MakeLayout(shapes[i], mesh, c.placements[i]));
      grads.push_back(MakeGrad(shapes[i], NumPartialParts(layouts[i]), 50 + i));
      for (double v : Values(grads[i].full)) want_sq += v * v;
    }
    const double want = std::sqrt(want_sq);
    const double max_norm = want / 3;
    const double coef = max_norm / (want + 1e-6);
    std::mutex mu;
    std::vector<double> norms(static_cast<size_t>(mesh.size())), clipped_norms(static_cast<size_t>(mesh.size()));
    std::vector<std::vector<double>> clipped;
    const Status st = RunOn(mesh, [&](RankContext& ctx) -> Status {
      const int rank = ctx.world_rank();
      std::vector<DTensor> g;
      for (size_t i = 0; i < shapes.size(); ++i) {
        MF_ASSIGN_OR_RETURN(DTensor gi, LocalGrad(grads[i], layouts[i], rank));
        g.push_back(std::move(gi));
      }
      std::vector<DTensor*> ptrs;
      for (DTensor& x : g) ptrs.push_back(&x);
      const std::vector<const DTensor*> cptrs(ptrs.begin(), ptrs.end());
      MF_ASSIGN_OR_RETURN(double before, GlobalGradNorm(cptrs, ctx));
      MF_ASSIGN_OR_RETURN(double total, ClipGradNorm(ptrs, max_norm, ctx));
      EXPECT_EQ(before, total);
      MF_ASSIGN_OR_RETURN(double after, GlobalGradNorm(cptrs, ctx));
      std::vector<std::vector<double>> full;
      for (const DTensor& x : g) {
        MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(x, ctx));
        full.push_back(Values(f));
      }
      std::lock_guard<std::mutex> lock(mu);
      norms[static_cast<size_t>(rank)] = total;
      clipped_norms[static_cast<size_t>(rank)] = after;
      if (rank == 0) clipped = std::move(full);
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st;
    for (double n : norms) { EXPECT_EQ(n, norms[0]); }  // the same bits on every rank
    EXPECT_NEAR(norms[0], want, 1e-6 * want);
    EXPECT_NEAR(clipped_norms[0], max_norm, 1e-5 * max_norm);
    ASSERT_EQ(clipped.size(), shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<double> scaled = Values(grads[i].full);
      for (double& v : scaled) v *= coef;
      ExpectNear(clipped[i], scaled, 1e-6, 1e-5, "grad " + std::to_string(i));
    }
  }
}

TEST(OptimizerTest, ClipGradNormBelowMaxLeavesGradsUnchanged) {
  const DeviceMesh mesh = Mesh({2});
  const PartialGrad grad = MakeGrad({4, 2}, 2, 9);
  const Status st = RunOn(mesh, [&](RankContext& ctx) -> Status {
    const Layout layout = MakeLayout({4, 2}, mesh, "P(sum)");
    MF_ASSIGN_OR_RETURN(DTensor g, LocalGrad(grad, layout, ctx.world_rank()));
    const Tensor before = g.local();
    DTensor* ptrs[] = {&g};
    MF_ASSIGN_OR_RETURN(double total, ClipGradNorm(ptrs, 1e9, ctx));
    EXPECT_GT(total, 0);
    EXPECT_EQ(g.local(), before);
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// ---------------------------------------------------------------------------------------------
// Warmup + cosine schedule.

TEST(OptimizerTest, WarmupCosineSchedule) {
  WarmupCosineOptions o;
  o.base_lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 4;
  o.total_steps = 14;
  const WarmupCosineSchedule s = WarmupCosineSchedule::Create(o).value();
  EXPECT_EQ(s.LrAt(-3), 0.0);
  EXPECT_EQ(s.LrAt(0), 0.0);
  EXPECT_DOUBLE_EQ(s.LrAt(1), 0.25);
  EXPECT_DOUBLE_EQ(s.LrAt(3), 0.75);
  EXPECT_DOUBLE_EQ(s.LrAt(4), 1.0);
  EXPECT_DOUBLE_EQ(s.LrAt(9), 0.1 + 0.9 * 0.5);  // halfway through the cosine
  EXPECT_DOUBLE_EQ(s.LrAt(6), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.2)));
  EXPECT_DOUBLE_EQ(s.LrAt(14), 0.1);
  EXPECT_DOUBLE_EQ(s.LrAt(1000), 0.1);
  for (int64_t t = 4; t < 14; ++t) { EXPECT_GT(s.LrAt(t), s.LrAt(t + 1)) << t; }
  // No warmup: starts at base_lr.
  WarmupCosineOptions nw;
  nw.base_lr = 0.5;
  nw.total_steps = 10;
  EXPECT_DOUBLE_EQ(WarmupCosineSchedule::Create(nw).value().LrAt(0), 0.5);
}

TEST(OptimizerTest, ScheduleDrivesOptimizerLr) {
  const DeviceMesh mesh = Mesh({1});
  WarmupCosineOptions so;
  so.base_lr = 0.2;
  so.warmup_steps = 2;
  so.total_steps = 6;
  const WarmupCosineSchedule sched = WarmupCosineSchedule::Create(so).value();
  const Status st = RunOn(mesh, [&](RankContext& ctx) -> Status {
    const Layout layout = MakeLayout({2}, mesh, "R");
    MF_ASSIGN_OR_RETURN(DTensor p, Distribute(Filled(DType::kF64, {2}, 1), layout, 0));
    MF_ASSIGN_OR_RETURN(DTensor g, Distribute(Filled(DType::kF64, {2}, 2), layout, 0));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, Sgd::Create({{"p", &p, std::nullopt}}, SgdOptions{}, ctx));
    std::vector<double> want = Values(p.local());
    for (int t = 0; t < 6; ++t) {
      MF_RETURN_IF_ERROR(opt->set_lr(sched.LrAt(opt->step_count())));
      EXPECT_EQ(opt->lr(), sched.LrAt(t));
      const std::vector<const DTensor*> grads = {&g};
      MF_RETURN_IF_ERROR(opt->Step(grads, ctx));
      for (size_t i = 0; i < 2; ++i) want[i] -= sched.LrAt(t) * Val(2, static_cast<int64_t>(i));
    }
    ExpectNear(Values(p.local()), want, 1e-15, 0, "sgd with schedule");
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// ---------------------------------------------------------------------------------------------
// Bad input: INVALID_ARGUMENT naming the value, nothing created or updated.

void ExpectInvalid(const Status& st, const std::string& key_words) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(key_words), std::string::npos) << "message: " << st.message() << "\nwant: " << key_words;
}

// Runs fn(ctx) on a 1-rank world with mesh {1}.
template <typename F>
void OnOneRank(F&& fn) {
  const Status st = RunOn(Mesh({1}), [&](RankContext& ctx) -> Status {
    fn(ctx);
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

TEST(OptimizerTest, BadOptions) {
  SgdOptions neg_lr;
  neg_lr.lr = -1;
  ExpectInvalid(ValidateOptions(neg_lr), "lr -1 must be finite and >= 0");
  AdamWOptions nan_lr;
  nan_lr.lr = std::nan("");
  ExpectInvalid(ValidateOptions(nan_lr), "lr nan must be finite and >= 0");
  SgdOptions neg_wd;
  neg_wd.weight_decay = -0.5;
  ExpectInvalid(ValidateOptions(neg_wd), "weight_decay -0.5 must be finite and >= 0");
  SgdOptions neg_mom;
  neg_mom.momentum = -0.1;
  ExpectInvalid(ValidateOptions(neg_mom), "momentum -0.1 must be finite and >= 0");
  SgdOptions inf_damp;
  inf_damp.dampening = INFINITY;
  ExpectInvalid(ValidateOptions(inf_damp), "dampening inf must be finite");
  SgdOptions nesterov;
  nesterov.momentum_kind = MomentumKind::kNesterov;
  ExpectInvalid(ValidateOptions(nesterov), "nesterov momentum requires momentum > 0 and dampening 0, got momentum 0");
  AdamWOptions beta1;
  beta1.beta1 = 1;
  ExpectInvalid(ValidateOptions(beta1), "beta1 1 must be in [0, 1)");
  AdamWOptions beta2;
  beta2.beta2 = -0.25;
  ExpectInvalid(ValidateOptions(beta2), "beta2 -0.25 must be in [0, 1)");
  AdamWOptions eps;
  eps.eps = 0;
  ExpectInvalid(ValidateOptions(eps), "eps 0 must be finite and > 0");
  EXPECT_TRUE(ValidateOptions(SgdOptions{}).ok());
  EXPECT_TRUE(ValidateOptions(AdamWOptions{}).ok());
}

TEST(OptimizerTest, CreateRejectsBadOptionsAndParams) {
  OnOneRank([](RankContext& ctx) {
    const DeviceMesh& mesh = ctx.mesh();
    DTensor w = Distribute(Filled(DType::kF32, {5, 3}, 1), MakeLayout({5, 3}, mesh, "R"), 0).value();
    AdamWOptions bad;
    bad.beta1 = 1.5;
    ExpectInvalid(AdamW::Create({{"w", &w, std::nullopt}}, bad, ctx).status(), "beta1 1.5 must be in [0, 1)");
    SgdOptions neg;
    neg.lr = -0.01;
    ExpectInvalid(Sgd::Create({{"w", &w, std::nullopt}}, neg, ctx).status(), "lr -0.01 must be finite and >= 0");
    ExpectInvalid(AdamW::Create({{"w", nullptr, std::nullopt}}, {}, ctx).status(), "param 0 ('w') is null");
    ExpectInvalid(AdamW::Create({{"w", &w, std::nullopt}, {"w", &w, std::nullopt}}, {}, ctx).status(),
                  "duplicate param name 'w'");
    DTensor ints = Distribute(Tensor::Zeros(DType::kI32, {2}), MakeLayout({2}, mesh, "R"), 0).value();
    ExpectInvalid(AdamW::Create({{"i", &ints, std::nullopt}}, {}, ctx).status(),
                  "param 0 ('i') has dtype i32; optimizers update f32, f64 or bf16 params");
    const DeviceMesh other = Mesh({1}, {"dp"});
    DTensor elsewhere = Distribute(Filled(DType::kF32, {2}, 1), MakeLayout({2}, other, "R"), 0).value();
    ExpectInvalid(AdamW::Create({{"e", &elsewhere, std::nullopt}}, {}, ctx).status(),
                  "param 0 ('e') is on mesh " + other.ToString() + " but the communicators are for mesh " +
                      mesh.ToString());
    DTensor partial = Distribute(Filled(DType::kF32, {2}, 1), MakeLayout({2}, mesh, "P(sum)"), 0).value();
    ExpectInvalid(AdamW::Create({{"p", &partial, std::nullopt}}, {}, ctx).status(),
                  "param 0 ('p') has the Partial layout P(sum); params must be Shard or Replicate");
    ExpectInvalid(AdamW::Create({{"w", &w, MakeLayout({4, 3}, mesh, "R")}}, {}, ctx).status(),
                  "state layout of param 0 ('w') has shape [4,3] but the param has shape [5,3]");
    ExpectInvalid(AdamW::Create({{"w", &w, MakeLayout({5, 3}, other, "R")}}, {}, ctx).status(),
                  "state layout of param 0 ('w') is on mesh " + other.ToString() + " but the param is on mesh " +
                      mesh.ToString());
    ExpectInvalid(AdamW::Create({{"w", &w, MakeLayout({5, 3}, mesh, "P(sum)")}}, {}, ctx).status(),
                  "state layout P(sum) of param 0 ('w') has a Partial placement");
  });
}

TEST(OptimizerTest, StepRejectsBadGradientsAndUpdatesNothing) {
  OnOneRank([](RankContext& ctx) {
    const DeviceMesh& mesh = ctx.mesh();
    DTensor w = Distribute(Filled(DType::kF32, {5, 3}, 1), MakeLayout({5, 3}, mesh, "R"), 0).value();
    DTensor b = Distribute(Filled(DType::kF32, {7}, 2), MakeLayout({7}, mesh, "R"), 0).value();
    const Tensor w0 = w.local(), b0 = b.local();
    std::unique_ptr<Optimizer> opt =
        std::move(AdamW::Create({{"w", &w, std::nullopt}, {"b", &b, std::nullopt}}, {}, ctx).value());
    DTensor gw = Distribute(Filled(DType::kF32, {5, 3}, 3), MakeLayout({5, 3}, mesh, "R"), 0).value();
    DTensor gb = Distribute(Filled(DType::kF32, {7}, 4), MakeLayout({7}, mesh, "R"), 0).value();
    DTensor short_gb = Distribute(Filled(DType::kF32, {6}, 4), MakeLayout({6}, mesh, "R"), 0).value();
    DTensor int_gb = Distribute(Tensor::Zeros(DType::kI64, {7}), MakeLayout({7}, mesh, "R"), 0).value();
    const DeviceMesh other = Mesh({1}, {"dp"});
    DTensor other_gb = Distribute(Filled(DType::kF32, {7}, 4), MakeLayout({7}, other, "R"), 0).value();
    {
      const std::vector<const DTensor*> grads = {&gw};
      ExpectInvalid(opt->Step(grads, ctx), "Step: 1 gradients for 2 params");
    }
    {
      const std::vector<const DTensor*> grads = {&gw, &short_gb};
      ExpectInvalid(opt->Step(grads, ctx), "Step: gradient 1 (param 'b') has shape [6] but the param has shape [7]");
    }
    {
      const std::vector<const DTensor*> grads = {&gw, &int_gb};
      ExpectInvalid(opt->Step(grads, ctx),
                    "Step: gradient 1 (param 'b') has dtype i64; gradients must be f32, f64 or bf16");
    }
    {
      const std::vector<const DTensor*> grads = {&gw, &other_gb};
      ExpectInvalid(opt->Step(grads, ctx), "Step: gradient 1 (param 'b') is on mesh " + other.ToString() +
                                                 " but the param is on mesh " + mesh.ToString());
    }
    {
      const std::vector<const DTensor*> grads = {&gw, &gb};
      StepOptions so;
      so.max_grad_norm = -1;
      ExpectInvalid(opt->Step(grads, ctx, so), "max_norm -1 must be >= 0");
    }
    ExpectInvalid(opt->set_lr(-2), "lr -2 must be finite and >= 0");
    EXPECT_EQ(opt->lr(), AdamWOptions{}.lr);
    // Nothing was updated by the failed calls.
    EXPECT_EQ(w.local(), w0);
    EXPECT_EQ(b.local(), b0);
    EXPECT_EQ(opt->step_count(), 0);
    EXPECT_EQ(opt->param_step(0), 0);
    for (const StateTensor& s : opt->StateTensors()) {
      for (double v : Values(s.tensor->local())) { EXPECT_EQ(v, 0.0) << s.name; }
    }
    // A null gradient leaves its param and step count alone.
    const std::vector<const DTensor*> only_w = {&gw, nullptr};
    EXPECT_TRUE(opt->Step(only_w, ctx).ok());
    EXPECT_NE(w.local(), w0);
    EXPECT_EQ(b.local(), b0);
    EXPECT_EQ(opt->param_step(0), 1);
    EXPECT_EQ(opt->param_step(1), 0);
  });
}

TEST(OptimizerTest, ClipGradNormRejectsBadInput) {
  OnOneRank([](RankContext& ctx) {
    const DeviceMesh& mesh = ctx.mesh();
    DTensor g = Distribute(Filled(DType::kF32, {3}, 1), MakeLayout({3}, mesh, "R"), 0).value();
    const Tensor g0 = g.local();
    DTensor ints = Distribute(Tensor::Zeros(DType::kI32, {3}), MakeLayout({3}, mesh, "R"), 0).value();
    const DeviceMesh other = Mesh({1}, {"dp"});
    DTensor elsewhere = Distribute(Filled(DType::kF32, {3}, 1), MakeLayout({3}, other, "R"), 0).value();
    {
      DTensor* grads[] = {&g};
      ExpectInvalid(ClipGradNorm(grads, -0.5, ctx).status(), "max_norm -0.5 must be >= 0");
      ExpectInvalid(ClipGradNorm(grads, std::nan(""), ctx).status(), "max_norm nan must be >= 0");
    }
    {
      DTensor* grads[] = {&g, nullptr};
      ExpectInvalid(ClipGradNorm(grads, 1e-3, ctx).status(), "ClipGradNorm: gradient 1 is null");
    }
    {
      DTensor* grads[] = {&g, &ints};
      ExpectInvalid(ClipGradNorm(grads, 1e-3, ctx).status(),
                    "ClipGradNorm: gradient 1 has dtype i32; gradients must be f32, f64 or bf16");
    }
    {
      DTensor* grads[] = {&g, &elsewhere};
      ExpectInvalid(ClipGradNorm(grads, 1e-3, ctx).status(),
                    "ClipGradNorm: gradient 1 is on mesh " + other.ToString() +
                        " but the communicators are for mesh " + mesh.ToString());
    }
    EXPECT_EQ(g.local(), g0);  // nothing scaled
  });
}

// A checkpointed optimizer resumes exactly: state tensors copied into a fresh optimizer plus
// RestoreStepCounts give the same next step (bias correction included) as the original.
TEST(OptimizerTest, RestoredStepCountsResumeExactly) {
  const DeviceMesh mesh = Mesh({1});
  const Status s = RunOn(mesh, [&](RankContext& ctx) -> Status {
    const Layout l = MakeLayout({3, 2}, mesh, "R");
    MF_ASSIGN_OR_RETURN(DTensor p, Distribute(Filled(DType::kF64, {3, 2}, 1), l, 0));
    AdamWOptions o;
    o.lr = 0.05;
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> a, AdamW::Create({{"w", &p, std::nullopt}}, o, ctx));
    std::vector<DTensor> grads;
    for (uint64_t k = 0; k < 3; ++k) {
      MF_ASSIGN_OR_RETURN(DTensor g, Distribute(Filled(DType::kF64, {3, 2}, 20 + k), l, 0));
      grads.push_back(std::move(g));
    }
    for (int k = 0; k < 2; ++k) {
      const DTensor* g[] = {&grads[static_cast<size_t>(k)]};
      MF_RETURN_IF_ERROR(a->Step(g, ctx));
    }
    DTensor q = p;  // the "loaded" param
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> b, AdamW::Create({{"w", &q, std::nullopt}}, o, ctx));
    std::vector<StateTensor> from = a->StateTensors(), to = b->StateTensors();
    EXPECT_EQ(from.size(), 2u);
    for (size_t i = 0; i < from.size(); ++i) *to[i].tensor = *from[i].tensor;
    const int64_t steps[] = {2};
    MF_RETURN_IF_ERROR(b->RestoreStepCounts(2, steps));
    EXPECT_EQ(b->step_count(), 2);
    EXPECT_EQ(b->param_step(0), 2);
    const DTensor* g[] = {&grads[2]};
    MF_RETURN_IF_ERROR(a->Step(g, ctx));
    MF_RETURN_IF_ERROR(b->Step(g, ctx));
    EXPECT_EQ(Values(p.local()), Values(q.local()));
    const int64_t too_many[] = {1, 1};
    ExpectInvalid(b->RestoreStepCounts(3, too_many), "RestoreStepCounts: 2 param steps for 1 params");
    const int64_t above[] = {4};
    ExpectInvalid(b->RestoreStepCounts(3, above), "RestoreStepCounts: param 0 ('w') step 4 is outside [0, 3]");
    EXPECT_EQ(b->step_count(), 3);  // unchanged by the failed calls
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s;
}

TEST(OptimizerTest, ScheduleRejectsBadOptions) {
  WarmupCosineOptions neg;
  neg.base_lr = -1;
  ExpectInvalid(WarmupCosineSchedule::Create(neg).status(), "base_lr -1 must be finite and >= 0");
  WarmupCosineOptions min_above;
  min_above.base_lr = 0.1;
  min_above.min_lr = 0.2;
  ExpectInvalid(WarmupCosineSchedule::Create(min_above).status(), "min_lr 0.2 must be <= base_lr 0.1");
  WarmupCosineOptions warm;
  warm.warmup_steps = -3;
  ExpectInvalid(WarmupCosineSchedule::Create(warm).status(), "warmup_steps -3 must be >= 0");
  WarmupCosineOptions total;
  total.warmup_steps = 10;
  total.total_steps = 5;
  ExpectInvalid(WarmupCosineSchedule::Create(total).status(), "total_steps 5 must be >= warmup_steps 10");
}

}  // namespace
}  // namespace meshflow
