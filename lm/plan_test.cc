#include "meshflow/lm/plan.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/base/lcg.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/lm/gpt.h"

namespace meshflow::lm {
namespace {

void ExpectInvalid(const Status& s, const std::string& words) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(words), std::string::npos) << "message: " << s.message() << "\nwant: " << words;
}

TEST(PlanTest, ParsesPlansAndMeshes) {
  for (const char* name : {"ddp", "zero1", "fsdp", "tp", "fsdp+tp"}) {
    StatusOr<PlanKind> p = ParsePlan(name);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(PlanName(*p), name);
  }
  ExpectInvalid(ParsePlan("zero3").status(), "unknown --plan 'zero3' (expected one of ddp, zero1, fsdp, tp, fsdp+tp)");
  StatusOr<MeshSpec> m = ParseMeshSpec("dp=2,tp=2");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(m->ToString(), "dp=2,tp=2");
  ExpectInvalid(ParseMeshSpec("dp").status(), "'dp' is not NAME=SIZE");
  ExpectInvalid(ParseMeshSpec("dp=2,").status(), "'' is not NAME=SIZE");
  ExpectInvalid(ParseMeshSpec("pp=2").status(), "unknown dim 'pp' (expected dp or tp)");
  ExpectInvalid(ParseMeshSpec("dp=2,dp=2").status(), "dim 'dp' given twice");
  ExpectInvalid(ParseMeshSpec("dp=0").status(), "size of 'dp' must be an integer >= 1, got '0'");
}

TEST(PlanTest, ResolvesDefaultMeshesAndRejectsMismatches) {
  EXPECT_EQ(ResolveMesh(DdpPlan{}, std::nullopt, 4).value().ToString(), "dp=4");
  EXPECT_EQ(ResolveMesh(TpPlan{}, std::nullopt, 4).value().ToString(), "tp=4");
  EXPECT_EQ(ResolveMesh(FsdpTpPlan{}, std::nullopt, 4).value().ToString(), "dp=2,tp=2");
  ExpectInvalid(ResolveMesh(FsdpTpPlan{}, std::nullopt, 3).status(), "plan fsdp+tp needs --mesh dp=A,tp=B on a world of 3");
  ExpectInvalid(ResolveMesh(DdpPlan{}, ParseMeshSpec("dp=3").value(), 4).status(),
                "--mesh dp=3 has 3 ranks but the world has 4");
  ExpectInvalid(ResolveMesh(DdpPlan{}, ParseMeshSpec("dp=2,tp=2").value(), 4).status(),
                "plan ddp does not use mesh dim 'tp' of --mesh dp=2,tp=2");
  ExpectInvalid(ResolveMesh(FsdpTpPlan{}, ParseMeshSpec("dp=4").value(), 4).status(),
                "plan fsdp+tp needs mesh dim 'tp', --mesh is dp=4");
}

GptConfig Tiny() {
  GptConfig c;
  c.vocab = 16;
  c.seq_len = 8;
  c.dim = 8;
  c.heads = 2;
  c.layers = 1;
  c.mlp_hidden = 16;
  c.seed = 3;
  return c;
}

Tensor Batch() {
  Tensor t = Tensor::Zeros(DType::kI32, {4, 9});
  Lcg32 g(12345);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>(g.Next24() % 16));
  return t;
}

struct Result {
  double loss = 0;
  std::vector<Tensor> grads;  // full gradients, NamedParameters order
};

StatusOr<Result> LossAndGrads(const PlanKind& plan, const MeshSpec& spec) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(spec.shape, spec.names));
  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(mesh.size()));
  Result result;
  MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(Tiny(), ctx));
    MF_ASSIGN_OR_RETURN(AppliedPlan applied, ApplyPlan(plan, *gpt, ctx));
    Placements bp(static_cast<size_t>(mesh.ndim()), Replicate{});
    for (const std::string& d : applied.dp_dims) bp[static_cast<size_t>(mesh.DimIndex(d).value())] = Shard{0};
    MF_ASSIGN_OR_RETURN(Layout bl, Layout::Create({4, 9}, mesh, bp));
    MF_ASSIGN_OR_RETURN(DTensor batch, Distribute(Batch(), bl, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(Variable loss, gpt->Loss(batch, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    MF_ASSIGN_OR_RETURN(Tensor l, FullTensor(loss.value(), ctx));
    std::vector<Tensor> grads;
    for (const nn::NamedParameter& p : gpt->NamedParameters()) {
      if (!p.variable.grad()) return InternalError("no gradient for " + p.name);
      MF_ASSIGN_OR_RETURN(Tensor g, FullTensor(*p.variable.grad(), ctx));
      grads.push_back(std::move(g));
    }
    if (comm.world_rank() == 0) {
      result.loss = l.GetAsDouble(0);
      result.grads = std::move(grads);
    }
    return Status::Ok();
  }));
  return result;
}

// The same loss and gradients (f32 rounding of differently ordered sums) on every plan as on one
// rank: the plans are layouts only.
TEST(PlanTest, GptLossAndGradientsAreTheSameOnEveryPlan) {
  StatusOr<Result> single = LossAndGrads(DdpPlan{}, MeshSpec{{1}, {"dp"}});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_NEAR(single->loss, std::log(16.0), 0.6);
  const std::vector<std::pair<PlanKind, MeshSpec>> cases = {
      {DdpPlan{}, {{2}, {"dp"}}},  {Zero1Plan{}, {{2}, {"dp"}}},         {FsdpPlan{}, {{4}, {"dp"}}},
      {TpPlan{}, {{2}, {"tp"}}},   {FsdpTpPlan{}, {{2, 2}, {"dp", "tp"}}},
  };
  for (const auto& [plan, spec] : cases) {
    StatusOr<Result> r = LossAndGrads(plan, spec);
    ASSERT_TRUE(r.ok()) << PlanName(plan) << ": " << r.status();
    EXPECT_NEAR(r->loss, single->loss, 1e-5) << PlanName(plan);
    ASSERT_EQ(r->grads.size(), single->grads.size());
    for (size_t i = 0; i < r->grads.size(); ++i) {
      ASSERT_EQ(r->grads[i].shape(), single->grads[i].shape());
      for (int64_t j = 0; j < r->grads[i].NumElements(); ++j) {
        ASSERT_NEAR(r->grads[i].GetAsDouble(j), single->grads[i].GetAsDouble(j), 2e-5)
            << PlanName(plan) << " " << spec.ToString() << " param " << i << " element " << j;
      }
    }
  }
}

TEST(PlanTest, TpNeedsDivisibleHeads) {
  const DeviceMesh mesh = DeviceMesh::Create({4}, {"tp"}).value();
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(4).value();
  const Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(Tiny(), ctx));  // 2 heads
    ExpectInvalid(ApplyPlan(TpPlan{}, *gpt, ctx).status(), "plan tp: heads 2 is not divisible by the tp size 4");
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s;
}

TEST(GptTest, ConfigErrors) {
  GptConfig c = Tiny();
  c.heads = 3;
  ExpectInvalid(c.Validate(), "GptConfig: dim 8 is not divisible by heads 3");
  c = Tiny();
  c.layers = 0;
  ExpectInvalid(c.Validate(), "GptConfig: layers must be >= 1, got 0");
  EXPECT_EQ(Tiny().ToString(), "vocab=16 seq_len=8 dim=8 heads=2 layers=1 mlp_hidden=16 seed=3");
}

}  // namespace
}  // namespace meshflow::lm
