// Gradients of every differentiable eager op against central finite differences (f64, one
// rank), and the gradients of a small sharded model on 2- and 4-rank meshes against the
// single-rank gradients, for random parameter and batch layouts.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/autograd/vjp.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/ops/test_util.h"

namespace meshflow {
namespace {

using testing::GlobalFor;
using testing::IntsFor;
using testing::WorldOf;

Status OnMesh(const DeviceMesh& mesh, const std::function<Status(RankContext&, int)>& body) {
  return WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return body(ctx, comm.rank());
  });
}

Layout Replicated(const std::vector<int64_t>& shape, const DeviceMesh& mesh) {
  return *Layout::Create(shape, mesh, Placements(static_cast<size_t>(mesh.ndim()), Replicate{}));
}

struct Operand {
  std::vector<int64_t> shape;
  int64_t int_bound = 0;  // > 0: an i64 operand with values in [0, bound) (no gradient)
  double offset = 0.05;   // added to float values (keeps relu / step away from their kink at 0)
};

struct GradCase {
  OpSpec op;
  std::vector<Operand> operands;
};

std::vector<GradCase> Cases() {
  const double pos = 2.0;  // positive inputs for sqrt, rsqrt, log, pow
  return {
      {OpSpec::Matmul(), {{{4, 3}}, {{3, 5}}}},
      {OpSpec::Matmul(), {{{2, 4, 3}}, {{3, 2}}}},
      {OpSpec::Matmul(), {{{2, 1, 3, 4}}, {{3, 4, 2}}}},
      {OpSpec::Binary(BinaryOp::kAdd), {{{4, 3}}, {{3}}}},
      {OpSpec::Binary(BinaryOp::kAdd), {{{4, 3}}, {{4, 3}}}},  // one gradient handle for both operands
      {OpSpec::Binary(BinaryOp::kSub), {{{4, 1}}, {{1, 3}}}},
      {OpSpec::Binary(BinaryOp::kMul), {{{4, 3}}, {{4, 1}}}},
      {OpSpec::Binary(BinaryOp::kDiv), {{{4, 3}}, {{3}, 0, pos}}},
      {OpSpec::Unary(UnaryOp::kNeg), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kScale, -1.5), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kRelu), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kExp), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kGelu), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kTanh), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kSigmoid), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kSilu), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kSqrt), {{{4, 3}, 0, pos}}},
      {OpSpec::Unary(UnaryOp::kRsqrt), {{{4, 3}, 0, pos}}},
      {OpSpec::Unary(UnaryOp::kPow, 2.5), {{{4, 3}, 0, pos}}},
      {OpSpec::Unary(UnaryOp::kAddScalar, 0.75), {{{4, 3}}}},
      {OpSpec::Unary(UnaryOp::kLog), {{{4, 3}, 0, pos}}},
      {OpSpec::Reduce(ReduceKind::kSum, {1}, false), {{{4, 3}}}},
      {OpSpec::Reduce(ReduceKind::kSum, {}, false), {{{2, 3, 2}}}},
      {OpSpec::Reduce(ReduceKind::kMean, {0, 2}, true), {{{2, 3, 2}}}},
      {OpSpec::Reduce(ReduceKind::kMean, {-1}, false), {{{4, 3}}}},
      {OpSpec::Reduce(ReduceKind::kMax, {1}, false), {{{4, 3}}}},
      {OpSpec::Reduce(ReduceKind::kMin, {0}, true), {{{4, 3}}}},
      {OpSpec::Softmax(1, false), {{{4, 3}}}},
      {OpSpec::Softmax(0, true), {{{4, 3}}}},
      {OpSpec::Permute({2, 0, 1}), {{{2, 3, 4}}}},
      {OpSpec::Transpose(0, -1), {{{4, 3}}}},
      {OpSpec::Reshape({3, -1}), {{{2, 6}}}},
      {OpSpec::LayerNorm(1, true, true), {{{4, 5}}, {{5}}, {{5}}}},
      {OpSpec::LayerNorm(2, false, false), {{{2, 3, 4}}}},
      {OpSpec::RmsNorm(1, true), {{{4, 5}}, {{5}}}},
      {OpSpec::Embedding(), {{{6, 3}}, {{5}, 6}}},
      {OpSpec::Concat(1, 2), {{{4, 2}}, {{4, 3}}}},
      {OpSpec::Slice(0, 1, 6, 2), {{{7, 3}}}},
      {OpSpec::CrossEntropy(LossReduction::kMean), {{{5, 4}}, {{5}, 4}}},
      {OpSpec::CrossEntropy(LossReduction::kSum), {{{2, 3, 4}}, {{2, 3}, 4}}},
      {OpSpec::CrossEntropy(LossReduction::kNone), {{{5, 4}}, {{5}, 4}}},
      {OpSpec::Where(), {{{4, 3}, 2, 0}, {{4, 3}}, {{3}}}},
      {OpSpec::Expand({4, 3}), {{{4, 1}}}},
  };
}

std::vector<Tensor> Inputs(const GradCase& c) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < c.operands.size(); ++i) {
    const Operand& o = c.operands[i];
    const int seed = static_cast<int>(i) + 1;
    out.push_back(o.int_bound > 0 ? IntsFor(DType::kI64, o.shape, seed, o.int_bound)
                                  : GlobalFor(DType::kF64, o.shape, seed, o.offset));
  }
  return out;
}

// sum(op(inputs) * r) with the single-rank kernels.
double LossByKernels(const OpSpec& op, const std::vector<Tensor>& in, const Tensor& r) {
  std::vector<const Tensor*> p;
  for (const Tensor& t : in) p.push_back(&t);
  const Tensor y = *RunKernel(op, p);
  double s = 0;
  for (int64_t i = 0; i < y.NumElements(); ++i) s += y.GetAsDouble(i) * r.GetAsDouble(i);
  return s;
}

TEST(AutogradTest, EveryOpMatchesFiniteDifferences) {
  const DeviceMesh mesh = *DeviceMesh::Create({1});
  int checked = 0;
  for (const GradCase& c : Cases()) {
    const std::vector<Tensor> in = Inputs(c);
    std::vector<const Tensor*> p;
    for (const Tensor& t : in) p.push_back(&t);
    const Tensor y = *RunKernel(c.op, p);
    const Tensor r = GlobalFor(DType::kF64, y.shape(), 9, 0.3);
    std::vector<Tensor> grads(in.size(), Tensor::Zeros(DType::kF64, {}));
    const Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
      std::vector<Variable> vars;
      for (size_t i = 0; i < in.size(); ++i) {
        MF_ASSIGN_OR_RETURN(DTensor d, Distribute(in[i], Replicated(in[i].shape(), mesh), rank));
        MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), c.operands[i].int_bound == 0));
        vars.push_back(std::move(v));
      }
      MF_ASSIGN_OR_RETURN(Variable out, Apply(c.op, vars, ctx));
      MF_ASSIGN_OR_RETURN(DTensor rd, Distribute(r, Replicated(r.shape(), mesh), rank));
      MF_ASSIGN_OR_RETURN(Variable rv, Variable::Leaf(std::move(rd), false));
      MF_ASSIGN_OR_RETURN(Variable prod, autograd::Mul(out, rv, ctx));
      MF_ASSIGN_OR_RETURN(Variable loss, autograd::Sum(prod, {}, false, ctx));
      MF_RETURN_IF_ERROR(Backward(loss, ctx));
      for (size_t i = 0; i < in.size(); ++i) {
        if (c.operands[i].int_bound > 0) continue;
        if (!vars[i].grad()) return InternalError("no gradient for operand " + std::to_string(i));
        MF_ASSIGN_OR_RETURN(grads[i], FullTensor(*vars[i].grad(), ctx));
      }
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << c.op.ToString() << ": " << st;
    const double eps = 1e-6;
    for (size_t i = 0; i < in.size(); ++i) {
      if (c.operands[i].int_bound > 0) continue;
      ASSERT_EQ(grads[i].shape(), in[i].shape()) << c.op.ToString() << " operand " << i;
      for (int64_t j = 0; j < in[i].NumElements(); ++j) {
        std::vector<Tensor> plus = in, minus = in;
        plus[i].SetFromDouble(j, in[i].GetAsDouble(j) + eps);
        minus[i].SetFromDouble(j, in[i].GetAsDouble(j) - eps);
        const double num = (LossByKernels(c.op, plus, r) - LossByKernels(c.op, minus, r)) / (2 * eps);
        const double got = grads[i].GetAsDouble(j);
        EXPECT_NEAR(got, num, 1e-6 * (1 + std::abs(num))) << c.op.ToString() << " operand " << i << " element " << j;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// A small model: embedding -> layer norm -> matmul -> gelu -> matmul -> cross-entropy.
struct Model {
  static constexpr int64_t kV = 11, kD = 8, kH = 12, kB = 6;
  std::vector<Tensor> params;  // table [V, D], ln_w [D], ln_b [D], w1 [D, H], w2 [H, V]
  Tensor ids, targets;
  Model() {
    params = {GlobalFor(DType::kF64, {kV, kD}, 1), GlobalFor(DType::kF64, {kD}, 2, 1.0),
              GlobalFor(DType::kF64, {kD}, 3), GlobalFor(DType::kF64, {kD, kH}, 4),
              GlobalFor(DType::kF64, {kH, kV}, 5)};
    for (Tensor& p : params) {
      for (int64_t i = 0; i < p.NumElements(); ++i) p.SetFromDouble(i, p.GetAsDouble(i) * 0.5);
    }
    ids = IntsFor(DType::kI64, {kB}, 7, kV);
    targets = IntsFor(DType::kI64, {kB}, 8, kV);
  }
};

// The loss and the full gradients of every parameter with the given layouts.
Status RunModel(const Model& m, const DeviceMesh& mesh, const std::vector<Placements>& param_placements,
                const Placements& batch, double* loss_out, std::vector<Tensor>* grads_out) {
  grads_out->assign(m.params.size(), Tensor::Zeros(DType::kF64, {}));
  return OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    std::vector<Variable> p;
    for (size_t i = 0; i < m.params.size(); ++i) {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(m.params[i].shape(), mesh, param_placements[i]));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(m.params[i], l, rank));
      MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), true));
      p.push_back(std::move(v));
    }
    MF_ASSIGN_OR_RETURN(Layout bl, Layout::Create({Model::kB}, mesh, batch));
    MF_ASSIGN_OR_RETURN(DTensor ids_d, Distribute(m.ids, bl, rank));
    MF_ASSIGN_OR_RETURN(DTensor tg_d, Distribute(m.targets, bl, rank));
    MF_ASSIGN_OR_RETURN(Variable ids, Variable::Leaf(std::move(ids_d), false));
    MF_ASSIGN_OR_RETURN(Variable tg, Variable::Leaf(std::move(tg_d), false));
    MF_ASSIGN_OR_RETURN(Variable x, autograd::Embedding(p[0], ids, ctx));
    MF_ASSIGN_OR_RETURN(Variable h, autograd::LayerNorm(x, 1, p[1], p[2], 1e-5, ctx));
    MF_ASSIGN_OR_RETURN(Variable h1, autograd::Matmul(h, p[3], ctx));
    MF_ASSIGN_OR_RETURN(Variable a, autograd::Gelu(h1, ctx));
    MF_ASSIGN_OR_RETURN(Variable logits, autograd::Matmul(a, p[4], ctx));
    MF_ASSIGN_OR_RETURN(Variable loss, autograd::CrossEntropy(logits, tg, LossReduction::kMean, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    MF_ASSIGN_OR_RETURN(Tensor l, FullTensor(loss.value(), ctx));
    if (rank == 0) *loss_out = l.GetAsDouble(0);
    for (size_t i = 0; i < p.size(); ++i) {
      if (!p[i].grad()) return InternalError("parameter " + std::to_string(i) + " got no gradient");
      MF_ASSIGN_OR_RETURN(Tensor g, FullTensor(*p[i].grad(), ctx));
      if (rank == 0) (*grads_out)[i] = std::move(g);
    }
    return Status::Ok();
  });
}

TEST(AutogradTest, ShardedModelGradientsEqualSingleRank) {
  const Model m;
  double want_loss = 0;
  std::vector<Tensor> want;
  const DeviceMesh one = *DeviceMesh::Create({1});
  ASSERT_TRUE(RunModel(m, one, std::vector<Placements>(5, Placements{Replicate{}}), {Replicate{}}, &want_loss, &want)
                  .ok());
  std::mt19937 rng(2024);
  int runs = 0;
  for (const std::vector<int64_t>& ms : std::vector<std::vector<int64_t>>{{2}, {4}, {2, 2}}) {
    const DeviceMesh mesh = *DeviceMesh::Create(ms);
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<Placements> pp;
      for (const Tensor& p : m.params) {
        Placements pl;
        for (int d = 0; d < mesh.ndim(); ++d) {
          const int k = static_cast<int>(rng() % (p.rank() + 1));
          pl.push_back(k == 0 ? Placement{Replicate{}} : Placement{Shard{k - 1}});
        }
        pp.push_back(std::move(pl));
      }
      Placements batch;
      for (int d = 0; d < mesh.ndim(); ++d) batch.push_back(rng() % 2 ? Placement{Shard{0}} : Placement{Replicate{}});
      double loss = 0;
      std::vector<Tensor> got;
      const Status st = RunModel(m, mesh, pp, batch, &loss, &got);
      std::string what = mesh.ToString() + " batch " + Layout::Create({Model::kB}, mesh, batch)->PlacementsString() +
                         " params";
      for (size_t i = 0; i < pp.size(); ++i) {
        what += " " + Layout::Create(m.params[i].shape(), mesh, pp[i])->PlacementsString();
      }
      ASSERT_TRUE(st.ok()) << what << ": " << st;
      EXPECT_NEAR(loss, want_loss, 1e-10) << what;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(testing::Compare(got[i], want[i]), "") << what << " param " << i;
      }
      ++runs;
    }
  }
  EXPECT_EQ(runs, 18);
}

TEST(AutogradTest, GradientsAccumulateAcrossBackwardUntilZeroGrad) {
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  const Tensor x = GlobalFor(DType::kF64, {4, 3}, 1);
  const Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({4, 3}, mesh, {Shard{0}}));
    MF_ASSIGN_OR_RETURN(DTensor d, Distribute(x, l, rank));
    MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), true));
    for (int k = 0; k < 2; ++k) {
      MF_ASSIGN_OR_RETURN(Variable s, autograd::Scale(v, 3.0, ctx));
      MF_ASSIGN_OR_RETURN(Variable loss, autograd::Sum(s, {}, false, ctx));
      MF_RETURN_IF_ERROR(Backward(loss, ctx));
    }
    MF_ASSIGN_OR_RETURN(Tensor g, FullTensor(*v.grad(), ctx));
    for (int64_t i = 0; i < g.NumElements(); ++i) {
      if (g.GetAsDouble(i) != 6.0) return InternalError("accumulated grad " + std::to_string(g.GetAsDouble(i)));
    }
    v.ZeroGrad();
    if (v.grad()) return InternalError("ZeroGrad kept the gradient");
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

TEST(AutogradTest, Errors) {
  const DeviceMesh mesh = *DeviceMesh::Create({1});
  const Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    const Tensor x = GlobalFor(DType::kF64, {4, 3}, 1);
    MF_ASSIGN_OR_RETURN(DTensor d, Distribute(x, Replicated({4, 3}, mesh), rank));
    MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(d, true));
    // Integer leaves cannot require a gradient.
    MF_ASSIGN_OR_RETURN(DTensor di, Distribute(IntsFor(DType::kI64, {3}, 1, 5), Replicated({3}, mesh), rank));
    StatusOr<Variable> bad = Variable::Leaf(di, true);
    if (bad.ok() || bad.status().code() != StatusCode::kInvalidArgument ||
        bad.status().message().find("dtype i64") == std::string::npos) {
      return InternalError("integer leaf: " + bad.status().ToString());
    }
    // A non-scalar loss needs a seed.
    MF_ASSIGN_OR_RETURN(Variable e, autograd::Exp(v, ctx));
    Status s = Backward(e, ctx);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("needs a seed") == std::string::npos) {
      return InternalError("non-scalar loss: " + s.ToString());
    }
    // A seed of the wrong shape.
    MF_ASSIGN_OR_RETURN(DTensor seed3, Distribute(GlobalFor(DType::kF64, {3}, 1), Replicated({3}, mesh), rank));
    s = Backward(e, ctx, {.seed = &seed3});
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("differs from the loss [4,3]") == std::string::npos) {
      return InternalError("bad seed: " + s.ToString());
    }
    // With a seed of the loss's shape it works; a second Backward needs retain_graph.
    MF_ASSIGN_OR_RETURN(Variable sum, autograd::Sum(e, {}, false, ctx));
    MF_RETURN_IF_ERROR(Backward(sum, ctx, {.retain_graph = true}));
    MF_RETURN_IF_ERROR(Backward(sum, ctx));
    s = Backward(sum, ctx);
    if (s.code() != StatusCode::kFailedPrecondition || s.message().find("retain_graph") == std::string::npos) {
      return InternalError("released graph: " + s.ToString());
    }
    // Rank-1 matmul backward is not implemented (the forward works).
    MF_ASSIGN_OR_RETURN(DTensor d3, Distribute(GlobalFor(DType::kF64, {3}, 2), Replicated({3}, mesh), rank));
    MF_ASSIGN_OR_RETURN(Variable w, Variable::Leaf(d3, true));
    MF_ASSIGN_OR_RETURN(Variable mv, autograd::Matmul(v, w, ctx));
    MF_ASSIGN_OR_RETURN(Variable ms, autograd::Sum(mv, {}, false, ctx));
    s = Backward(ms, ctx);
    if (s.code() != StatusCode::kUnimplemented || s.message().find("rank-1 operand") == std::string::npos) {
      return InternalError("rank-1 matmul: " + s.ToString());
    }
    // Undefined inputs.
    StatusOr<Variable> u = autograd::Add(v, Variable(), ctx);
    if (u.ok() || u.status().message().find("input 1 is an undefined Variable") == std::string::npos) {
      return InternalError("undefined input: " + u.status().ToString());
    }
    // A loss that needs no gradient: Backward does nothing.
    MF_ASSIGN_OR_RETURN(Variable c, Variable::Leaf(d, false));
    MF_ASSIGN_OR_RETURN(Variable cs, autograd::Sum(c, {}, false, ctx));
    return Backward(cs, ctx);
  });
  EXPECT_TRUE(st.ok()) << st;
}

TEST(AutogradTest, VjpErrors) {
  const DeviceMesh mesh = *DeviceMesh::Create({1});
  const Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(GlobalFor(DType::kF64, {4, 3}, 1), Replicated({4, 3}, mesh), rank));
    MF_ASSIGN_OR_RETURN(DTensor g3, Distribute(GlobalFor(DType::kF64, {3}, 2), Replicated({3}, mesh), rank));
    const DTensor* in[1] = {&x};
    // Double backward through a gradient op.
    StatusOr<std::vector<std::optional<DTensor>>> r = Vjp(OpSpec::Unary(UnaryOp::kGeluDeriv), in, x, x, ctx);
    if (r.ok() || r.status().code() != StatusCode::kUnimplemented ||
        r.status().message().find("gelu_deriv") == std::string::npos ||
        r.status().message().find("double backward") == std::string::npos) {
      return InternalError("double backward: " + r.status().ToString());
    }
    // A gradient whose shape is not the output's.
    r = Vjp(OpSpec::Unary(UnaryOp::kExp), in, x, g3, ctx);
    if (r.ok() || r.status().code() != StatusCode::kInvalidArgument ||
        r.status().message().find("gradient shape [3] differs from the output's [4,3]") == std::string::npos) {
      return InternalError("grad shape: " + r.status().ToString());
    }
    // Operand count.
    r = Vjp(OpSpec::Matmul(), in, x, x, ctx);
    if (r.ok() || r.status().message().find("expected 2 inputs, got 1") == std::string::npos) {
      return InternalError("operand count: " + r.status().ToString());
    }
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace meshflow

namespace meshflow {
namespace {

// Grad-ready hooks fire once per Backward, after every contribution reached the leaf; pre-backward
// hooks fire before the node's VJP, in reverse order of the forward.
TEST(AutogradHooksTest, FireInBackwardOrderWithFinalGradients) {
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  const Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor d, Distribute(GlobalFor(DType::kF64, {4}, 1), Replicated({4}, mesh), rank));
    MF_ASSIGN_OR_RETURN(Variable w, Variable::Leaf(d, true));
    std::vector<std::string> events;
    MF_RETURN_IF_ERROR(w.AddGradReadyHook([&]() -> Status {
      // Used twice below: the hook sees the sum of both contributions (2 + 3 per element).
      MF_ASSIGN_OR_RETURN(Tensor g, FullTensor(*w.grad(), ctx));
      events.push_back("w ready " + std::to_string(g.GetAsDouble(0)));
      return Status::Ok();
    }));
    MF_ASSIGN_OR_RETURN(Variable a, autograd::Scale(w, 2.0, ctx));
    MF_RETURN_IF_ERROR(a.AddPreBackwardHook([&]() {
      events.push_back("a");
      return Status::Ok();
    }));
    MF_ASSIGN_OR_RETURN(Variable b, autograd::Scale(w, 3.0, ctx));
    MF_ASSIGN_OR_RETURN(Variable s, autograd::Add(a, b, ctx));
    MF_RETURN_IF_ERROR(s.AddPreBackwardHook([&]() {
      events.push_back("s");
      return Status::Ok();
    }));
    MF_ASSIGN_OR_RETURN(Variable loss, autograd::Sum(s, {}, false, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    const std::vector<std::string> want = {"s", "a", "w ready 5.000000"};
    if (events != want) {
      std::string got;
      for (const std::string& e : events) got += e + "; ";
      return InternalError("hook order: " + got);
    }
    // Errors: a grad-ready hook on an op result, a pre-backward hook on a leaf, empty hooks.
    if (a.AddGradReadyHook([] { return Status::Ok(); }).code() != StatusCode::kInvalidArgument ||
        w.AddPreBackwardHook([] { return Status::Ok(); }).code() != StatusCode::kInvalidArgument ||
        w.AddGradReadyHook(nullptr).code() != StatusCode::kInvalidArgument) {
      return InternalError("hook errors");
    }
    // A failing hook ends Backward with its error.
    MF_ASSIGN_OR_RETURN(Variable c, autograd::Scale(w, 1.0, ctx));
    MF_RETURN_IF_ERROR(c.AddPreBackwardHook([] { return UnavailableError("hook says no"); }));
    MF_ASSIGN_OR_RETURN(Variable cl, autograd::Sum(c, {}, false, ctx));
    const Status bad = Backward(cl, ctx);
    if (bad.code() != StatusCode::kUnavailable) return InternalError("failing hook: " + bad.ToString());
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// A differentiable redistribution passes the gradient through; a released value is rematerialized
// by Backward when a VJP reads it (and the gradients are those of the unreleased graph).
TEST(AutogradHooksTest, RedistributeAndReleasedValues) {
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  const Tensor wg = GlobalFor(DType::kF64, {4, 3}, 3);
  const Tensor xg = GlobalFor(DType::kF64, {2, 4}, 4);
  const Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    MF_ASSIGN_OR_RETURN(Layout sharded, Layout::Create({4, 3}, mesh, {Shard{0}}));
    MF_ASSIGN_OR_RETURN(DTensor wd, Distribute(wg, sharded, rank));
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(xg, Replicated({2, 4}, mesh), rank));
    MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(xd, false));
    std::vector<Tensor> grads;
    for (int release = 0; release < 2; ++release) {
      MF_ASSIGN_OR_RETURN(Variable w, Variable::Leaf(wd, true));
      MF_ASSIGN_OR_RETURN(Variable full, autograd::Redistribute(w, Replicated({4, 3}, mesh), ctx));
      if (full.is_leaf() || full.op().has_value()) return InternalError("a redistribution is a recorded non-op result");
      MF_ASSIGN_OR_RETURN(Variable y, autograd::Matmul(x, full, ctx));
      int rematerialized = 0;
      if (release == 1) {
        MF_RETURN_IF_ERROR(full.ReleaseValue([&]() -> StatusOr<DTensor> {
          ++rematerialized;
          return Redistribute(w.value(), Replicated({4, 3}, mesh), ctx);
        }));
        if (!full.value_released()) return InternalError("not released");
        if (full.ReleaseValue([]() -> StatusOr<DTensor> { return InternalError("x"); }).code() !=
            StatusCode::kFailedPrecondition) {
          return InternalError("released twice");
        }
      }
      MF_ASSIGN_OR_RETURN(Variable loss, autograd::Sum(y, {}, false, ctx));
      MF_RETURN_IF_ERROR(Backward(loss, ctx));
      if (release == 1 && rematerialized != 1) {
        return InternalError("rematerialized " + std::to_string(rematerialized) + " times");
      }
      if (!(w.grad()->layout().mesh() == mesh)) return InternalError("grad mesh");
      MF_ASSIGN_OR_RETURN(Tensor g, FullTensor(*w.grad(), ctx));
      grads.push_back(std::move(g));
    }
    if (!(grads[0] == grads[1])) return InternalError("released graph gives other gradients");
    // d sum(x @ w) / dw[k][j] = sum_i x[i][k].
    for (int64_t k = 0; k < 4; ++k) {
      const double want = xg.GetAsDouble(k) + xg.GetAsDouble(4 + k);
      if (std::abs(grads[0].GetAsDouble(k * 3) - want) > 1e-12) return InternalError("gradient value");
    }
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace meshflow
