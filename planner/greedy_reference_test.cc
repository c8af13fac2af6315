// Tests of the greedy reference planner: DTensor's transform sequences on known cases, and its
// errors.
#include "meshflow/planner/greedy_reference.h"

#include <gtest/gtest.h>

#include "meshflow/planner/plan_format.h"
#include "meshflow/planner/test_util.h"

namespace meshflow {
namespace {

using testing::CheckPlan;
using testing::MakeLayout;
using testing::MakeMesh;

struct Expected {
  StepKind kind;
  std::vector<int> mesh_dims;
  const char* to;
};

void ExpectSteps(const Layout& from, const Layout& to, const std::vector<Expected>& want) {
  StatusOr<Plan> plan = PlanGreedy(from, to, DType::kF32, Topology());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->planner, PlannerKind::kGreedy);
  ASSERT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan);
  ASSERT_EQ(plan->steps.size(), want.size()) << PlanToText(*plan);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(plan->steps[i].kind, want[i].kind) << i;
    EXPECT_EQ(plan->steps[i].mesh_dims, want[i].mesh_dims) << i;
    EXPECT_EQ(plan->steps[i].to.PlacementsString(), want[i].to) << i;
  }
}

TEST(GreedyReferenceTest, NestedShardingIsReplicatedFirst) {
  const DeviceMesh m = MakeMesh({2, 2});
  // DTensor's own example: (S(0), S(0)) -> (R, S(0)).
  ExpectSteps(MakeLayout({8, 8}, m, "S(0),S(0)"), MakeLayout({8, 8}, m, "R,S(0)"),
              {{StepKind::kAllGather, {1}, "S(0),R"},
               {StepKind::kAllGather, {0}, "R,R"},
               {StepKind::kLocalSlice, {1}, "R,S(0)"}});
  ExpectSteps(MakeLayout({8, 8}, m, "S(0),S(1)"), MakeLayout({8, 8}, m, "S(1),S(0)"),
              {{StepKind::kAllGather, {1}, "S(0),R"},
               {StepKind::kAllToAll, {0}, "S(1),R"},
               {StepKind::kLocalSlice, {1}, "S(1),S(0)"}});
  // Inner dim already aligned: a single all_to_all on mesh dim 1.
  ExpectSteps(MakeLayout({8, 8}, m, "S(0),S(0)"), MakeLayout({8, 8}, m, "S(0),S(1)"),
              {{StepKind::kAllToAll, {1}, "S(0),S(1)"}});
}

TEST(GreedyReferenceTest, OneDAndPartial) {
  const DeviceMesh m1 = MakeMesh({4});
  ExpectSteps(MakeLayout({8, 8}, m1, "S(0)"), MakeLayout({8, 8}, m1, "S(1)"), {{StepKind::kAllToAll, {0}, "S(1)"}});
  ExpectSteps(MakeLayout({8, 8}, m1, "P(max)"), MakeLayout({8, 8}, m1, "S(1)"),
              {{StepKind::kReduceScatter, {0}, "S(1)"}});
  const DeviceMesh m = MakeMesh({2, 2});
  // No sharded source: only the left-to-right pass.
  ExpectSteps(MakeLayout({8, 8}, m, "P,P"), MakeLayout({8, 8}, m, "S(0),R"),
              {{StepKind::kReduceScatter, {0}, "S(0),P(sum)"}, {StepKind::kAllReduce, {1}, "S(0),R"}});
  ExpectSteps(MakeLayout({8, 8}, m, "S(0),R"), MakeLayout({8, 8}, m, "R,P"),
              {{StepKind::kLocalPartial, {1}, "S(0),P(sum)"}, {StepKind::kAllGather, {0}, "R,P(sum)"}});
}

TEST(GreedyReferenceTest, Errors) {
  const DeviceMesh m = MakeMesh({2, 2});
  StatusOr<Plan> order =
      PlanGreedy(MakeLayout({8}, m, "S(0),S(0)", "0:[1,0]"), MakeLayout({8}, m, "R,R"), DType::kF32, Topology());
  EXPECT_EQ(order.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(order.status().message().find("default shard orders"), std::string::npos);
  StatusOr<Plan> s2p = PlanGreedy(MakeLayout({8}, m, "S(0),R"), MakeLayout({8}, m, "P,R"), DType::kF32, Topology());
  EXPECT_EQ(s2p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s2p.status().message().find("S(0) to P(sum)"), std::string::npos) << s2p.status();
}

TEST(GreedyReferenceTest, SizeOneMeshDims) {
  // A source sharded only on size-1 dims skips the right-to-left pass; the resulting step on mesh
  // dim 0 is not innermost-valid but changes no box.
  const DeviceMesh m = MakeMesh({1, 1});
  StatusOr<Plan> plan =
      PlanGreedy(MakeLayout({5, 3}, m, "S(0),S(0)"), MakeLayout({5, 3}, m, "S(1),R"), DType::kF32, Topology());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(CheckPlan(*plan, /*rules=*/false).ok()) << CheckPlan(*plan, false);
  EXPECT_EQ(plan->modelled_us, 0);
}

}  // namespace
}  // namespace meshflow
