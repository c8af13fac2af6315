// Tests of the cost model: topology parsing, the alpha-beta formulas, and bytes per rank of every
// step kind (uneven and empty shards included), compared with hand-computed values.
#include "meshflow/planner/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

TEST(TopologyTest, LimitsKeepEveryCostFinite) {
  // bw_inter=1e-320 (a denormal) made every modelled time inf, printed as "modelled_us": null.
  for (const char* bad : {"bw_inter=1e-320", "bw_intra=1e-7", "bw_inter=0", "bw_inter=-1"}) {
    StatusOr<Topology> t = ParseTopology(bad);
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(t.status().message().find("must be > 0 and at least 1e-06 GB/s (1 kB/s)"), std::string::npos)
        << t.status();
  }
  StatusOr<Topology> tiny = ParseTopology("bw_inter=1e-320");
  EXPECT_NE(tiny.status().message().find("bw_inter=1e-320"), std::string::npos) << tiny.status();
  StatusOr<Topology> slow = ParseTopology("lat_inter=1e10");
  EXPECT_EQ(slow.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(slow.status().message().find("lat_inter=1e10 must be at most 1e+09 us"), std::string::npos)
      << slow.status();
  // A Topology built in code gets the same limits from Validate.
  Topology t;
  t.bw_inter_gbps = 1e-320;
  EXPECT_EQ(t.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.Validate().message().find("topology bw_inter=1e-320 must be > 0 and finite, at least 1e-06 GB/s"),
            std::string::npos)
      << t.Validate();
  t = Topology();
  t.lat_intra_us = 2e9;
  EXPECT_NE(t.Validate().message().find("topology lat_intra=2e+09 must be >= 0 and finite, at most"),
            std::string::npos)
      << t.Validate();
  t = Topology();
  t.intra_dims = std::vector<int>{0, -1};
  EXPECT_NE(t.Validate().message().find("topology intra= names mesh dim -1, which is negative"), std::string::npos)
      << t.Validate();
  // At the limits every modelled time stays finite, even for the largest tensors.
  StatusOr<Topology> edge = ParseTopology("intra=;bw_inter=1e-6;lat_inter=1e9");
  ASSERT_TRUE(edge.ok()) << edge.status();
  const DeviceMesh mesh = MakeMesh({2, 2});
  const Layout from = MakeLayout({16777216, 16777216}, mesh, "S(0),S(1)");
  for (const char* to : {"R,R", "S(1),S(0)", "S(1),R"}) {
    StatusOr<Plan> plan = PlanRedistribution(from, MakeLayout({16777216, 16777216}, mesh, to), DType::kF64, *edge);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(std::isfinite(plan->modelled_us)) << to;
    EXPECT_GT(plan->modelled_us, 1e9) << to;
  }
  // CostUnits saturates instead of overflowing.
  EXPECT_EQ(CostUnits(1.5), 1500000);
  EXPECT_EQ(CostUnits(1e300), static_cast<int64_t>(4.0e18));
  EXPECT_EQ(CostUnits(std::numeric_limits<double>::infinity()), static_cast<int64_t>(4.0e18));
  EXPECT_EQ(CostUnits(-1), 0);
}

TEST(TopologyTest, ValidateForMesh) {
  const Topology all;
  EXPECT_TRUE(all.ValidateForMesh(2).ok());
  const Topology intra7 = *ParseTopology("intra=7");
  EXPECT_TRUE(intra7.Validate().ok());  // the mesh is not known to Validate
  EXPECT_TRUE(intra7.ValidateForMesh(8).ok());
  Status s = intra7.ValidateForMesh(2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "topology intra= names mesh dim 7 but the mesh has 2 dims (0..1)");
  s = ParseTopology("intra=0,1")->ValidateForMesh(1);
  EXPECT_EQ(s.message(), "topology intra= names mesh dim 1 but the mesh has 1 dim (0..0)");
  EXPECT_TRUE(ParseTopology("intra=")->ValidateForMesh(1).ok());
  // Validate's errors come first.
  Topology bad;
  bad.bw_intra_gbps = 0;
  EXPECT_NE(bad.ValidateForMesh(2).message().find("bw_intra=0"), std::string::npos);
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
