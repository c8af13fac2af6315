// Every example in planner/planner.h, planner/plan_cache.h, planner/search.h,
// planner/transforms.h, planner/cost_model.h, planner/plan_format.h and planner/direct.h is compiled
// here; keep them identical.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/direct.h"
#include "meshflow/planner/plan.h"
#include "meshflow/planner/plan_cache.h"
#include "meshflow/planner/plan_format.h"
#include "meshflow/planner/planner.h"
#include "meshflow/planner/search.h"
#include "meshflow/planner/transforms.h"

namespace meshflow {
namespace {

using ::testing::HasSubstr;

// S(0),S(1) and S(1),S(0) on mesh(2x2), shape [8,8]: the layouts of plan_format.h's example.
Layout MakeLayout(const Placements& placements) {
  return Layout::Create({8, 8}, DeviceMesh::Create({2, 2}).value(), placements).value();
}

// planner/planner.h
Status PlanForExample(const Layout& from, const Layout& to) {
  RedistributeOptions options;                       // optimal planner, default topology
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, DType::kF32, options));
  // plan->steps: the collectives; ExecutePlan (runtime/executor.h) runs them.

  EXPECT_EQ(plan->planner, PlannerKind::kOptimal);
  EXPECT_EQ(plan->from, from);
  EXPECT_EQ(plan->to, to);
  EXPECT_FALSE(plan->steps.empty());
  return Status::Ok();
}

TEST(PlannerDocTest, PlanFor) {
  EXPECT_EQ(PlanForExample(MakeLayout({Shard{0}, Shard{1}}), MakeLayout({Shard{1}, Shard{0}})), Status::Ok());
}

// planner/plan_cache.h
Status PlanCacheExample(const Layout& from, const Layout& to, const Topology& topo) {
  PlanCache cache;
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, cache.GetOrPlan(from, to, DType::kF32, topo));
  cache.hits();   // 0, then 1 after a second identical call

  EXPECT_EQ(cache.hits(), 0);
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> again, cache.GetOrPlan(from, to, DType::kF32, topo));
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(again, plan);
  return Status::Ok();
}

TEST(PlanCacheDocTest, Hits) {
  EXPECT_EQ(PlanCacheExample(MakeLayout({Shard{0}, Shard{1}}), MakeLayout({Shard{1}, Shard{0}}), Topology()),
            Status::Ok());
}

// planner/search.h
Status SearchExample(const Layout& from, const Layout& to) {
  MF_ASSIGN_OR_RETURN(Plan plan, PlanRedistribution(from, to, DType::kF32, Topology()));
  std::cout << PlanToText(plan);   // planner/plan_format.h

  EXPECT_EQ(plan.planner, PlannerKind::kOptimal);
  EXPECT_EQ(plan.steps.size(), 1u);
  return Status::Ok();
}

TEST(SearchDocTest, PlanRedistribution) {
  EXPECT_EQ(SearchExample(MakeLayout({Shard{0}, Shard{1}}), MakeLayout({Shard{1}, Shard{0}})), Status::Ok());
}

// planner/transforms.h
Status TransformsExample(const Layout& layout) {
  MF_ASSIGN_OR_RETURN(PlanStep s, AllGatherStep(layout, {1}));   // s.to has R on mesh dim 1

  EXPECT_EQ(s.kind, StepKind::kAllGather);
  EXPECT_EQ(s.to.placements(), (Placements{Shard{0}, Replicate{}}));
  return Status::Ok();
}

TEST(TransformsDocTest, AllGatherStep) {
  EXPECT_EQ(TransformsExample(MakeLayout({Shard{0}, Shard{1}})), Status::Ok());
}

// planner/cost_model.h: the text form, and the default topology's (Topology::ToString).
TEST(CostModelDocTest, TopologyText) {
  StatusOr<Topology> t = ParseTopology("intra=1,2;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->intra_dims, (std::vector<int>{1, 2}));
  EXPECT_EQ(t->bw_intra_gbps, 150);
  EXPECT_EQ(t->bw_inter_gbps, 25);
  EXPECT_EQ(t->lat_intra_us, 2);
  EXPECT_EQ(t->lat_inter_us, 10);
  EXPECT_EQ(Topology().ToString(), "intra=all;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10");
}

// planner/cost_model.h (step: an all_gather over mesh dim 0 of S(0),R on mesh(2x2), shape [8,8]).
Status CostModelExample(const PlanStep& step) {
  MF_ASSIGN_OR_RETURN(Topology topo, ParseTopology("intra=1;bw_inter=12.5"));
  MF_ASSIGN_OR_RETURN(StepModel m, ModelStep(step, DType::kF32, topo));

  // Mesh dim 0 is inter-node: alpha = 10 us, bw = 12.5 GB/s; B = the 8x8 f32 target box (256 B):
  // (g-1)*alpha + (g-1)/g * B/bw = 10 us + 0.5 * 256 B / 12.5 GB/s.
  EXPECT_NEAR(m.us, 10.0 + 0.5 * 256 / 12.5e9 * 1e6, 1e-9);
  // Every rank receives the 4x8 elements of its new box not in its old box.
  EXPECT_EQ(m.bytes_per_rank, (std::vector<int64_t>{128, 128, 128, 128}));
  return Status::Ok();
}

TEST(CostModelDocTest, ModelStep) {
  StatusOr<PlanStep> step = AllGatherStep(MakeLayout({Shard{0}, Replicate{}}), {0});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(CostModelExample(*step), Status::Ok());
}

// planner/plan_format.h: PlanToText, PlanToJson's keys and DrawLayout.
// planner/direct.h
TEST(DirectDocTest, DirectPiecesOfRank) {
  const DeviceMesh mesh = *DeviceMesh::Create({4});
  const Layout rows = *Layout::Create({8, 8}, mesh, {Shard{0}});
  const Layout cols = *Layout::Create({8, 8}, mesh, {Shard{1}});
  const RankPieces p = *DirectPiecesOfRank(rows, cols, 1);
  // Rank 1 holds rows 2..3 and needs columns 2..3. p.recvs: 3 pieces from peers 0, 2, 3, the
  // first p.recvs.box(0) == [0:2, 2:4]; p.sends: 3 pieces to peers 0, 2, 3, the first
  // p.sends.box(0) == [2:4, 0:2].
  EXPECT_EQ(p.recvs.peers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(p.recvs.box(0).ToString(), "[0:2, 2:4]");
  EXPECT_EQ(p.sends.peers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(p.sends.box(0).ToString(), "[2:4, 0:2]");
}

TEST(PlanFormatDocTest, PlanToText) {
  StatusOr<Plan> plan =
      PlanRedistribution(MakeLayout({Shard{0}, Shard{1}}), MakeLayout({Shard{1}, Shard{0}}), DType::kF32, Topology());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PlanToText(*plan),
            "plan (optimal): S(0),S(1) -> S(1),S(0) on mesh(2x2) shape [8,8], f32, 1 step\n"
            "  1. send_recv       mesh_dims=[0,1]  tensor_dim=-     bytes/rank=64    2.000 us  S(0),S(1) -> S(1),S(0)\n"
            "total: 2.000 us, max bytes received per rank 64, lower bound 64, ratio 1.00\n");

  const std::string json = PlanToJson(*plan);
  for (const char* key : {"\"steps\":", "\"kind\":", "\"mesh_dims\":", "\"tensor_dim\":", "\"bytes_per_rank\":",
                          "\"modelled_us\":", "\"max_bytes_received_per_rank\":", "\"lower_bound_bytes_per_rank\":",
                          "\"planner\":"}) {
    EXPECT_THAT(json, HasSubstr(key));
  }
}

TEST(PlanFormatDocTest, DrawLayout) {
  EXPECT_EQ(DrawLayout(MakeLayout({Shard{0}, Shard{1}})),
            "S(0),S(1) on mesh(2x2) shape [8,8]\n"
            "       0:4   4:8\n"
            "     +-----+-----+\n"
            "  0:4| 0   | 1   |\n"
            "     +-----+-----+\n"
            "  4:8| 2   | 3   |\n"
            "     +-----+-----+\n");
}

}  // namespace
}  // namespace meshflow
