// Multi-step equality: 20 AdamW steps of a 2-layer MLP and of a small transformer block (causal
// single-head attention + layer norm + MLP, residuals) with autograd gradients, under
// data-parallel, ZeRO-1, FSDP, tensor-parallel and mixed layouts on meshes of 2, 2x2 and 2x2x2
// thread ranks, end with the same params as one rank (f32: within 2e-4 absolute).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/collectives/dtensor_api.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/ops/test_util.h"
#include "meshflow/train/optimizer.h"

namespace meshflow {
namespace {

using testing::WorldOf;

Tensor Values(std::vector<int64_t> shape, uint32_t seed, double scale) {
  return testing::UniformValues(std::move(shape), seed, scale);
}

// A model: named params with initial values, fixed inputs (x, y, and constants), and the loss.
struct Model {
  std::vector<std::string> names;
  std::vector<Tensor> init;
  std::vector<Tensor> inputs;       // inputs[0] = x, inputs[1] = y (batch dim 0), then constants
  std::function<StatusOr<Variable>(const std::vector<Variable>& p, const std::vector<Variable>& in, MeshComms& c)>
      loss;
};

StatusOr<Variable> Mse(const Variable& out, const Variable& y, MeshComms& c) {
  MF_ASSIGN_OR_RETURN(Variable d, autograd::Sub(out, y, c));
  MF_ASSIGN_OR_RETURN(Variable sq, autograd::Mul(d, d, c));
  return autograd::Mean(sq, {}, false, c);
}

Model Mlp() {
  Model m;
  m.names = {"w1", "b1", "w2"};
  m.init = {Values({8, 16}, 1, 0.35), Values({16}, 2, 0.1), Values({16, 4}, 3, 0.25)};
  m.inputs = {Values({12, 8}, 4, 1.0), Values({12, 4}, 5, 0.5)};
  m.loss = [](const std::vector<Variable>& p, const std::vector<Variable>& in, MeshComms& c) -> StatusOr<Variable> {
    MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(in[0], p[0], c));
    MF_ASSIGN_OR_RETURN(Variable hb, autograd::Add(h, p[1], c));
    MF_ASSIGN_OR_RETURN(Variable a, autograd::Unary(UnaryOp::kTanh, hb, c));
    MF_ASSIGN_OR_RETURN(Variable o, autograd::Matmul(a, p[2], c));
    return Mse(o, in[1], c);
  };
  return m;
}

// x [B=4, T=4, D=8]: causal single-head attention (wq, wk, wv, wo), residual, layer norm, MLP
// (w1 [8,16], gelu, w2 [16,8]), residual; MSE against y.
Model Transformer() {
  constexpr int64_t B = 4, T = 4, D = 8, F = 16;
  Model m;
  m.names = {"wq", "wk", "wv", "wo", "ln_w", "ln_b", "w1", "w2"};
  m.init = {Values({D, D}, 11, 0.35), Values({D, D}, 12, 0.35), Values({D, D}, 13, 0.35),
            Values({D, D}, 14, 0.35), Values({D}, 15, 0.1),     Values({D}, 16, 0.1),
            Values({D, F}, 17, 0.35), Values({F, D}, 18, 0.25)};
  for (int64_t i = 0; i < D; ++i) m.init[4].SetFromDouble(i, 1.0 + m.init[4].GetAsDouble(i));
  Tensor causal = Tensor::Zeros(DType::kF32, {T, T});
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j <= i; ++j) causal.SetFromDouble(i * T + j, 1.0);
  }
  Tensor neg = Tensor::Zeros(DType::kF32, {});
  neg.SetFromDouble(0, -1e9);
  m.inputs = {Values({B, T, D}, 19, 1.0), Values({B, T, D}, 20, 0.5), causal, neg};
  m.loss = [](const std::vector<Variable>& p, const std::vector<Variable>& in, MeshComms& c) -> StatusOr<Variable> {
    const Variable& x = in[0];
    MF_ASSIGN_OR_RETURN(Variable q, autograd::Matmul(x, p[0], c));
    MF_ASSIGN_OR_RETURN(Variable k, autograd::Matmul(x, p[1], c));
    MF_ASSIGN_OR_RETURN(Variable v, autograd::Matmul(x, p[2], c));
    MF_ASSIGN_OR_RETURN(Variable kt, autograd::Transpose(k, -2, -1, c));
    MF_ASSIGN_OR_RETURN(Variable s0, autograd::Matmul(q, kt, c));
    MF_ASSIGN_OR_RETURN(Variable s, autograd::Scale(s0, 1.0 / std::sqrt(8.0), c));
    MF_ASSIGN_OR_RETURN(Variable sm, autograd::Where(in[2], s, in[3], c));
    MF_ASSIGN_OR_RETURN(Variable pr, autograd::Softmax(sm, -1, c));
    MF_ASSIGN_OR_RETURN(Variable o, autograd::Matmul(pr, v, c));
    MF_ASSIGN_OR_RETURN(Variable o2, autograd::Matmul(o, p[3], c));
    MF_ASSIGN_OR_RETURN(Variable r1, autograd::Add(x, o2, c));
    MF_ASSIGN_OR_RETURN(Variable h, autograd::LayerNorm(r1, 1, p[4], p[5], 1e-5, c));
    MF_ASSIGN_OR_RETURN(Variable f1, autograd::Matmul(h, p[6], c));
    MF_ASSIGN_OR_RETURN(Variable g, autograd::Gelu(f1, c));
    MF_ASSIGN_OR_RETURN(Variable f2, autograd::Matmul(g, p[7], c));
    MF_ASSIGN_OR_RETURN(Variable out, autograd::Add(h, f2, c));
    return Mse(out, in[1], c);
  };
  return m;
}

// The same values in another float dtype (bf16: rounded).
Tensor As(const Tensor& t, DType dtype) {
  Tensor out = Tensor::Zeros(dtype, t.shape());
  for (int64_t i = 0; i < t.NumElements(); ++i) out.SetFromDouble(i, t.GetAsDouble(i));
  return out;
}

Model InDType(Model m, DType dtype) {
  for (Tensor& t : m.init) t = As(t, dtype);
  for (size_t i = 0; i < 2; ++i) m.inputs[i] = As(m.inputs[i], dtype);
  return m;
}

struct Plan {
  std::string name;
  std::vector<int64_t> mesh;
  Placements batch;                             // x and y
  std::vector<Placements> params;               // per param
  std::vector<std::optional<Placements>> state;  // per param (nullopt: the param's)
};

// 20 AdamW steps; returns every param's full value (and the losses) after the last step.
Status Train(const Model& m, const Plan& plan, int steps, std::vector<Tensor>* out, std::vector<double>* losses) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(plan.mesh));
  out->assign(m.init.size(), Tensor::Zeros(m.init[0].dtype(), {}));
  losses->clear();
  return WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, mesh));
    const int rank = comm.world_rank();
    std::vector<Variable> p;
    for (size_t i = 0; i < m.init.size(); ++i) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(m.init[i].shape(), mesh, plan.params[i]));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(m.init[i], l, rank));
      MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), true));
      p.push_back(std::move(v));
    }
    std::vector<ParamSpec> specs;
    for (size_t i = 0; i < p.size(); ++i) {
      std::optional<Layout> st;
      if (plan.state[i]) {
        MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(m.init[i].shape(), mesh, *plan.state[i]));
        st = std::move(l);
      }
      specs.push_back(ParamSpec{m.names[i], p[i].mutable_leaf_value(), std::move(st)});
    }
    AdamWOptions o;
    o.lr = 5e-3;
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(std::move(specs), o, comms));
    std::vector<Variable> in;
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      Placements pl = i < 2 ? plan.batch : Placements(static_cast<size_t>(mesh.ndim()), Replicate{});
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(m.inputs[i].shape(), mesh, pl));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(m.inputs[i], l, rank));
      MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), false));
      in.push_back(std::move(v));
    }
    for (int step = 0; step < steps; ++step) {
      MF_ASSIGN_OR_RETURN(Variable loss, m.loss(p, in, comms));
      MF_ASSIGN_OR_RETURN(Tensor l, FullTensor(loss.value(), comms));
      if (rank == 0) losses->push_back(l.GetAsDouble(0));
      MF_RETURN_IF_ERROR(Backward(loss, comms));
      std::vector<const DTensor*> grads;
      for (const Variable& v : p) grads.push_back(v.grad() ? &*v.grad() : nullptr);
      MF_RETURN_IF_ERROR(opt->Step(grads, comms));
      for (Variable& v : p) v.ZeroGrad();
    }
    for (size_t i = 0; i < p.size(); ++i) {
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(p[i].value(), comms));
      if (rank == 0) (*out)[i] = std::move(f);
    }
    return Status::Ok();
  });
}

void ExpectSameAsSingleRank(const Model& m, const std::vector<Plan>& plans, double tolerance = 2e-4,
                            double loss_tolerance = 1e-5) {
  const Placement r = Replicate{};
  const Plan single{"single", {1}, {r}, std::vector<Placements>(m.init.size(), Placements{r}),
                    std::vector<std::optional<Placements>>(m.init.size())};
  std::vector<Tensor> want;
  std::vector<double> want_losses;
  const Status single_status = Train(m, single, 20, &want, &want_losses);
  ASSERT_TRUE(single_status.ok()) << single_status;
  EXPECT_LT(want_losses.back(), want_losses.front());
  for (const Plan& plan : plans) {
    std::vector<Tensor> got;
    std::vector<double> losses;
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = Train(m, plan, 20, &got, &losses);
    std::printf("%s: %.2f s\n", plan.name.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(st.ok()) << plan.name << ": " << st;
    for (size_t k = 0; k < losses.size(); ++k) {
      EXPECT_NEAR(losses[k], want_losses[k], loss_tolerance) << plan.name << " step " << k;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape());
      double diff = 0;
      for (int64_t j = 0; j < got[i].NumElements(); ++j) {
        diff = std::max(diff, std::abs(got[i].GetAsDouble(j) - want[i].GetAsDouble(j)));
      }
      EXPECT_LE(diff, tolerance) << plan.name << " param " << m.names[i];
    }
  }
}

TEST(TrainStepTest, MlpTwentyAdamWStepsMatchOneRank) {
  const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1};
  using P = Placements;
  using S = std::optional<Placements>;
  ExpectSameAsSingleRank(
      Mlp(), {
                 {"ddp-2", {2}, {s0}, {{r}, {r}, {r}}, {S(), S(), S()}},
                 {"zero1-2", {2}, {s0}, {{r}, {r}, {r}}, {P{s0}, P{s0}, P{s0}}},
                 {"fsdp-2", {2}, {s0}, {{s0}, {s0}, {s0}}, {S(), S(), S()}},
                 {"dp x tp 2x2", {2, 2}, {s0, r}, {{r, s1}, {r, s0}, {r, s0}}, {S(), S(), S()}},
                 {"fsdp x tp 2x2", {2, 2}, {s0, r}, {{s0, s1}, {s0, s0}, {s1, s0}}, {S(), S(), S()}},
                 {"dp x fsdp x tp 2x2x2", {2, 2, 2}, {s0, s0, r}, {{r, s0, s1}, {r, s0, s0}, {r, s1, s0}}, {S(), S(), S()}},
             });
}

// Mixed precision: bf16 params and activations; the optimizer keeps f32 master weights and
// reduces f32 gradients (train/optimizer.h). Sharded runs differ from one rank only by bf16
// rounding of differently ordered sums: within a few bf16 ulps of values of magnitude ~1.
TEST(TrainStepTest, Bf16MlpMatchesOneRankWithinBf16Rounding) {
  const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1};
  using P = Placements;
  using S = std::optional<Placements>;
  const Model m = InDType(Mlp(), DType::kBF16);
  ExpectSameAsSingleRank(m,
                         {
                             {"ddp-2", {2}, {s0}, {{r}, {r}, {r}}, {S(), S(), S()}},
                             {"zero1-2", {2}, {s0}, {{r}, {r}, {r}}, {P{s0}, P{s0}, P{s0}}},
                             {"dp x tp 2x2", {2, 2}, {s0, r}, {{r, s1}, {r, s0}, {r, s0}}, {S(), S(), S()}},
                         },
                         /*tolerance=*/3e-2, /*loss_tolerance=*/2e-2);
}

std::vector<Plan> TransformerPlans() {
  const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1};
  using P = Placements;
  using S = std::optional<Placements>;
  const std::vector<S> same(8);
  std::vector<Plan> plans = {
      {"ddp-2", {2}, {s0}, std::vector<P>(8, P{r}), same},
      {"zero1-2", {2}, {s0}, std::vector<P>(8, P{r}), std::vector<S>(8, P{s0})},
      // Megatron tp: q/k/v and w1 column-parallel, wo and w2 row-parallel, norm replicated.
      {"dp x tp 2x2", {2, 2}, {s0, r}, {{r, s1}, {r, s1}, {r, s1}, {r, s0}, {r, r}, {r, r}, {r, s1}, {r, s0}}, same},
  };
  plans.push_back({"dp x fsdp x tp 2x2x2",
                   {2, 2, 2},
                   {s0, s0, r},
                   {{r, s0, s1}, {r, s0, s1}, {r, s0, s1}, {r, s1, s0}, {r, s0, r}, {r, s0, r}, {r, s0, s1}, {r, s1, s0}},
                   same});
  return plans;
}

TEST(TrainStepTest, TransformerBlockTwentyAdamWStepsMatchOneRank) {
  ExpectSameAsSingleRank(Transformer(), TransformerPlans());
}

}  // namespace
}  // namespace meshflow
