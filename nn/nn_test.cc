// nn/: modules, parallel styles and DistributeFrom on thread worlds of 1, 2 and 4 ranks, checked
// against one rank (f32: params after 10 AdamW steps within 2e-4 absolute, forward values within
// 1e-5) and against hand-computed values.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/ops/test_util.h"
#include "meshflow/nn/distribute.h"
#include "meshflow/nn/module.h"
#include "meshflow/nn/parallel.h"
#include "meshflow/optim/optimizer.h"

namespace meshflow {
namespace {

using testing::WorldOf;

Tensor Values(std::vector<int64_t> shape, uint32_t seed, double scale) {
  return testing::UniformValues(std::move(shape), seed, scale);
}

double MaxDiff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  double d = 0;
  for (int64_t i = 0; i < a.NumElements(); ++i) d = std::max(d, std::abs(a.GetAsDouble(i) - b.GetAsDouble(i)));
  return d;
}

// Runs fn on every rank of a thread world over a mesh of `shape` named `names`.
Status RunOn(std::vector<int64_t> shape, std::vector<std::string> names,
             const std::function<Status(RankContext&)>& fn) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(std::move(shape), std::move(names)));
  return WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return fn(ctx);
  });
}

std::string PlacementsOf(const Variable& v) { return v.value().layout().PlacementsString(); }

// A user module: registers submodules under its own names.
class Block : public nn::Module {
 public:
  static StatusOr<std::unique_ptr<Block>> Create(const RankContext& ctx) {
    std::unique_ptr<Block> b(new Block());
    MF_ASSIGN_OR_RETURN(b->ln_, nn::LayerNorm::Create({.dim = 8}, ctx));
    MF_ASSIGN_OR_RETURN(b->attn_, nn::CausalSelfAttention::Create({.dim = 8, .num_heads = 2, .seed = 3}, ctx));
    MF_ASSIGN_OR_RETURN(b->mlp_, nn::Mlp::Create({.in = 8, .hidden = 16, .out = 8, .seed = 4}, ctx));
    b->RegisterModule("ln", b->ln_.get());
    b->RegisterModule("attn", b->attn_.get());
    b->RegisterModule("mlp", b->mlp_.get());
    return b;
  }
  std::string_view type_name() const override { return "Block"; }

 private:
  Block() = default;
  std::unique_ptr<nn::LayerNorm> ln_;
  std::unique_ptr<nn::CausalSelfAttention> attn_;
  std::unique_ptr<nn::Mlp> mlp_;
};

TEST(NnTest, HierarchicalNamesAndDeterministicInit) {
  std::map<std::string, Tensor> single;
  Status st = RunOn({1}, {"dp"}, [&](RankContext& ctx) -> Status {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Block> b, Block::Create(ctx));
    std::vector<std::string> names;
    for (const nn::NamedParameter& p : b->NamedParameters()) {
      names.push_back(p.name);
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(p.variable.value(), ctx));
      single[p.name] = std::move(f);
    }
    const std::vector<std::string> want = {"ln.weight",      "ln.bias",        "attn.q.weight", "attn.k.weight",
                                           "attn.v.weight",  "attn.o.weight",  "mlp.fc1.weight", "mlp.fc1.bias",
                                           "mlp.fc2.weight", "mlp.fc2.bias"};
    EXPECT_EQ(names, want);
    MF_ASSIGN_OR_RETURN(nn::Module * fc1, b->Submodule("mlp.fc1"));
    EXPECT_EQ(fc1->type_name(), "Linear");
    EXPECT_EQ(b->NamedModules().size(), 10u);  // "", ln, attn, attn.{q,k,v,o}, mlp, mlp.fc{1,2}
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
  // Linear init: within torch's bound 1/sqrt(in), not constant; q and k differ (own seeds).
  const Tensor& w = single["mlp.fc1.weight"];
  double lo = 1, hi = -1;
  for (int64_t i = 0; i < w.NumElements(); ++i) {
    lo = std::min(lo, w.GetAsDouble(i));
    hi = std::max(hi, w.GetAsDouble(i));
  }
  EXPECT_LE(hi, 1 / std::sqrt(8.0));
  EXPECT_GE(lo, -1 / std::sqrt(8.0));
  EXPECT_GT(hi - lo, 0.3);
  EXPECT_GT(MaxDiff(single["attn.q.weight"], single["attn.k.weight"]), 0.1);
  EXPECT_EQ(single["ln.weight"].GetAsDouble(3), 1.0);
  // Same values on a 2x2 mesh.
  st = RunOn({2, 2}, {"dp", "tp"}, [&](RankContext& ctx) -> Status {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Block> b, Block::Create(ctx));
    for (const nn::NamedParameter& p : b->NamedParameters()) {
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(p.variable.value(), ctx));
      EXPECT_EQ(MaxDiff(f, single.at(p.name)), 0.0) << p.name;
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
}

TEST(NnTest, LinearForwardMatchesHandComputation) {
  const Tensor x = Values({3, 4}, 1, 1.0);
  Status st = RunOn({1}, {"dp"}, [&](RankContext& ctx) -> Status {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Linear> fc, nn::Linear::Create({.in = 4, .out = 5, .seed = 9}, ctx));
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({3, 4}, ctx.mesh(), {Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor xd, nn::Distribute(x, l, ctx));
    MF_ASSIGN_OR_RETURN(Variable xv, Variable::Leaf(std::move(xd), false));
    MF_ASSIGN_OR_RETURN(Variable y, fc->Forward(xv, ctx));
    MF_ASSIGN_OR_RETURN(Tensor yf, FullTensor(y.value(), ctx));
    const Tensor& w = fc->weight().value().local();
    const Tensor& b = fc->bias().value().local();
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t o = 0; o < 5; ++o) {
        double s = b.GetAsDouble(o);
        for (int64_t k = 0; k < 4; ++k) s += x.GetAsDouble(i * 4 + k) * w.GetAsDouble(k * 5 + o);
        EXPECT_NEAR(yf.GetAsDouble(i * 5 + o), s, 1e-6);
      }
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
}

// Forward of a module on `mesh` with input x distributed by `input_layout` (from rank 0); returns
// the full output, and (when grads != nullptr) the full gradients of mean(out) by param name.
using MakeModule = std::function<StatusOr<std::unique_ptr<nn::Module>>(RankContext&)>;
using ForwardFn = std::function<StatusOr<Variable>(nn::Module&, const Variable&, RankContext&)>;
using InputLayoutFn = std::function<StatusOr<Layout>(nn::Module&, RankContext&)>;

Status ForwardOn(std::vector<int64_t> shape, std::vector<std::string> names, const MakeModule& make,
                 const ForwardFn& forward, const Tensor& x, const InputLayoutFn& input_layout, Tensor* out,
                 std::map<std::string, Tensor>* grads, std::map<std::string, std::string>* layouts = nullptr) {
  return RunOn(std::move(shape), std::move(names), [&](RankContext& ctx) -> Status {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Module> m, make(ctx));
    MF_ASSIGN_OR_RETURN(Layout l, input_layout(*m, ctx));
    MF_ASSIGN_OR_RETURN(DTensor xd, nn::DistributeFrom(ctx.world_rank() == 0 ? &x : nullptr, l, 0, ctx));
    MF_ASSIGN_OR_RETURN(Variable xv, Variable::Leaf(std::move(xd), false));
    MF_ASSIGN_OR_RETURN(Variable y, forward(*m, xv, ctx));
    MF_ASSIGN_OR_RETURN(Tensor yf, FullTensor(y.value(), ctx));
    if (ctx.world_rank() == 0) *out = std::move(yf);
    if (layouts != nullptr && ctx.world_rank() == 0) {
      (*layouts)["output"] = PlacementsOf(y);
      for (const nn::NamedParameter& p : m->NamedParameters()) (*layouts)[p.name] = PlacementsOf(p.variable);
    }
    if (grads == nullptr) return Status::Ok();
    MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(y, {}, false, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    for (const nn::NamedParameter& p : m->NamedParameters()) {
      if (!p.variable.grad()) return InvalidArgumentError("no gradient for " + p.name);
      MF_ASSIGN_OR_RETURN(Tensor g, FullTensor(*p.variable.grad(), ctx));
      if (ctx.world_rank() == 0) (*grads)[p.name] = std::move(g);
    }
    return Status::Ok();
  });
}

InputLayoutFn Batch(Placements p) {
  return [p](nn::Module&, RankContext& ctx) -> StatusOr<Layout> {
    return Layout::Create({2, 4, 8}, ctx.mesh(), p);
  };
}

TEST(NnTest, TensorParallelMlpInThreeLines) {
  const Tensor x = Values({2, 4, 8}, 2, 1.0);
  const ForwardFn fwd = [](nn::Module& m, const Variable& x, RankContext& c) {
    return static_cast<nn::Mlp&>(m).Forward(x, c);
  };
  auto make = [](bool tp) -> MakeModule {
    return [tp](RankContext& ctx) -> StatusOr<std::unique_ptr<nn::Module>> {
      // The three lines: create, parallelize, (forward below).
      MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> mlp, nn::Mlp::Create({.in = 8, .hidden = 16, .out = 8, .seed = 1}, ctx));
      if (tp) {
        MF_RETURN_IF_ERROR(nn::Parallelize(*mlp, "tp", {{"fc1", nn::ColwiseParallel{}}, {"fc2", nn::RowwiseParallel{}}}, ctx));
      }
      return std::unique_ptr<nn::Module>(std::move(mlp));
    };
  };
  Tensor want, got;
  std::map<std::string, Tensor> want_g, got_g;
  std::map<std::string, std::string> layouts;
  Status st = ForwardOn({1}, {"tp"}, make(false), fwd, x, Batch({Replicate{}}), &want, &want_g);
  ASSERT_TRUE(st.ok()) << st;
  st = ForwardOn({2}, {"tp"}, make(true), fwd, x, Batch({Replicate{}}), &got, &got_g, &layouts);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_LT(MaxDiff(got, want), 1e-5);
  ASSERT_EQ(want_g.size(), 4u);
  for (const auto& [name, g] : want_g) EXPECT_LT(MaxDiff(got_g[name], g), 1e-5) << name;
  EXPECT_EQ(layouts["fc1.weight"], "S(1)");
  EXPECT_EQ(layouts["fc1.bias"], "S(0)");
  EXPECT_EQ(layouts["fc2.weight"], "S(0)");
  EXPECT_EQ(layouts["fc2.bias"], "R");
}

// 10 AdamW steps of an MLP regression; returns the full params and the losses.
struct TrainResult {
  std::map<std::string, Tensor> params;
  std::map<std::string, std::string> layouts;
  std::vector<double> losses;
};

Status TrainMlp(std::vector<int64_t> shape, std::vector<std::string> names,
                const std::function<Status(nn::Mlp&, RankContext&)>& parallelize, Placements batch, TrainResult* out) {
  const Tensor x = Values({16, 8}, 3, 1.0), y = Values({16, 4}, 4, 0.5);
  return RunOn(std::move(shape), std::move(names), [&](RankContext& ctx) -> Status {
    const bool root = ctx.world_rank() == 0;
    MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> mlp, nn::Mlp::Create({.in = 8, .hidden = 16, .out = 4, .seed = 5}, ctx));
    MF_RETURN_IF_ERROR(parallelize(*mlp, ctx));
    AdamWOptions o;
    o.lr = 1e-2;
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(mlp->ParamSpecs(), o, ctx));
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({16, 8}, ctx.mesh(), batch));
    MF_ASSIGN_OR_RETURN(Layout yl, Layout::Create({16, 4}, ctx.mesh(), batch));
    MF_ASSIGN_OR_RETURN(DTensor xd, nn::DistributeFrom(root ? &x : nullptr, xl, 0, ctx));
    MF_ASSIGN_OR_RETURN(DTensor yd, nn::DistributeFrom(root ? &y : nullptr, yl, 0, ctx));
    MF_ASSIGN_OR_RETURN(Variable xv, Variable::Leaf(std::move(xd), false));
    MF_ASSIGN_OR_RETURN(Variable yv, Variable::Leaf(std::move(yd), false));
    for (int step = 0; step < 10; ++step) {
      MF_ASSIGN_OR_RETURN(Variable pred, mlp->Forward(xv, ctx));
      MF_ASSIGN_OR_RETURN(Variable d, autograd::Sub(pred, yv, ctx));
      MF_ASSIGN_OR_RETURN(Variable sq, autograd::Mul(d, d, ctx));
      MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(sq, {}, false, ctx));
      MF_ASSIGN_OR_RETURN(Tensor l, FullTensor(loss.value(), ctx));
      if (root) out->losses.push_back(l.GetAsDouble(0));
      MF_RETURN_IF_ERROR(Backward(loss, ctx));
      MF_RETURN_IF_ERROR(opt->Step(mlp->Grads(), ctx));
      mlp->ZeroGrad();
    }
    for (const nn::NamedParameter& p : mlp->NamedParameters()) {
      MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(p.variable.value(), ctx));
      if (root) {
        out->params[p.name] = std::move(f);
        out->layouts[p.name] = PlacementsOf(p.variable);
      }
    }
    return Status::Ok();
  });
}

void ExpectSameParams(const TrainResult& got, const TrainResult& want) {
  ASSERT_EQ(want.params.size(), 4u);
  ASSERT_EQ(got.params.size(), want.params.size());
  for (const auto& [name, w] : want.params) EXPECT_LT(MaxDiff(got.params.at(name), w), 2e-4) << name;
  ASSERT_EQ(got.losses.size(), 10u);
  EXPECT_NEAR(got.losses.back(), want.losses.back(), 1e-5);
}

TEST(NnTest, TrainsUnderColwiseRowwiseOnDpTpLikeOneRank) {
  const Placement r = Replicate{}, s0 = Shard{0};
  TrainResult want, got;
  Status st = TrainMlp({1}, {"dp"}, [](nn::Mlp&, RankContext&) { return Status::Ok(); }, {r}, &want);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_LT(want.losses.back(), 0.8 * want.losses.front());
  st = TrainMlp({2, 2}, {"dp", "tp"}, [](nn::Mlp& m, RankContext& c) {
    return nn::Parallelize(m, "tp", {{"fc1", nn::ColwiseParallel{}}, {"fc2", nn::RowwiseParallel{}}}, c);
  }, {s0, r}, &got);
  ASSERT_TRUE(st.ok()) << st;
  ExpectSameParams(got, want);
  EXPECT_EQ(got.layouts["fc1.weight"], "R,S(1)");
  EXPECT_EQ(got.layouts["fc2.weight"], "R,S(0)");
}

TEST(NnTest, FsdpStyleShardsEveryParamAndTrainsLikeOneRank) {
  const Placement r = Replicate{}, s0 = Shard{0};
  TrainResult want, fsdp, fsdp_tp;
  Status st = TrainMlp({1}, {"dp"}, [](nn::Mlp&, RankContext&) { return Status::Ok(); }, {r}, &want);
  ASSERT_TRUE(st.ok()) << st;
  st = TrainMlp({4}, {"dp"}, [](nn::Mlp& m, RankContext& c) { return nn::Parallelize(m, "dp", {{"", nn::Fsdp{}}}, c); },
                {s0}, &fsdp);
  ASSERT_TRUE(st.ok()) << st;
  ExpectSameParams(fsdp, want);
  for (const auto& [name, l] : fsdp.layouts) EXPECT_EQ(l, "S(0)") << name;
  // FSDP + TP: dp shards the first dim tp leaves whole (dim 0 when tp shards the only dim).
  st = TrainMlp({2, 2}, {"dp", "tp"}, [](nn::Mlp& m, RankContext& c) -> Status {
    MF_RETURN_IF_ERROR(nn::Parallelize(m, "tp", {{"fc1", nn::ColwiseParallel{}}, {"fc2", nn::RowwiseParallel{}}}, c));
    return nn::Parallelize(m, "dp", {{"", nn::Fsdp{}}}, c);
  }, {s0, r}, &fsdp_tp);
  ASSERT_TRUE(st.ok()) << st;
  ExpectSameParams(fsdp_tp, want);
  EXPECT_EQ(fsdp_tp.layouts["fc1.weight"], "S(0),S(1)");
  EXPECT_EQ(fsdp_tp.layouts["fc1.bias"], "S(0),S(0)");
  EXPECT_EQ(fsdp_tp.layouts["fc2.weight"], "S(1),S(0)");
  EXPECT_EQ(fsdp_tp.layouts["fc2.bias"], "S(0),R");
}

const ForwardFn kAttention = [](nn::Module& m, const Variable& x, RankContext& c) {
  return static_cast<nn::CausalSelfAttention&>(m).Forward(x, c);
};

MakeModule Attention(int64_t heads, bool tp) {
  return [heads, tp](RankContext& ctx) -> StatusOr<std::unique_ptr<nn::Module>> {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::CausalSelfAttention> a,
                        nn::CausalSelfAttention::Create({.dim = 8, .num_heads = heads, .seed = 7}, ctx));
    if (tp) {
      MF_RETURN_IF_ERROR(nn::Parallelize(*a, "tp", {{"q", nn::ColwiseParallel{}}, {"k", nn::ColwiseParallel{}},
                                                    {"v", nn::ColwiseParallel{}}, {"o", nn::RowwiseParallel{}}},
                                         ctx));
    }
    return std::unique_ptr<nn::Module>(std::move(a));
  };
}

TEST(NnTest, AttentionForwardAndGradientsEqualOneRank) {
  const Tensor x = Values({2, 4, 8}, 6, 1.0);
  const Placement r = Replicate{}, s0 = Shard{0};
  for (int64_t heads : {1, 2}) {
    Tensor want, got;
    std::map<std::string, Tensor> want_g, got_g;
    Status st = ForwardOn({1}, {"tp"}, Attention(heads, false), kAttention, x, Batch({r}), &want, &want_g);
    ASSERT_TRUE(st.ok()) << st;
    st = ForwardOn({2, 2}, {"dp", "tp"}, Attention(heads, true), kAttention, x, Batch({s0, r}), &got, &got_g);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_LT(MaxDiff(got, want), 1e-5) << heads << " heads";
    ASSERT_EQ(want_g.size(), 4u);
    for (const auto& [name, g] : want_g) EXPECT_LT(MaxDiff(got_g[name], g), 1e-5) << name << ", " << heads << " heads";
  }
}

TEST(NnTest, AttentionIsCausal) {
  // Changing the last position changes only the last position's output.
  Tensor x = Values({2, 4, 8}, 6, 1.0), x2 = x;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t d = 0; d < 8; ++d) x2.SetFromDouble((b * 4 + 3) * 8 + d, 5.0);
  }
  Tensor a, a2;
  Status st = ForwardOn({1}, {"tp"}, Attention(2, false), kAttention, x, Batch({Replicate{}}), &a, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  st = ForwardOn({1}, {"tp"}, Attention(2, false), kAttention, x2, Batch({Replicate{}}), &a2, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 4; ++t) {
      double diff = 0;
      for (int64_t d = 0; d < 8; ++d) {
        const int64_t i = (b * 4 + t) * 8 + d;
        diff = std::max(diff, std::abs(a.GetAsDouble(i) - a2.GetAsDouble(i)));
      }
      if (t < 3) {
        EXPECT_EQ(diff, 0.0) << "b " << b << " t " << t;
      } else {
        EXPECT_GT(diff, 1e-3);
      }
    }
  }
}

TEST(NnTest, SequenceParallelNormsKeepTheSequenceSharding) {
  const Tensor x = Values({2, 4, 8}, 8, 2.0);
  for (bool rms : {false, true}) {
    const MakeModule make = [rms](RankContext& ctx) -> StatusOr<std::unique_ptr<nn::Module>> {
      std::unique_ptr<nn::Module> m;
      if (rms) {
        MF_ASSIGN_OR_RETURN(m, nn::RmsNorm::Create({.dim = 8}, ctx));
      } else {
        MF_ASSIGN_OR_RETURN(m, nn::LayerNorm::Create({.dim = 8}, ctx));
      }
      MF_RETURN_IF_ERROR(nn::Parallelize(*m, "tp", {{"", nn::SequenceParallel{}}}, ctx));
      return m;
    };
    const ForwardFn fwd = [rms](nn::Module& m, const Variable& x, RankContext& c) {
      return rms ? static_cast<nn::RmsNorm&>(m).Forward(x, c) : static_cast<nn::LayerNorm&>(m).Forward(x, c);
    };
    const InputLayoutFn input = [](nn::Module& m, RankContext& c) { return m.InputLayout({2, 4, 8}, c.mesh()); };
    Tensor want, got;
    std::map<std::string, Tensor> want_g, got_g;
    std::map<std::string, std::string> layouts;
    Status st = ForwardOn({1}, {"tp"}, make, fwd, x, input, &want, &want_g);
    ASSERT_TRUE(st.ok()) << st;
    st = ForwardOn({2}, {"tp"}, make, fwd, x, input, &got, &got_g, &layouts);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_LT(MaxDiff(got, want), 1e-5);
    ASSERT_EQ(want_g.size(), rms ? 1u : 2u);
    for (const auto& [name, g] : want_g) EXPECT_LT(MaxDiff(got_g[name], g), 1e-5) << name;
    EXPECT_EQ(layouts["output"], "S(1)") << (rms ? "rms" : "layer") << " norm";
    EXPECT_EQ(layouts["weight"], "R");
  }
}

TEST(NnTest, EmbeddingRowwiseAndColwise) {
  Tensor ids = Tensor::Zeros(DType::kI64, {2, 4});
  for (int64_t i = 0; i < 8; ++i) ids.SetFromDouble(i, (i * 5) % 10);
  for (bool col : {false, true}) {
    std::vector<Tensor> out(2);
    std::string layout;
    for (int run = 0; run < 2; ++run) {
      Status st = RunOn({run == 0 ? 1 : 2}, {"tp"}, [&](RankContext& ctx) -> Status {
        MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Embedding> e, nn::Embedding::Create({.num = 10, .dim = 6, .seed = 2}, ctx));
        if (run == 1) {
          nn::ParallelStyle style = nn::RowwiseParallel{};
          if (col) style = nn::ColwiseParallel{};
          MF_RETURN_IF_ERROR(nn::Parallelize(*e, "tp", {{"", style}}, ctx));
        }
        MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({2, 4}, ctx.mesh(), {Replicate{}}));
        MF_ASSIGN_OR_RETURN(DTensor idd, nn::DistributeFrom(ctx.world_rank() == 0 ? &ids : nullptr, l, 0, ctx));
        MF_ASSIGN_OR_RETURN(Variable iv, Variable::Leaf(std::move(idd), false));
        MF_ASSIGN_OR_RETURN(Variable y, e->Forward(iv, ctx));
        MF_ASSIGN_OR_RETURN(Tensor f, FullTensor(y.value(), ctx));
        if (ctx.world_rank() == 0) {
          out[static_cast<size_t>(run)] = std::move(f);
          layout = PlacementsOf(e->weight());
        }
        return Status::Ok();
      });
      ASSERT_TRUE(st.ok()) << st;
    }
    EXPECT_EQ(MaxDiff(out[0], out[1]), 0.0);
    EXPECT_EQ(layout, col ? "S(1)" : "S(0)");
  }
}

TEST(NnTest, DistributeFromEqualsDistributeAndSendsOnlyBoxes) {
  const Tensor global = Values({5, 3}, 9, 1.0);
  const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1}, p = Partial{};
  const std::vector<Placements> cases = {{s0, r}, {s0, s1}, {r, r}, {p, s1}, {s1, s1}};
  for (const Placements& pl : cases) {
    Status st = RunOn({2, 2}, {"dp", "tp"}, [&](RankContext& ctx) -> Status {
      const int me = ctx.world_rank();
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({5, 3}, ctx.mesh(), pl));
      const ByteCounters before = ctx.world().counters();
      MF_ASSIGN_OR_RETURN(DTensor d, nn::DistributeFrom(me == 3 ? &global : nullptr, l, /*src_rank=*/3, ctx));
      const ByteCounters after = ctx.world().counters();
      MF_ASSIGN_OR_RETURN(DTensor want, Distribute(global, l, me));
      EXPECT_EQ(d.local(), want.local()) << l.ToString() << " rank " << me;
      EXPECT_EQ(d.layout(), l);
      if (me != 3) {
        const int64_t header = 11 * 8;
        EXPECT_EQ(after.bytes_received - before.bytes_received, header + want.local().NumBytes())
            << l.ToString() << " rank " << me;
      }
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st;
  }
}

// The status rank 0's fn returned (the world itself must not fail: fn's errors are not returned to Run).
Status ErrorOf(const std::function<Status(RankContext&)>& fn, std::vector<int64_t> shape = {1},
                         std::vector<std::string> names = {"tp"}) {
  Status inner = Status::Ok();
  std::mutex mu;
  Status outer = RunOn(std::move(shape), std::move(names), [&](RankContext& ctx) -> Status {
    Status s = fn(ctx);
    std::lock_guard<std::mutex> lock(mu);
    if (ctx.world_rank() == 0) inner = s;
    return Status::Ok();
  });
  if (!outer.ok()) return InternalError("the world failed: " + outer.message());
  return inner;
}

void ExpectError(const Status& s, std::string_view words) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(words), std::string::npos) << s;
}

TEST(NnTest, CreateAndForwardErrors) {
  ExpectError(ErrorOf([](RankContext& c) { return nn::Linear::Create({.in = 0, .out = 3}, c).status(); }),
              "Linear: in 0 must be >= 1");
  ExpectError(ErrorOf([](RankContext& c) { return nn::Embedding::Create({.num = 4, .dim = -2}, c).status(); }),
              "Embedding: dim -2 must be >= 1");
  ExpectError(ErrorOf([](RankContext& c) {
                return nn::Linear::Create({.in = 2, .out = 3, .dtype = DType::kI32}, c).status();
              }),
              "Linear: dtype i32 is not a float dtype");
  ExpectError(ErrorOf([](RankContext& c) { return nn::LayerNorm::Create({.dim = 4, .eps = 0}, c).status(); }),
              "LayerNorm: eps 0 must be finite and > 0");
  ExpectError(ErrorOf([](RankContext& c) { return nn::RmsNorm::Create({.dim = 4, .eps = -1}, c).status(); }),
              "RmsNorm: eps -1 must be finite and > 0");
  ExpectError(ErrorOf([](RankContext& c) { return nn::MakeParameter({2}, DType::kI64, 1, 1.0, 0, c).status(); }),
              "MakeParameter: dtype i64 is not a float dtype (f32, f64, bf16)");
  ExpectError(ErrorOf([](RankContext& c) -> Status {
                MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::CausalSelfAttention> a,
                                    nn::CausalSelfAttention::Create({.dim = 8, .num_heads = 2}, c));
                return a->Forward(Variable(), c).status();
              }),
              "CausalSelfAttention: the input is an undefined Variable");
  ExpectError(ErrorOf([](RankContext& c) {
                return nn::CausalSelfAttention::Create({.dim = 6, .num_heads = 4}, c).status();
              }),
              "CausalSelfAttention: dim 6 is not divisible by num_heads 4");
  ExpectError(ErrorOf([](RankContext& c) -> Status {
                MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::CausalSelfAttention> a,
                                    nn::CausalSelfAttention::Create({.dim = 8, .num_heads = 2}, c));
                MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({4, 8}, c.mesh(), {Replicate{}}));
                MF_ASSIGN_OR_RETURN(DTensor d, nn::Distribute(Values({4, 8}, 1, 1.0), l, c));
                MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(std::move(d), false));
                return a->Forward(x, c).status();
              }),
              "CausalSelfAttention: input must be [batch, seq, 8], got shape [4,8]");
  ExpectError(ErrorOf([](RankContext& c) -> Status {
                MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> m, nn::Mlp::Create({.in = 2, .hidden = 2, .out = 2}, c));
                return m->Submodule("fc3").status();
              }),
              "no submodule 'fc3' in this Mlp; submodules: fc1, fc2");
}

TEST(NnTest, ParallelizeErrorsChangeNothing) {
  auto with_mlp = [](std::function<Status(nn::Mlp&, RankContext&)> f) {
    return ErrorOf([f](RankContext& c) -> Status {
      MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> m, nn::Mlp::Create({.in = 4, .hidden = 4, .out = 4}, c));
      const Status s = f(*m, c);
      for (const nn::NamedParameter& p : m->NamedParameters()) {
        EXPECT_EQ(PlacementsOf(p.variable), "R,R") << p.name << " changed by a failed Parallelize";
      }
      return s;
    }, {2, 2}, {"dp", "tp"});
  };
  ExpectError(with_mlp([](nn::Mlp& m, RankContext& c) {
                return nn::Parallelize(m, "pp", {{"fc1", nn::ColwiseParallel{}}}, c);
              }),
              "Parallelize: mesh dim 'pp' is not a dim of mesh");
  ExpectError(with_mlp([](nn::Mlp& m, RankContext& c) {
                return nn::Parallelize(m, "tp", {{"fc1", nn::ColwiseParallel{}}, {"fc3", nn::RowwiseParallel{}}}, c);
              }),
              "Parallelize: no submodule 'fc3' in this Mlp; submodules: fc1, fc2");
  ExpectError(with_mlp([](nn::Mlp& m, RankContext& c) {
                return nn::Parallelize(m, "tp", {{"fc1", nn::ColwiseParallel{}}, {"", nn::RowwiseParallel{}}}, c);
              }),
              "Parallelize: RowwiseParallel applies to Linear or Embedding, but '' is a Mlp");
  ExpectError(with_mlp([](nn::Mlp& m, RankContext& c) {
                return nn::Parallelize(m, "tp", {{"fc1", nn::SequenceParallel{}}}, c);
              }),
              "Parallelize: SequenceParallel applies to LayerNorm or RmsNorm, but 'fc1' is a Linear");
  ExpectError(ErrorOf([](RankContext& c) -> Status {
                MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::LayerNorm> ln, nn::LayerNorm::Create({.dim = 4}, c));
                return nn::Parallelize(*ln, "tp", {{"", nn::SequenceParallel{.sequence_dim = -1}}}, c);
              }),
              "Parallelize: SequenceParallel sequence_dim -1 must be >= 0");
  // A module created on another mesh than the communicators'.
  ExpectError(ErrorOf([](RankContext& c) -> Status {
                MF_ASSIGN_OR_RETURN(RankContext other, RankContext::Create(c.world(), DeviceMesh::Create({1}, {"dp"}).value()));
                MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Linear> fc, nn::Linear::Create({.in = 2, .out = 2}, other));
                return nn::Parallelize(*fc, "tp", {{"", nn::ColwiseParallel{}}}, c);
              }),
              "Parallelize: param 'weight' is on mesh");
}

TEST(NnTest, DistributeFromErrors) {
  const Tensor global = Values({4, 4}, 1, 1.0);
  auto run = [&](std::function<Status(RankContext&, const Layout&)> f) {
    return ErrorOf([f](RankContext& c) -> Status {
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({4, 4}, c.mesh(), {Shard{0}, Replicate{}}));
      return f(c, l);
    }, {2, 2}, {"dp", "tp"});
  };
  ExpectError(run([](RankContext& c, const Layout& l) { return nn::DistributeFrom(nullptr, l, 1, c).status(); }),
              "DistributeFrom: the global tensor on src_rank 1 is null");
  const Tensor wrong = Values({3, 4}, 1, 1.0);
  ExpectError(run([&](RankContext& c, const Layout& l) {
                return nn::DistributeFrom(c.world_rank() == 2 ? &wrong : nullptr, l, 2, c).status();
              }),
              "DistributeFrom: the global tensor on src_rank 2 has shape [3,4] but the layout has shape [4,4]");
  ExpectError(run([&](RankContext& c, const Layout& l) { return nn::DistributeFrom(&global, l, 4, c).status(); }),
              "DistributeFrom: src_rank 4 is not a rank of mesh");
  ExpectError(run([&](RankContext& c, const Layout&) -> Status {
                MF_ASSIGN_OR_RETURN(Layout other, Layout::Create({4, 4}, DeviceMesh::Create({4}).value(), {Shard{0}}));
                return nn::DistributeFrom(&global, other, 0, c).status();
              }),
              "DistributeFrom: layout is on mesh");
}

}  // namespace
}  // namespace meshflow
