#include "meshflow/optim/grad_reducer.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/autograd/functions.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

struct Model {
  std::vector<Variable> params;
  std::unique_ptr<Optimizer> opt;
};

// Three params of `sizes` elements on a {4} mesh, replicated (DDP) or with ZeRO state S(0).
StatusOr<Model> MakeModel(const std::vector<int64_t>& sizes, DType dtype, bool zero, RankContext& ctx) {
  Model m;
  m.params.reserve(sizes.size());
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor t = Tensor::Zeros(dtype, {sizes[i]});
    for (int64_t k = 0; k < sizes[i]; ++k) t.SetFromDouble(k, 0.01 * static_cast<double>((k * 7 + i) % 13));
    MF_ASSIGN_OR_RETURN(Layout r, Layout::Create({sizes[i]}, ctx.mesh(), {Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor d, Distribute(t, r, ctx.world_rank()));
    MF_ASSIGN_OR_RETURN(Variable v, Variable::Leaf(std::move(d), true));
    m.params.push_back(std::move(v));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::optional<Layout> state;
    if (zero) {
      MF_ASSIGN_OR_RETURN(state, Layout::Create({sizes[i]}, ctx.mesh(), {Shard{0}}));
    }
    specs.push_back(ParamSpec{"p" + std::to_string(i), m.params[i].mutable_leaf_value(), state});
  }
  MF_ASSIGN_OR_RETURN(m.opt, AdamW::Create(specs, AdamWOptions{.lr = 0.1}, ctx));
  return m;
}

// loss = sum over params of sum(p * x_rank) with a rank-dependent x: Partial(sum) gradients.
Status ForwardBackward(Model& m, RankContext& ctx, int step) {
  std::optional<Variable> loss;
  for (Variable& p : m.params) {
    const std::vector<int64_t>& shape = p.value().global_shape();
    Tensor x = Tensor::Zeros(p.value().dtype(), shape);
    for (int64_t k = 0; k < x.NumElements(); ++k) {
      x.SetFromDouble(k, 0.5 + 0.25 * static_cast<double>((k + ctx.world_rank() * 3 + step) % 5));
    }
    // Each rank's own x: the product's sum over ranks is the loss (a Partial(sum) input).
    MF_ASSIGN_OR_RETURN(Layout pl, Layout::Create(shape, ctx.mesh(), {Partial{ReduceOp::kSum}}));
    MF_ASSIGN_OR_RETURN(DTensor xd, DTensor::FromLocal(std::move(x), pl, ctx.world_rank()));
    MF_ASSIGN_OR_RETURN(Variable xv, Variable::Leaf(std::move(xd), false));
    MF_ASSIGN_OR_RETURN(Variable prod, autograd::Mul(p, xv, ctx));
    MF_ASSIGN_OR_RETURN(Variable s, autograd::Sum(prod, {}, false, ctx));
    if (loss) {
      MF_ASSIGN_OR_RETURN(Variable t, autograd::Add(*loss, s, ctx));
      loss = t;
    } else {
      loss = s;
    }
  }
  return Backward(*loss, ctx);
}

StatusOr<std::vector<Tensor>> Train(bool bucketed, bool zero, DType dtype, RankContext& ctx, GradReducerStats* stats) {
  const std::vector<int64_t> sizes = {1000, 600, 3000};
  MF_ASSIGN_OR_RETURN(Model m, MakeModel(sizes, dtype, zero, ctx));
  std::unique_ptr<GradReducer> reducer;
  if (bucketed) {
    std::vector<Variable*> ps;
    for (Variable& p : m.params) ps.push_back(&p);
    // 4 KiB of f32 gradient per bucket: {p2} (12 KB, over alone), {p1, p0}.
    MF_ASSIGN_OR_RETURN(reducer, GradReducer::Create(ps, *m.opt, GradReducerOptions{.bucket_bytes = 6400}, ctx));
    if (reducer->num_buckets() != 2 || reducer->bucket(0) != std::vector<int>{2} ||
        reducer->bucket(1) != (std::vector<int>{1, 0})) {
      return InternalError("unexpected bucket assignment");
    }
  }
  for (int step = 0; step < 3; ++step) {
    MF_RETURN_IF_ERROR(ForwardBackward(m, ctx, step));
    if (reducer) MF_RETURN_IF_ERROR(reducer->Finish(ctx));
    std::vector<const DTensor*> grads;
    for (Variable& p : m.params) grads.push_back(&*p.grad());
    MF_RETURN_IF_ERROR(m.opt->Step(grads, ctx));
    for (Variable& p : m.params) p.ZeroGrad();
  }
  if (reducer && stats) *stats = reducer->stats();
  std::vector<Tensor> out;
  for (Variable& p : m.params) {
    MF_ASSIGN_OR_RETURN(Tensor t, FullTensor(p.value(), ctx));
    out.push_back(std::move(t));
  }
  return out;
}

Status OnWorld(const std::function<Status(RankContext&)>& body) {
  static ThreadWorld* world = ThreadWorld::Create(4).value().release();
  const DeviceMesh mesh = *DeviceMesh::Create({4}, {"dp"});
  return world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return body(ctx);
  });
}

class GradReducerEquality : public ::testing::TestWithParam<std::tuple<bool, DType>> {};

// Bucketed reduction gives the serial path's bits: DDP (fused all-reduces), ZeRO (reduce-scatters),
// f32 and bf16 params (converted to f32 before reducing, as Step does).
TEST_P(GradReducerEquality, MatchesTheSerialStepBitForBit) {
  const auto [zero, dtype] = GetParam();
  std::mutex mu;
  std::vector<std::vector<Tensor>> serial(4), bucketed(4);
  GradReducerStats stats;
  const Status s = OnWorld([&](RankContext& ctx) -> Status {
    MF_ASSIGN_OR_RETURN(std::vector<Tensor> a, Train(false, zero, dtype, ctx, nullptr));
    GradReducerStats mine;
    MF_ASSIGN_OR_RETURN(std::vector<Tensor> b, Train(true, zero, dtype, ctx, &mine));
    std::lock_guard<std::mutex> lock(mu);
    serial[static_cast<size_t>(ctx.world_rank())] = std::move(a);
    bucketed[static_cast<size_t>(ctx.world_rank())] = std::move(b);
    stats = mine;
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 4; ++r) {
    for (size_t i = 0; i < serial[0].size(); ++i) {
      EXPECT_TRUE(serial[static_cast<size_t>(r)][i] == bucketed[static_cast<size_t>(r)][i]) << "rank " << r << " p" << i;
    }
  }
  EXPECT_EQ(stats.launched_in_backward, 6);  // both buckets, every step, from the hooks
  EXPECT_EQ(stats.launched_in_finish, 0);
}

INSTANTIATE_TEST_SUITE_P(Plans, GradReducerEquality,
                         ::testing::Values(std::make_tuple(false, DType::kF32), std::make_tuple(true, DType::kF32),
                                           std::make_tuple(false, DType::kBF16)));

TEST(GradReducerTest, Errors) {
  const Status s = OnWorld([&](RankContext& ctx) -> Status {
    MF_ASSIGN_OR_RETURN(Model m, MakeModel({10, 20}, DType::kF32, false, ctx));
    std::vector<Variable*> one = {&m.params[0]};
    if (GradReducer::Create(one, *m.opt, {}, ctx).status().code() != StatusCode::kInvalidArgument) {
      return InternalError("param count");
    }
    std::vector<Variable*> ps = {&m.params[0], &m.params[1]};
    if (GradReducer::Create(ps, *m.opt, GradReducerOptions{.bucket_bytes = 0}, ctx).status().code() !=
        StatusCode::kInvalidArgument) {
      return InternalError("bucket bytes");
    }
    MF_ASSIGN_OR_RETURN(std::unique_ptr<GradReducer> r, GradReducer::Create(ps, *m.opt, {}, ctx));
    // Two Backward calls without Finish: the second one's hooks refuse.
    MF_RETURN_IF_ERROR(ForwardBackward(m, ctx, 0));
    const Status twice = ForwardBackward(m, ctx, 1);
    if (twice.code() != StatusCode::kFailedPrecondition || twice.message().find("set_enabled") == std::string::npos) {
      return InternalError("ready twice: " + twice.ToString());
    }
    MF_RETURN_IF_ERROR(r->Finish(ctx));
    // Disabled (accumulation micro-batches): the hooks launch nothing and the accumulated gradients
    // stay as Backward left them (Partial), for Step to reduce.
    r->set_enabled(false);
    for (Variable* p : ps) p->ZeroGrad();
    const GradReducerStats before = r->stats();
    MF_RETURN_IF_ERROR(ForwardBackward(m, ctx, 2));
    MF_RETURN_IF_ERROR(ForwardBackward(m, ctx, 3));
    MF_RETURN_IF_ERROR(r->Finish(ctx));
    if (r->stats().launched_in_backward != before.launched_in_backward ||
        r->stats().launched_in_finish != before.launched_in_finish) {
      return InternalError("a disabled reducer launched buckets");
    }
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshflow
