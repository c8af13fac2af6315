// Every example in lm/gpt.h and lm/plan.h is compiled and run here; keep them identical.
#include <memory>

#include <gtest/gtest.h>

#include "meshflow/autograd/variable.h"
#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/lm/gpt.h"
#include "meshflow/lm/plan.h"

namespace meshflow::lm {
namespace {

// lm/gpt.h
StatusOr<double> GptExample(const DTensor& batch, RankContext& ctx) {
  GptConfig cfg;                     // vocab 256, seq_len 64, dim 64, 4 heads, 2 layers
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(cfg, ctx));
  // batch: i32 [B, seq_len + 1] token windows (data/token_file.h samples)
  MF_ASSIGN_OR_RETURN(Variable loss, gpt->Loss(batch, ctx));   // mean CE of tokens 1..T
  MF_RETURN_IF_ERROR(Backward(loss, ctx));
  return loss.value().local().GetAsDouble(0);
}

// lm/plan.h
Status PlanExample(Gpt* gpt, RankContext& ctx) {
  MF_ASSIGN_OR_RETURN(PlanKind plan, ParsePlan("fsdp+tp"));
  MF_ASSIGN_OR_RETURN(MeshSpec spec, ParseMeshSpec("dp=2,tp=2"));
  MF_ASSIGN_OR_RETURN(MeshSpec mesh, ResolveMesh(plan, spec, /*world_size=*/4));
  // ... build the DeviceMesh, RankContext and the Gpt, then:
  MF_ASSIGN_OR_RETURN(AppliedPlan applied, ApplyPlan(plan, *gpt, ctx));
  EXPECT_EQ(mesh.ToString(), "dp=2,tp=2");
  EXPECT_EQ(applied.dp_dims, std::vector<std::string>{"dp"});
  return Status::Ok();
}

TEST(LmDocTest, GptLossOfRandomTokensIsNearLn256) {
  const DeviceMesh mesh = DeviceMesh::Create({1}, {"dp"}).value();
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(1).value();
  const Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    Tensor t = Tensor::Zeros(DType::kI32, {2, 65});
    for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i * 37) % 256));
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({2, 65}, mesh, {Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor batch, Distribute(t, l, 0));
    MF_ASSIGN_OR_RETURN(double loss, GptExample(batch, ctx));
    EXPECT_NEAR(loss, 5.55, 1.0);
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(LmDocTest, PlanExampleOnA2x2Mesh) {
  const DeviceMesh mesh = DeviceMesh::Create({2, 2}, {"dp", "tp"}).value();
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(4).value();
  const Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(GptConfig{}, ctx));
    return PlanExample(gpt.get(), ctx);
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshflow::lm
