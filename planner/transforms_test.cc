// Tests of the step rules: every builder on valid and invalid inputs, ValidateStep on rebuilt and
// tampered steps, and CheckStepBoxes agreeing with the element-level checker of test_util.
#include "meshflow/planner/transforms.h"

#include <gtest/gtest.h>

#include "meshflow/planner/test_util.h"

namespace meshflow {
namespace {

using testing::CheckStepElements;
using testing::MakeLayout;
using testing::MakeMesh;

class TransformsTest : public ::testing::Test {
 protected:
  DeviceMesh m22_ = MakeMesh({2, 2});
  DeviceMesh m222_ = MakeMesh({2, 2, 2});
  DeviceMesh m23_ = MakeMesh({2, 3});
};

void ExpectGood(const StatusOr<PlanStep>& s, const Layout& want) {
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->to, want) << s->to.ToString() << " vs " << want.ToString();
  EXPECT_TRUE(ValidateStep(*s).ok()) << ValidateStep(*s);
  EXPECT_TRUE(CheckStepBoxes(*s).ok()) << CheckStepBoxes(*s);
  EXPECT_TRUE(CheckStepElements(*s).ok()) << CheckStepElements(*s);
}

void ExpectBad(const StatusOr<PlanStep>& s, const std::string& fragment) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(fragment), std::string::npos) << s.status();
}

TEST_F(TransformsTest, AllGatherInnermostOnly) {
  const Layout a = MakeLayout({5, 7}, m22_, "S(0),S(0)");
  ExpectGood(AllGatherStep(a, {1}), MakeLayout({5, 7}, m22_, "S(0),R"));
  ExpectBad(AllGatherStep(a, {0}), "innermost");
  ExpectGood(AllGatherStep(a, {0, 1}), MakeLayout({5, 7}, m22_, "R,R"));
  // Explicit order: mesh dim 0 is innermost.
  const Layout b = MakeLayout({5, 7}, m22_, "S(0),S(0)", "0:[1,0]");
  ExpectGood(AllGatherStep(b, {0}), MakeLayout({5, 7}, m22_, "R,S(0)"));
  ExpectBad(AllGatherStep(b, {1}), "innermost");
  // Several tensor dims at once.
  const Layout c = MakeLayout({5, 3, 7}, m222_, "S(0),S(2),S(0)");
  StatusOr<PlanStep> s = AllGatherStep(c, {2, 1});
  ExpectGood(s, MakeLayout({5, 3, 7}, m222_, "S(0),R,R"));
  EXPECT_EQ(s->mesh_dims, (std::vector<int>{1, 2}));
  EXPECT_EQ(s->tensor_dim, -1);
  ExpectBad(AllGatherStep(c, {0, 1}), "innermost");
  ExpectBad(AllGatherStep(MakeLayout({5}, m22_, "R,S(0)"), {0}), "needs Shard");
  ExpectBad(AllGatherStep(a, {}), "at least one");
  ExpectBad(AllGatherStep(a, {1, 1}), "repeated");
  ExpectBad(AllGatherStep(a, {2}), "out of range");
}

TEST_F(TransformsTest, LocalSliceAppendsInnermost) {
  const Layout a = MakeLayout({5, 7}, m22_, "R,S(0)");
  StatusOr<PlanStep> s = LocalSliceStep(a, {0}, 0);
  ExpectGood(s, MakeLayout({5, 7}, m22_, "S(0),S(0)", "0:[1,0]"));
  EXPECT_FALSE(s->to.has_default_shard_order());
  ExpectGood(LocalSliceStep(MakeLayout({5, 7}, m22_, "R,R"), {1, 0}, 1),
             MakeLayout({5, 7}, m22_, "S(1),S(1)", "1:[1,0]"));
  ExpectBad(LocalSliceStep(a, {1}, 0), "needs Replicate");
  ExpectBad(LocalSliceStep(a, {0}, 2), "tensor dim 2 out of range");
}

TEST_F(TransformsTest, AllReduceAndReduceScatter) {
  const Layout p = MakeLayout({5, 7}, m22_, "P,P");
  ExpectGood(AllReduceStep(p, {1}), MakeLayout({5, 7}, m22_, "P,R"));
  ExpectGood(AllReduceStep(p, {0, 1}), MakeLayout({5, 7}, m22_, "R,R"));
  ExpectGood(ReduceScatterStep(p, {1, 0}, 0), MakeLayout({5, 7}, m22_, "S(0),S(0)", "0:[1,0]"));
  const Layout q = MakeLayout({5, 7}, m22_, "S(1),P(max)");
  ExpectGood(ReduceScatterStep(q, {1}, 1), MakeLayout({5, 7}, m22_, "S(1),S(1)"));
  ExpectGood(ReduceScatterStep(q, {1}, 0), MakeLayout({5, 7}, m22_, "S(1),S(0)"));
  ExpectBad(AllReduceStep(q, {0}), "needs Partial");
  ExpectBad(ReduceScatterStep(q, {0}, 0), "needs Partial");
}

TEST_F(TransformsTest, AllToAllMovesTheInnermostSuffix) {
  const Layout a = MakeLayout({5, 3, 7}, m222_, "S(0),S(0),S(2)");
  ExpectGood(AllToAllStep(a, {1}, 0, 2), MakeLayout({5, 3, 7}, m222_, "S(0),S(2),S(2)", "2:[2,1]"));
  ExpectBad(AllToAllStep(a, {0}, 0, 1), "innermost");
  ExpectGood(AllToAllStep(a, {1, 0}, 0, 1), MakeLayout({5, 3, 7}, m222_, "S(1),S(1),S(2)", "1:[1,0]"));
  ExpectGood(AllToAllStep(a, {0, 1}, 0, 1), MakeLayout({5, 3, 7}, m222_, "S(1),S(1),S(2)"));
  ExpectBad(AllToAllStep(a, {1}, 0, 0), "both 0");
  ExpectBad(AllToAllStep(a, {2}, 0, 1), "needs Shard(0)");
  // Uneven and empty shards.
  const Layout b = MakeLayout({3, 0}, m23_, "S(0),S(0)");
  ExpectGood(AllToAllStep(b, {1}, 0, 1), MakeLayout({3, 0}, m23_, "S(0),S(1)"));
}

TEST_F(TransformsTest, LocalPartial) {
  const Layout a = MakeLayout({5}, m22_, "R,P(avg)");
  ExpectGood(LocalPartialStep(a, {0}, ReduceOp::kAvg), MakeLayout({5}, m22_, "P(avg),P(avg)"));
  ExpectBad(LocalPartialStep(a, {0}, ReduceOp::kSum), "already Partial(avg)");
  ExpectBad(LocalPartialStep(a, {1}, ReduceOp::kAvg), "needs Replicate");
}

TEST_F(TransformsTest, LocalShardToPartialFollowsTheAllGatherRule) {
  const Layout a = MakeLayout({5, 7}, m22_, "S(0),S(0)");
  StatusOr<PlanStep> s = LocalShardToPartialStep(a, {1}, ReduceOp::kSum);
  ExpectGood(s, MakeLayout({5, 7}, m22_, "S(0),P(sum)"));
  EXPECT_EQ(s->kind, StepKind::kLocalShardToPartial);
  EXPECT_EQ(s->tensor_dim, 0);
  // Nested sharding: the outer mesh dim's group does not tile a box.
  ExpectBad(LocalShardToPartialStep(a, {0}, ReduceOp::kMax), "innermost");
  ExpectGood(LocalShardToPartialStep(a, {1, 0}, ReduceOp::kMax), MakeLayout({5, 7}, m22_, "P(max),P(max)"));
  // Explicit order: mesh dim 0 is the innermost.
  const Layout b = MakeLayout({5, 7}, m22_, "S(0),S(0)", "0:[1,0]");
  ExpectGood(LocalShardToPartialStep(b, {0}, ReduceOp::kMin), MakeLayout({5, 7}, m22_, "P(min),S(0)"));
  ExpectBad(LocalShardToPartialStep(b, {1}, ReduceOp::kMin), "innermost");
  // Several tensor dims at once, uneven and empty shards (5 rows over 2x3: a chunk of 0 rows).
  const Layout c = MakeLayout({5, 3}, m23_, "S(1),S(0)");
  s = LocalShardToPartialStep(c, {0, 1}, ReduceOp::kSum);
  ExpectGood(s, MakeLayout({5, 3}, m23_, "P,P"));
  EXPECT_EQ(s->tensor_dim, -1);
  ExpectGood(LocalShardToPartialStep(MakeLayout({2, 3}, m23_, "R,S(0)"), {1}, ReduceOp::kSum),
             MakeLayout({2, 3}, m23_, "R,P"));
  // avg has no identity: no exact local form.
  ExpectBad(LocalShardToPartialStep(a, {1}, ReduceOp::kAvg), "Partial(avg)");
  // The op must agree with the layout's Partial op; Replicate and Partial dims are not Shard.
  const Layout p = MakeLayout({5, 7}, m22_, "S(0),P(max)");
  ExpectGood(LocalShardToPartialStep(p, {0}, ReduceOp::kMax), MakeLayout({5, 7}, m22_, "P(max),P(max)"));
  ExpectBad(LocalShardToPartialStep(p, {0}, ReduceOp::kSum), "already Partial(max)");
  ExpectBad(LocalShardToPartialStep(p, {1}, ReduceOp::kMax), "needs Shard");
  ExpectBad(LocalShardToPartialStep(MakeLayout({5}, m22_, "R,S(0)"), {0}, ReduceOp::kSum), "needs Shard");
  ExpectBad(LocalShardToPartialStep(a, {}, ReduceOp::kSum), "at least one");
}

TEST_F(TransformsTest, LocalShardToPartialTamperedSteps) {
  const Layout a = MakeLayout({8, 8}, m22_, "S(0),S(0)");
  // The outer dim, hand-built: neither rule-valid nor box-valid.
  PlanStep bad{StepKind::kLocalShardToPartial, {0}, 0, -1, a, MakeLayout({8, 8}, m22_, "P,S(0)")};
  EXPECT_FALSE(ValidateStep(bad).ok());
  EXPECT_FALSE(CheckStepBoxes(bad).ok());
  EXPECT_FALSE(CheckStepElements(bad).ok());
  // avg, hand-built on a valid dim: box-valid, but no rule allows it.
  PlanStep avg{StepKind::kLocalShardToPartial, {1}, 0, -1, a, MakeLayout({8, 8}, m22_, "S(0),P(avg)")};
  EXPECT_FALSE(ValidateStep(avg).ok());
  EXPECT_FALSE(CheckStepElements(avg).ok());
  // Shard -> Replicate is an all_gather, not this kind.
  PlanStep rep{StepKind::kLocalShardToPartial, {1}, 0, -1, a, MakeLayout({8, 8}, m22_, "S(0),R")};
  EXPECT_FALSE(ValidateStep(rep).ok());
  EXPECT_FALSE(CheckStepBoxes(rep).ok());
  EXPECT_EQ(StepKindName(StepKind::kLocalShardToPartial), "local_shard_to_partial");
  EXPECT_TRUE(IsLocalStep(StepKind::kLocalShardToPartial));
}

TEST_F(TransformsTest, SendRecv) {
  const Layout a = MakeLayout({5, 7}, m22_, "S(0),S(1)");
  const Layout b = MakeLayout({5, 7}, m22_, "S(1),S(0)");
  StatusOr<PlanStep> s = SendRecvStep(a, b);
  ExpectGood(s, b);
  EXPECT_EQ(s->mesh_dims, (std::vector<int>{0, 1}));
  ExpectBad(SendRecvStep(a, MakeLayout({5, 7}, m22_, "P,R")), "Partial-free");
  ExpectBad(SendRecvStep(a, MakeLayout({5, 8}, m22_, "R,R")), "same mesh and shape");
}

TEST_F(TransformsTest, ValidateRejectsTamperedSteps) {
  const Layout a = MakeLayout({8, 8}, m22_, "S(0),S(0)");
  StatusOr<PlanStep> s = AllGatherStep(a, {1});
  ASSERT_TRUE(s.ok());
  PlanStep bad = *s;
  bad.kind = StepKind::kAllToAll;
  EXPECT_FALSE(ValidateStep(bad).ok());
  bad = *s;
  bad.mesh_dims = {0};
  EXPECT_FALSE(ValidateStep(bad).ok());
  // Gathering the outer dim: not rule-valid, and not box-valid either (the group's blocks are
  // not inside the target box).
  bad = *s;
  bad.mesh_dims = {0};
  bad.to = MakeLayout({8, 8}, m22_, "R,S(0)");
  EXPECT_FALSE(ValidateStep(bad).ok());
  EXPECT_FALSE(CheckStepBoxes(bad).ok());
  EXPECT_FALSE(CheckStepElements(bad).ok());
  // A mesh dim outside the step that changes.
  bad = *s;
  bad.to = MakeLayout({8, 8}, m22_, "R,R");
  EXPECT_FALSE(CheckStepBoxes(bad).ok());
}

TEST_F(TransformsTest, SizeOneMeshDimsAreBoxValidInAnyOrder) {
  // On a size-1 mesh dim the order does not change any box: gathering the outer dim is not
  // rule-valid but box-valid (used by the greedy reference).
  const DeviceMesh m = MakeMesh({1, 2});
  PlanStep s{StepKind::kAllGather, {0}, 0, -1, MakeLayout({5}, m, "S(0),S(0)"), MakeLayout({5}, m, "R,S(0)")};
  EXPECT_FALSE(ValidateStep(s).ok());
  EXPECT_TRUE(CheckStepBoxes(s).ok()) << CheckStepBoxes(s);
  EXPECT_TRUE(CheckStepElements(s).ok());
}

}  // namespace
}  // namespace meshflow
