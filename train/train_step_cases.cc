#include "meshflow/train/train_step_cases.h"

#include <cmath>
#include <memory>
#include <utility>

#include "meshflow/autograd/functions.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/ops/test_util.h"
#include "meshflow/optim/optimizer.h"

namespace meshflow::train_cases {
namespace {

Tensor Values(std::vector<int64_t> shape, uint32_t seed, double scale) {
  return testing::UniformValues(std::move(shape), seed, scale);
}

StatusOr<Variable> Mse(const Variable& out, const Variable& y, RankContext& c) {
  MF_ASSIGN_OR_RETURN(Variable d, autograd::Sub(out, y, c));
  MF_ASSIGN_OR_RETURN(Variable sq, autograd::Mul(d, d, c));
  return autograd::Mean(sq, {}, false, c);
}

// The same values in another float dtype (bf16: rounded).
Tensor As(const Tensor& t, DType dtype) {
  Tensor out = Tensor::Zeros(dtype, t.shape());
  for (int64_t i = 0; i < t.NumElements(); ++i) out.SetFromDouble(i, t.GetAsDouble(i));
  return out;
}

}  // namespace

Model Mlp() {
  Model m;
  m.names = {"w1", "b1", "w2"};
  m.init = {Values({8, 16}, 1, 0.35), Values({16}, 2, 0.1), Values({16, 4}, 3, 0.25)};
  m.inputs = {Values({12, 8}, 4, 1.0), Values({12, 4}, 5, 0.5)};
  m.loss = [](const std::vector<Variable>& p, const std::vector<Variable>& in, RankContext& c) -> StatusOr<Variable> {
    MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(in[0], p[0], c));
    MF_ASSIGN_OR_RETURN(Variable hb, autograd::Add(h, p[1], c));
    MF_ASSIGN_OR_RETURN(Variable a, autograd::Unary(UnaryOp::kTanh, hb, c));
    MF_ASSIGN_OR_RETURN(Variable o, autograd::Matmul(a, p[2], c));
    return Mse(o, in[1], c);
  };
  return m;
}

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
  m.loss = [](const std::vector<Variable>& p, const std::vector<Variable>& in, RankContext& c) -> StatusOr<Variable> {
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

Model InDType(Model m, DType dtype) {
  for (Tensor& t : m.init) t = As(t, dtype);
  for (size_t i = 0; i < 2; ++i) m.inputs[i] = As(m.inputs[i], dtype);
  return m;
}

Status TrainOnRank(const Model& m, const Plan& plan, int steps, Communicator& comm, std::vector<Tensor>* out,
                   std::vector<double>* losses) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(plan.mesh));
  if (comm.world_rank() == 0) {
    out->assign(m.init.size(), Tensor::Zeros(m.init[0].dtype(), {}));
    losses->clear();
  }
  {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
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
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(std::move(specs), o, ctx));
    std::vector<Variable> in;
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      Placements pl = i < 2 ? plan.batch : Placements(static_cast<size_t>(mesh.ndim()), Replicate{});
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(m.inputs[i].shape(), mesh, pl));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(m.inputs[i], l, rank));
      MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), false));
      in.push_back(std::move(v));
    }
    for (int step = 0; step < steps; ++step) {
      MF_ASSIGN_OR_RETURN(Variable loss, m.loss(p, in, ctx));
      MF_ASSIGN_OR_RETURN(Tensor l, FullTensor(loss.value(), ctx));
      if (rank == 0) losses->push_back(l.GetAsDouble(0));
      MF_RETURN_IF_ERROR(Backward(loss, ctx));
      std::vector<const DTensor*> grads;
      for (const Variable& v : p) grads.push_back(v.grad() ? &*v.grad() : nullptr);
      MF_RETURN_IF_ERROR(opt->Step(grads, ctx));
      for (Variable& v : p) v.ZeroGrad();
    }
    for (size_t i = 0; i < p.size(); ++i) {
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(p[i].value(), ctx));
      if (rank == 0) (*out)[i] = std::move(f);
    }
    return Status::Ok();
  }
}

Status TrainOnThreads(const Model& m, const Plan& plan, int steps, std::vector<Tensor>* out,
                      std::vector<double>* losses) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(plan.mesh));
  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(mesh.size()));
  return world->Run([&](Communicator& comm) { return TrainOnRank(m, plan, steps, comm, out, losses); });
}

std::string CompareToSingle(const Model& m, const std::vector<Tensor>& want, const std::vector<double>& want_losses,
                            const std::vector<Tensor>& got, const std::vector<double>& losses, double tolerance,
                            double loss_tolerance) {
  std::string err;
  if (losses.size() != want_losses.size() || got.size() != want.size()) return "result sizes differ";
  for (size_t k = 0; k < losses.size(); ++k) {
    if (!(std::abs(losses[k] - want_losses[k]) <= loss_tolerance)) {
      err += "loss of step " + std::to_string(k) + ": " + std::to_string(losses[k]) + " vs " +
             std::to_string(want_losses[k]) + "; ";
    }
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].shape() != want[i].shape()) {
      err += "param " + m.names[i] + ": shapes differ; ";
      continue;
    }
    double diff = 0;
    for (int64_t j = 0; j < got[i].NumElements(); ++j) {
      diff = std::max(diff, std::abs(got[i].GetAsDouble(j) - want[i].GetAsDouble(j)));
    }
    if (!(diff <= tolerance)) err += "param " + m.names[i] + ": max diff " + std::to_string(diff) + "; ";
  }
  return err;
}


Plan SingleRankPlan(const Model& m) {
  const Placement r = Replicate{};
  return Plan{"single", {1}, {r}, std::vector<Placements>(m.init.size(), Placements{r}),
              std::vector<std::optional<Placements>>(m.init.size())};
}

Plan TransformerPlan(std::string name, const std::vector<int64_t>& mesh, const std::vector<std::string>& dims) {
  const Placement r = Replicate{};
  // Per param: its role (0: column-parallel q/k/v/w1, 1: row-parallel wo/w2, 2: norm vector).
  const int role[8] = {0, 0, 0, 1, 2, 2, 0, 1};
  bool has_tp = false;
  for (const std::string& d : dims) has_tp = has_tp || d == "tp";
  Plan plan{std::move(name), mesh, {}, std::vector<Placements>(8), std::vector<std::optional<Placements>>(8)};
  for (const std::string& d : dims) {
    plan.batch.push_back(d == "tp" ? r : Placement{Shard{0}});
    for (size_t i = 0; i < 8; ++i) {
      Placement p = r;
      if (d == "tp" && role[i] != 2) p = Shard{role[i] == 0 ? 1 : 0};
      if (d == "fsdp") p = Shard{role[i] == 1 && has_tp ? 1 : 0};
      plan.params[i].push_back(p);
    }
  }
  return plan;
}

}  // namespace meshflow::train_cases
