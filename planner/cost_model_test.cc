// Tests of the cost model: topology parsing, the alpha-beta formulas, and bytes per rank of every
// step kind (uneven and empty shards included), compared with hand-computed values.
#include "meshflow/planner/cost_model.h"

#include <gtest/gtest.h>

#include "meshflow/planner/search.h"
#include "meshflow/planner/test_util.h"
#include "meshflow/planner/transforms.h"

namespace meshflow {
namespace {

using testing::MakeLayout;
using testing::MakeMesh;

TEST(TopologyTest, DefaultsAndParse) {
  const Topology t;
  EXPECT_TRUE(t.IsIntra(0));
  EXPECT_TRUE(t.IsIntra(5));
  EXPECT_EQ(t.BandwidthGBps(0), 150.0);
  EXPECT_EQ(t.LatencyUs(0), 2.0);
  EXPECT_EQ(t.ToString(), "intra=all;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10");
  StatusOr<Topology> p = ParseTopology("intra=1,2; bw_intra=100;bw_inter=12.5;lat_intra=1.5;lat_inter=20");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->IsIntra(0));
  EXPECT_TRUE(p->IsIntra(2));
  EXPECT_EQ(p->BandwidthGBps(0), 12.5);
  EXPECT_EQ(p->LatencyUs(1), 1.5);
  StatusOr<Topology> round = ParseTopology(p->ToString());
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(*round, *p);
  StatusOr<Topology> none = ParseTopology("intra=");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->IsIntra(0));
  EXPECT_EQ(*ParseTopology(""), Topology());
  for (const char* bad : {"intra=x", "bw_intra=0", "lat_inter=-1", "foo=1", "bw_inter", "bw_intra=1e", "intra=1,1"}) {
    StatusOr<Topology> b = ParseTopology(bad);
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseTopology("foo=1").status().message().find("unknown key 'foo'"), std::string::npos);
}

TEST(CostModelTest, Formulas) {
  const Link link{2.0, 100.0};  // 100 GB/s = 1e5 bytes/us
  EXPECT_DOUBLE_EQ(AllGatherUs(4, 400000, link), 3 * 2.0 + 0.75 * 4.0);
  EXPECT_DOUBLE_EQ(ReduceScatterUs(4, 400000, link), 3 * 2.0 + 0.75 * 4.0);
  EXPECT_DOUBLE_EQ(AllReduceUs(4, 400000, link), 6 * 2.0 + 1.5 * 4.0);
  EXPECT_DOUBLE_EQ(AllToAllUs(2, 400000, link), 2.0 + 0.5 * 4.0);
  EXPECT_EQ(AllGatherUs(1, 400000, link), 0);
  const Topology topo = *ParseTopology("intra=1");
  const std::vector<int> dims{0, 1};
  const Link l = LinkOf(topo, dims);
  EXPECT_EQ(l.alpha_us, 10.0);
  EXPECT_EQ(l.bw_gbps, 25.0);
}

TEST(CostModelTest, AllReduceChunks) {
  // count 10, g 4: chunk 3 -> sizes 3,3,3,1.
  EXPECT_EQ(AllReduceElementsReceived(10, 4, 0), 3 * 3 + 7);
  EXPECT_EQ(AllReduceElementsReceived(10, 4, 3), 3 * 1 + 9);
  // count 2, g 4: chunk 1 -> sizes 1,1,0,0.
  EXPECT_EQ(AllReduceElementsReceived(2, 4, 2), 0 + 2);
  EXPECT_EQ(AllReduceElementsReceived(0, 4, 0), 0);
  EXPECT_EQ(AllReduceElementsReceived(10, 1, 0), 0);
}

TEST(CostModelTest, BytesPerRankOfEachKind) {
  const DeviceMesh m = MakeMesh({2, 2});
  const Topology topo;
  // all_gather on mesh dim 1 of S(0),S(0) over 5 rows x 2 cols: rows [0:2],[2:3],[3:4],[4:5]
  // -> after S(0),R rows [0:3] and [3:5].
  {
    StatusOr<PlanStep> s = AllGatherStep(MakeLayout({5, 2}, m, "S(0),S(0)"), {1});
    ASSERT_TRUE(s.ok());
    StatusOr<StepModel> mm = ModelStep(*s, DType::kF32, topo);
    ASSERT_TRUE(mm.ok());
    EXPECT_EQ(mm->bytes_per_rank, (std::vector<int64_t>{1 * 2 * 4, 2 * 2 * 4, 1 * 2 * 4, 1 * 2 * 4}));
    EXPECT_DOUBLE_EQ(mm->us, AllGatherUs(2, 3 * 2 * 4, Link{2.0, 150.0}));
  }
  // reduce_scatter on mesh dim 0 of P,R over 5 elements to S(0): boxes [0:3], [3:5].
  {
    StatusOr<PlanStep> s = ReduceScatterStep(MakeLayout({5}, m, "P,R"), {0}, 0);
    ASSERT_TRUE(s.ok());
    StatusOr<StepModel> mm = ModelStep(*s, DType::kF64, topo);
    ASSERT_TRUE(mm.ok());
    EXPECT_EQ(mm->bytes_per_rank, (std::vector<int64_t>{3 * 8, 3 * 8, 2 * 8, 2 * 8}));
    EXPECT_DOUBLE_EQ(mm->us, ReduceScatterUs(2, 5 * 8, Link{2.0, 150.0}));
  }
  // all_reduce over both dims (g = 4) of 10 elements: positions 0..3 (row-major over [0,1]).
  {
    StatusOr<PlanStep> s = AllReduceStep(MakeLayout({10}, m, "P,P"), {0, 1});
    ASSERT_TRUE(s.ok());
    StatusOr<StepModel> mm = ModelStep(*s, DType::kF32, topo);
    ASSERT_TRUE(mm.ok());
    EXPECT_EQ(mm->bytes_per_rank, (std::vector<int64_t>{16 * 4, 16 * 4, 16 * 4, 12 * 4}));
    // Flattened in the order [1, 0]: rank 1 = (0,1) is at position 2, rank 2 = (1,0) at 1.
    StatusOr<PlanStep> r = AllReduceStep(MakeLayout({10}, m, "P,P"), {1, 0});
    ASSERT_TRUE(r.ok());
    StatusOr<StepModel> rm = ModelStep(*r, DType::kF32, topo);
    ASSERT_TRUE(rm.ok());
    EXPECT_EQ(rm->bytes_per_rank, (std::vector<int64_t>{16 * 4, 16 * 4, 16 * 4, 12 * 4}));
    EXPECT_DOUBLE_EQ(mm->us, AllReduceUs(4, 40, Link{2.0, 150.0}));
  }
  // all_to_all on mesh dim 1, S(0),S(0) -> S(0),S(1) over 4x4: rank (i,j) holds rows
  // [2i+j, 2i+j+1) x all cols, then rows [2i,2i+2) x cols [2j,2j+2): receives 1x2 from its peer.
  {
    StatusOr<PlanStep> s = AllToAllStep(MakeLayout({4, 4}, m, "S(0),S(0)"), {1}, 0, 1);
    ASSERT_TRUE(s.ok());
    StatusOr<StepModel> mm = ModelStep(*s, DType::kBF16, topo);
    ASSERT_TRUE(mm.ok());
    EXPECT_EQ(mm->bytes_per_rank, (std::vector<int64_t>{4, 4, 4, 4}));
    EXPECT_DOUBLE_EQ(mm->us, AllToAllUs(2, 4 * 2, Link{2.0, 150.0}));
  }
  // local steps.
  {
    StatusOr<PlanStep> s = LocalSliceStep(MakeLayout({4, 4}, m, "R,R"), {0}, 0);
    ASSERT_TRUE(s.ok());
    StatusOr<StepModel> mm = ModelStep(*s, DType::kF32, topo);
    ASSERT_TRUE(mm.ok());
    EXPECT_EQ(mm->bytes_per_rank, (std::vector<int64_t>{0, 0, 0, 0}));
    EXPECT_EQ(mm->us, 0);
  }
}

TEST(CostModelTest, SendRecvPerRankMaxOfInAndOut) {
  // 2x2 mesh, dim 0 inter-node. S(0),S(1) -> S(1),S(0) on 8x8: rank 1 (0,1) and rank 2 (1,0)
  // swap a 4x4 block; the path differs on both dims -> inter link.
  const DeviceMesh m = MakeMesh({2, 2});
  const Topology topo = *ParseTopology("intra=1");
  StatusOr<PlanStep> s = SendRecvStep(MakeLayout({8, 8}, m, "S(0),S(1)"), MakeLayout({8, 8}, m, "S(1),S(0)"));
  ASSERT_TRUE(s.ok());
  StatusOr<StepModel> mm = ModelStep(*s, DType::kF32, topo);
  ASSERT_TRUE(mm.ok());
  EXPECT_EQ(mm->bytes_per_rank, (std::vector<int64_t>{0, 64, 64, 0}));
  EXPECT_DOUBLE_EQ(mm->us, 10.0 + 64.0 / 25e3);
  // 1-D, S(0) -> R on 4 ranks: every rank receives 3 blocks, sends 3.
  const DeviceMesh m4 = MakeMesh({4});
  StatusOr<PlanStep> g = SendRecvStep(MakeLayout({8}, m4, "S(0)"), MakeLayout({8}, m4, "R"));
  ASSERT_TRUE(g.ok());
  StatusOr<StepModel> gm = ModelStep(*g, DType::kF32, Topology());
  ASSERT_TRUE(gm.ok());
  EXPECT_EQ(gm->bytes_per_rank, (std::vector<int64_t>{24, 24, 24, 24}));
  EXPECT_DOUBLE_EQ(gm->us, 3 * (2.0 + 8.0 / 150e3));
}

TEST(CostModelTest, FillPlanCostsTotalsAndLowerBound) {
  const DeviceMesh m = MakeMesh({2});
  StatusOr<Plan> plan = PlanRedistribution(MakeLayout({5}, m, "S(0)"), MakeLayout({5}, m, "R"), DType::kI64, Topology());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->bytes_received_per_rank, (std::vector<int64_t>{2 * 8, 3 * 8}));
  EXPECT_EQ(plan->max_bytes_received_per_rank, 24);
  EXPECT_EQ(plan->lower_bound_bytes_per_rank, std::optional<int64_t>(24));
  EXPECT_EQ(CostUnits(1.5), 1500000);
}

}  // namespace
}  // namespace meshflow
