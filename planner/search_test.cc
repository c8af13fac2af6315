// Tests of the optimal planner: identity and errors, the DONE cases against the greedy reference,
// and brute-force proofs of optimality over the same edge set on small meshes and shapes.
#include "meshflow/planner/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>

#include "meshflow/planner/direct.h"
#include "meshflow/planner/greedy_reference.h"
#include "meshflow/planner/plan_format.h"
#include "meshflow/planner/test_util.h"
#include "meshflow/planner/transforms.h"

namespace meshflow {
namespace {

using testing::CheckPlan;
using testing::MakeLayout;
using testing::MakeMesh;

TEST(SearchTest, IdentityIsEmpty) {
  const DeviceMesh mesh = MakeMesh({2, 2});
  const Layout a = MakeLayout({8, 8}, mesh, "S(0),P");
  StatusOr<Plan> plan = PlanRedistribution(a, a, DType::kF32, Topology());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->steps.empty());
  EXPECT_EQ(plan->planner, PlannerKind::kOptimal);
  EXPECT_EQ(plan->modelled_us, 0);
  EXPECT_TRUE(plan->bytes_received_per_rank.empty());  // the identity plan has no per-rank tables
  EXPECT_EQ(plan->max_bytes_received_per_rank, 0);
  EXPECT_FALSE(plan->lower_bound_bytes_per_rank.has_value());
  EXPECT_TRUE(plan->proven_optimal);
}

TEST(SearchTest, IdentityOnABillionRanksNeedsNoPerRankTables) {
  // 2^30 ranks: a per-rank pass (8 bytes of received bytes per rank alone is 8 GiB) would not
  // fit; every planner returns the empty plan with zero cost in O(mesh dims).
  const DeviceMesh mesh = MakeMesh({1024, 1024, 1024});
  for (const char* placements : {"R,R,R", "S(0),R,S(1)"}) {
    SCOPED_TRACE(placements);
    const Layout a = MakeLayout({1 << 12, 1 << 12}, mesh, placements);
    StatusOr<Plan> opt = PlanRedistribution(a, a, DType::kF32, Topology());
    StatusOr<Plan> greedy = PlanGreedy(a, a, DType::kF32, Topology());
    StatusOr<Plan> direct = PlanDirect(a, a, DType::kF32, Topology());
    for (const StatusOr<Plan>* p : {&opt, &greedy, &direct}) {
      ASSERT_TRUE(p->ok()) << p->status();
      const Plan& plan = **p;
      EXPECT_TRUE(plan.steps.empty());
      EXPECT_EQ(plan.modelled_us, 0);
      EXPECT_TRUE(plan.bytes_received_per_rank.empty());
      EXPECT_EQ(plan.max_bytes_received_per_rank, 0);
      EXPECT_EQ(plan.lower_bound_bytes_per_rank, std::optional<int64_t>(0));
      EXPECT_EQ(plan.search_edges, 0);
    }
    EXPECT_EQ(opt->planner, PlannerKind::kOptimal);
    EXPECT_EQ(greedy->planner, PlannerKind::kGreedy);
    EXPECT_EQ(direct->planner, PlannerKind::kDirect);
    EXPECT_TRUE(opt->proven_optimal);
  }
}

TEST(SearchTest, Errors) {
  const DeviceMesh m22 = MakeMesh({2, 2});
  const DeviceMesh m4 = MakeMesh({4});
  const Topology topo;
  EXPECT_EQ(PlanRedistribution(MakeLayout({8}, m22, "S(0),R"), MakeLayout({8}, m4, "S(0)"), DType::kF32, topo)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanRedistribution(MakeLayout({8}, m4, "S(0)"), MakeLayout({9}, m4, "S(0)"), DType::kF32, topo)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  StatusOr<Plan> pp =
      PlanRedistribution(MakeLayout({8}, m4, "P(sum)"), MakeLayout({8}, m4, "P(max)"), DType::kF32, topo);
  EXPECT_EQ(pp.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pp.status().message().find("Partial(sum) -> Partial(max)"), std::string::npos) << pp.status();
  EXPECT_FALSE(PlanGreedy(MakeLayout({8}, m22, "P(avg),R"), MakeLayout({8}, m22, "R,P(sum)"), DType::kF32, topo).ok());
  EXPECT_FALSE(PlanDirect(MakeLayout({8}, m4, "P"), MakeLayout({8}, m4, "S(0)"), DType::kF32, topo).ok());
}

TEST(SearchTest, SimpleCasesUseTheObviousCollective) {
  const DeviceMesh m4 = MakeMesh({4});
  const Topology topo;
  struct Case {
    const char* from;
    const char* to;
    StepKind kind;
  };
  for (const Case& c : {Case{"S(0)", "R", StepKind::kAllGather}, Case{"P", "R", StepKind::kAllReduce},
                        Case{"P", "S(1)", StepKind::kReduceScatter}, Case{"R", "S(1)", StepKind::kLocalSlice},
                        Case{"R", "P(max)", StepKind::kLocalPartial}}) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    StatusOr<Plan> plan =
        PlanRedistribution(MakeLayout({64, 64}, m4, c.from), MakeLayout({64, 64}, m4, c.to), DType::kF32, topo);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->steps.size(), 1u) << PlanToText(*plan);
    EXPECT_EQ(plan->steps[0].kind, c.kind);
    EXPECT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan);
  }
}

TEST(SearchTest, PartialAvgTargetGoesThroughReplicate) {
  // avg has no identity, so Shard -> Partial(avg) is no local edge: gather, then local_partial.
  // (Before local_shard_to_partial existed, P(sum) went this way too; see the next test.)
  const DeviceMesh m22 = MakeMesh({2, 2});
  StatusOr<Plan> plan = PlanRedistribution(MakeLayout({8, 8}, m22, "S(0),S(1)"),
                                           MakeLayout({8, 8}, m22, "P(avg),S(1)"), DType::kF32, Topology());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan) << PlanToText(*plan);
  EXPECT_EQ(plan->steps.back().kind, StepKind::kLocalPartial);
  EXPECT_GT(plan->max_bytes_received_per_rank, 0);
  for (const PlanStep& s : plan->steps) EXPECT_NE(s.kind, StepKind::kLocalShardToPartial) << PlanToText(*plan);
}

TEST(SearchTest, ShardToPartialIsOneLocalStep) {
  struct Case {
    std::vector<int64_t> mesh;
    std::vector<int64_t> shape;
    const char* from;
    const char* to;
  };
  for (const Case& c : {Case{{4}, {1024, 256}, "S(0)", "P(sum)"}, Case{{4}, {1024, 256}, "S(0)", "P(max)"},
                        Case{{3}, {7, 5}, "S(1)", "P(min)"}, Case{{2, 2}, {8, 8}, "S(0),S(1)", "P,S(1)"},
                        Case{{2, 2}, {8, 8}, "S(0),S(1)", "P(max),P(max)"},
                        Case{{2, 2}, {3, 2}, "S(0),S(0)", "S(0),P(min)"},
                        Case{{2, 2}, {8, 8}, "S(0),P(sum)", "P(sum),P(sum)"}}) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    const DeviceMesh mesh = MakeMesh(c.mesh);
    for (DType dtype : {DType::kF32, DType::kI32, DType::kI64}) {
      StatusOr<Plan> plan =
          PlanRedistribution(MakeLayout(c.shape, mesh, c.from), MakeLayout(c.shape, mesh, c.to), dtype, Topology());
      ASSERT_TRUE(plan.ok()) << plan.status();
      ASSERT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan) << PlanToText(*plan);
      ASSERT_EQ(plan->steps.size(), 1u) << PlanToText(*plan);
      EXPECT_EQ(plan->steps[0].kind, StepKind::kLocalShardToPartial);
      EXPECT_EQ(plan->max_bytes_received_per_rank, 0);
      EXPECT_EQ(plan->modelled_us, 0);
      if (!plan->from.HasPartial()) {
        EXPECT_EQ(plan->lower_bound_bytes_per_rank, std::optional<int64_t>(0));
      }
    }
  }
}

TEST(SearchTest, ShardToPartialNeedsInnermostDims) {
  // Mesh dim 0 is the outer of tensor dim 0's order: its group's shards do not tile a box, so it
  // is no local edge; the plan must first gather the inner dim.
  const DeviceMesh m22 = MakeMesh({2, 2});
  const Layout from = MakeLayout({8, 4}, m22, "S(0),S(0)");
  const Layout to = MakeLayout({8, 4}, m22, "P,S(0)");
  StatusOr<Plan> plan = PlanRedistribution(from, to, DType::kF32, Topology());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan) << PlanToText(*plan);
  EXPECT_GT(plan->max_bytes_received_per_rank, 0) << PlanToText(*plan);
  // Lower bound: the group over mesh dim 0 at j = 0 holds rows 0,1 and 4,5; its target box is
  // rows 0..3 (4x4): 8 of 16 elements missing, 2 members: 4 elements (16 bytes) each.
  EXPECT_EQ(plan->lower_bound_bytes_per_rank, std::optional<int64_t>(16));
  EXPECT_GE(plan->max_bytes_received_per_rank, 16);
}

struct DoneCase {
  std::vector<int64_t> mesh;
  std::vector<int64_t> shape;
  const char* from;
  const char* to;
};

TEST(SearchTest, DoneCasesBeatGreedyInBytes) {
  const Topology topo;
  for (const DoneCase& c : {DoneCase{{2, 2}, {8, 8}, "S(0),S(1)", "S(1),S(0)"},
                            DoneCase{{2, 2, 2}, {8, 8, 8}, "S(0),S(0),S(0)", "S(1),S(1),S(1)"},
                            DoneCase{{2, 2, 2}, {8, 8, 8}, "S(0),S(1),S(0)", "S(1),S(0),S(0)"}}) {
    const DeviceMesh mesh = MakeMesh(c.mesh);
    const Layout from = MakeLayout(c.shape, mesh, c.from);
    const Layout to = MakeLayout(c.shape, mesh, c.to);
    StatusOr<Plan> opt = PlanRedistribution(from, to, DType::kF32, topo);
    StatusOr<Plan> greedy = PlanGreedy(from, to, DType::kF32, topo);
    ASSERT_TRUE(opt.ok()) << opt.status();
    ASSERT_TRUE(greedy.ok()) << greedy.status();
    ASSERT_TRUE(CheckPlan(*opt).ok()) << CheckPlan(*opt);
    ASSERT_TRUE(CheckPlan(*greedy).ok()) << CheckPlan(*greedy);
    std::printf("DONE case %s -> %s:\n%s%s", c.from, c.to, PlanToText(*opt).c_str(), PlanToText(*greedy).c_str());
    EXPECT_LT(opt->max_bytes_received_per_rank, greedy->max_bytes_received_per_rank);
    EXPECT_LE(opt->modelled_us, greedy->modelled_us);
    EXPECT_GE(opt->max_bytes_received_per_rank, *opt->lower_bound_bytes_per_rank);
  }
}

TEST(SearchTest, InterNodeTopologyChangesTheChoice) {
  // With a slow inter-node dim 0, gathering over dim 0 first (while the buffer is smallest) beats
  // DTensor's inner-first order; with the default all-intra topology both orders cost the same.
  const DeviceMesh mesh = MakeMesh({2, 4});
  const Layout from = MakeLayout({1024, 1024}, mesh, "S(0),S(1)");
  const Layout to = MakeLayout({1024, 1024}, mesh, "R,R");
  StatusOr<Topology> topo = ParseTopology("intra=1;bw_inter=1;lat_inter=50");
  ASSERT_TRUE(topo.ok());
  StatusOr<Plan> plan = PlanRedistribution(from, to, DType::kF32, *topo);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(CheckPlan(*plan).ok());
  ASSERT_EQ(plan->steps.size(), 2u) << PlanToText(*plan);
  EXPECT_EQ(plan->steps[0].kind, StepKind::kAllGather);
  EXPECT_EQ(plan->steps[0].mesh_dims, std::vector<int>{0});
  StatusOr<Plan> greedy = PlanGreedy(from, to, DType::kF32, *topo);
  ASSERT_TRUE(greedy.ok());
  EXPECT_LT(plan->modelled_us, greedy->modelled_us / 3);
  EXPECT_EQ(plan->max_bytes_received_per_rank, greedy->max_bytes_received_per_rank);
}

// ---- Brute force: every sequence of up to kMaxLen steps over the same edge set. ----

struct Best {
  int64_t cost = std::numeric_limits<int64_t>::max();
  int64_t bytes = 0;
  size_t len = 0;
};

std::vector<int> Key(const Layout& l) {
  std::vector<int> k;
  for (const Placement& p : l.placements()) {
    k.push_back(IsShard(p) ? std::get<Shard>(p).dim : (IsReplicate(p) ? -1 : -2));
  }
  for (const auto& o : l.shard_order()) {
    k.push_back(-9);
    k.insert(k.end(), o.begin(), o.end());
  }
  return k;
}

// Layered relaxation: best[k][state] = minimum cost over sequences of exactly <= k steps.
Best BruteForceLayered(const Layout& from, const Layout& to, DType dtype, const Topology& topo, int max_len) {
  std::map<std::vector<int>, std::pair<int64_t, Layout>> frontier{{Key(from), {0, from}}};
  std::map<std::vector<int>, std::vector<PlanStep>> succ_cache;
  Best best;
  const std::vector<int> target = Key(to);
  if (Key(from) == target) best.cost = 0;
  for (int len = 1; len <= max_len; ++len) {
    std::map<std::vector<int>, std::pair<int64_t, Layout>> next;
    for (const auto& [key, entry] : frontier) {
      auto it = succ_cache.find(key);
      if (it == succ_cache.end()) {
        StatusOr<std::vector<PlanStep>> s = Successors(entry.second, to, dtype, topo);
        EXPECT_TRUE(s.ok()) << s.status();
        it = succ_cache.emplace(key, s.ok() ? *s : std::vector<PlanStep>{}).first;
      }
      for (const PlanStep& step : it->second) {
        const int64_t c = entry.first + CostUnits(step.modelled_us);
        std::vector<int> k = Key(step.to);
        if (k == target && c < best.cost) best = Best{c, 0, static_cast<size_t>(len)};
        auto [nit, inserted] = next.emplace(k, std::make_pair(c, step.to));
        if (!inserted && c < nit->second.first) nit->second.first = c;
      }
    }
    frontier = std::move(next);
  }
  return best;
}

// Literal depth-first enumeration of every step sequence (small cases only).
int64_t BruteForceDfs(const Layout& from, const Layout& to, DType dtype, const Topology& topo, int max_len) {
  int64_t best = std::numeric_limits<int64_t>::max();
  const std::vector<int> target = Key(to);
  std::function<void(const Layout&, int64_t, int)> dfs = [&](const Layout& cur, int64_t cost, int depth) {
    if (Key(cur) == target) best = std::min(best, cost);
    if (depth == max_len) return;
    StatusOr<std::vector<PlanStep>> s = Successors(cur, to, dtype, topo);
    ASSERT_TRUE(s.ok()) << s.status();
    for (const PlanStep& step : *s) dfs(step.to, cost + CostUnits(step.modelled_us), depth + 1);
  };
  dfs(from, 0, 0);
  return best;
}

int64_t PlanCost(const Plan& plan) {
  int64_t c = 0;
  for (const PlanStep& s : plan.steps) c += CostUnits(s.modelled_us);
  return c;
}

struct BruteCase {
  std::vector<int64_t> mesh;
  std::vector<int64_t> shape;
  const char* from;
  const char* to;
  const char* from_order = "";
  const char* to_order = "";
  const char* topo = "";
};

TEST(SearchTest, BruteForceLayeredMatchesDijkstra) {
  constexpr int kMaxLen = 5;
  const std::vector<BruteCase> cases = {
      {{2}, {5, 3}, "S(0)", "S(1)"},
      {{3}, {5, 3}, "P", "S(0)"},
      {{4}, {7}, "S(0)", "P(sum)"},
      {{4}, {0, 5}, "S(0)", "S(1)"},
      {{2, 2}, {5, 3}, "S(0),S(1)", "S(1),S(0)"},
      {{2, 2}, {5, 3}, "S(0),S(0)", "R,S(0)"},
      {{2, 2}, {7, 3}, "S(0),S(0)", "S(0),S(0)", "", "0:[1,0]"},
      {{2, 2}, {5, 3}, "P,S(0)", "S(1),R"},
      {{2, 2}, {5, 3}, "P,P", "S(0),S(0)", "", "", "intra=1"},
      {{2, 2}, {8, 8}, "R,S(1)", "P,S(0)"},
      {{2, 3}, {5, 7}, "S(1),S(0)", "S(0),S(1)"},
      {{2, 3}, {5, 3, 7}, "S(0),S(2)", "S(2),S(0)", "", "", "intra=0;bw_inter=10"},
      {{2, 3}, {6, 0}, "S(0),S(0)", "S(1),S(0)"},
      {{2, 2, 2}, {8, 8, 8}, "S(0),S(1),S(0)", "S(1),S(0),S(0)"},
      {{2, 2, 2}, {5, 3, 7}, "S(0),S(0),S(0)", "S(1),S(1),S(1)"},
      {{2, 2, 2}, {5, 3}, "S(0),P,S(1)", "R,S(0),S(0)", "", "", "intra=2"},
  };
  for (const BruteCase& c : cases) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    const DeviceMesh mesh = MakeMesh(c.mesh);
    const Layout from = MakeLayout(c.shape, mesh, c.from, c.from_order);
    const Layout to = MakeLayout(c.shape, mesh, c.to, c.to_order);
    StatusOr<Topology> topo = ParseTopology(c.topo);
    ASSERT_TRUE(topo.ok());
    StatusOr<Plan> plan = PlanRedistribution(from, to, DType::kF32, *topo);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan);
    const Best best = BruteForceLayered(from, to, DType::kF32, *topo, kMaxLen);
    const int64_t dijkstra = PlanCost(*plan);
    if (plan->steps.size() <= static_cast<size_t>(kMaxLen)) {
      EXPECT_EQ(dijkstra, best.cost) << PlanToText(*plan);
    } else {
      EXPECT_LE(dijkstra, best.cost) << PlanToText(*plan);
    }
  }
}

TEST(SearchTest, BruteForceDfsMatchesDijkstraOnOneDMeshes) {
  constexpr int kMaxLen = 4;
  const std::vector<BruteCase> cases = {
      {{2}, {5, 3}, "S(0)", "S(1)"},     {{3}, {5, 3}, "P(max)", "S(1)"}, {{4}, {7, 0}, "S(1)", "R"},
      {{3}, {5, 3}, "S(1)", "P(avg)"},   {{2}, {3}, "R", "S(0)"},         {{4}, {5, 3, 7}, "S(2)", "S(0)"},
  };
  for (const BruteCase& c : cases) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    const DeviceMesh mesh = MakeMesh(c.mesh);
    const Layout from = MakeLayout(c.shape, mesh, c.from);
    const Layout to = MakeLayout(c.shape, mesh, c.to);
    StatusOr<Plan> plan = PlanRedistribution(from, to, DType::kF32, Topology());
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_LE(plan->steps.size(), static_cast<size_t>(kMaxLen));
    EXPECT_EQ(PlanCost(*plan), BruteForceDfs(from, to, DType::kF32, Topology(), kMaxLen)) << PlanToText(*plan);
  }
}

// The issue #17 case: 5-6 mesh dims made the unbounded search take 20-90 s.
struct SixDCase {
  DeviceMesh mesh = MakeMesh({2, 2, 2, 2, 2, 2});
  Layout from = MakeLayout({8, 8, 8}, mesh, "P,S(0),S(1),S(2),R,S(0)");
  Layout to = MakeLayout({8, 8, 8}, mesh, "S(2),S(1),S(0),R,P,R");
};

TEST(SearchBudgetTest, SmallBudgetOnSixDimsReturnsAValidPlanNoWorseThanGreedy) {
  const SixDCase c;
  const Topology topo;
  StatusOr<Plan> greedy = PlanGreedy(c.from, c.to, DType::kF32, topo);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  for (int64_t max_edges : {1, 500, 2000}) {
    SCOPED_TRACE("max_edges=" + std::to_string(max_edges));
    StatusOr<Plan> plan = PlanRedistribution(c.from, c.to, DType::kF32, topo, SearchBudget{.max_edges = max_edges});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->planner, PlannerKind::kOptimal);
    EXPECT_FALSE(plan->proven_optimal);
    // Stops before the first expansion at or past the budget: at least max_edges edges, and at
    // most one state's edges more (a 6-D state has a few hundred).
    EXPECT_GE(plan->search_edges, max_edges);
    EXPECT_LT(plan->search_edges, max_edges + 5000);
    EXPECT_LE(CostUnits(plan->modelled_us), CostUnits(greedy->modelled_us)) << PlanToText(*plan) << PlanToText(*greedy);
    // Every step is element-exact (the executor's contract) and the steps chain to the target.
    EXPECT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan);
    EXPECT_NE(PlanToText(*plan).find("not proven optimal: the search budget ran out after " +
                                     std::to_string(plan->search_edges) + " edges"),
              std::string::npos)
        << PlanToText(*plan);
    // Without a time limit the result is deterministic.
    StatusOr<Plan> again = PlanRedistribution(c.from, c.to, DType::kF32, topo, SearchBudget{.max_edges = max_edges});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(PlanToText(*again), PlanToText(*plan));
  }
}

TEST(SearchBudgetTest, TimeLimitStopsTheSearch) {
  const SixDCase c;
  // 1 ns: passed as soon as the first state is expanded.
  StatusOr<Plan> plan =
      PlanRedistribution(c.from, c.to, DType::kF32, Topology(), SearchBudget{.max_edges = 0, .max_ms = 1e-6});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->proven_optimal);
  EXPECT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan);
}

TEST(SearchBudgetTest, FallbackWithoutGreedyUsesReduceThenDirect) {
  // A non-default shard order: the greedy reference does not apply, and the target is not one
  // edge away, so a search stopped after its first state falls back on reduce-then-direct:
  // all_reduce of the Partial dim, send_recv to the target without Partial, local_partial.
  const DeviceMesh mesh = MakeMesh({2, 2, 2});
  const Layout from = MakeLayout({8, 8}, mesh, "P,S(0),S(0)", "0:[2,1]");
  const Layout to = MakeLayout({8, 8}, mesh, "S(1),R,P");
  ASSERT_FALSE(PlanGreedy(from, to, DType::kF32, Topology()).ok());
  StatusOr<Plan> plan = PlanRedistribution(from, to, DType::kF32, Topology(), SearchBudget{.max_edges = 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan);
  EXPECT_EQ(plan->planner, PlannerKind::kOptimal);
  EXPECT_FALSE(plan->proven_optimal);
  EXPECT_GE(plan->search_edges, 1);
  std::vector<StepKind> kinds;
  for (const PlanStep& s : plan->steps) kinds.push_back(s.kind);
  EXPECT_EQ(kinds, (std::vector<StepKind>{StepKind::kAllReduce, StepKind::kSendRecv, StepKind::kLocalPartial}))
      << PlanToText(*plan);
  ASSERT_EQ(plan->steps.size(), 3u);
  EXPECT_EQ(plan->steps[0].mesh_dims, std::vector<int>{0});
  EXPECT_EQ(plan->steps[1].to.PlacementsString(), "S(1),R,R");
  EXPECT_EQ(plan->steps[2].mesh_dims, std::vector<int>{2});
  StatusOr<Plan> exact = PlanRedistribution(from, to, DType::kF32, Topology(), SearchBudget{.max_edges = 0});
  ASSERT_TRUE(exact.ok());
  EXPECT_TRUE(exact->proven_optimal);
  EXPECT_GE(CostUnits(plan->modelled_us), CostUnits(exact->modelled_us));
}

TEST(SearchBudgetTest, UnlimitedAndDefaultBudgetsProveSmallCasesOptimal) {
  struct Case {
    std::vector<int64_t> mesh;
    std::vector<int64_t> shape;
    const char* from;
    const char* to;
  };
  for (const Case& c : {Case{{2, 2}, {8, 8}, "S(0),S(1)", "S(1),S(0)"},
                        Case{{2, 2, 2}, {8, 8, 8}, "S(0),S(1),S(2)", "S(2),S(1),S(0)"},
                        Case{{2, 2, 2}, {8, 8, 8}, "P,S(0),R", "S(1),R,P"},
                        Case{{4}, {7}, "P(max)", "S(0)"}}) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    const DeviceMesh mesh = MakeMesh(c.mesh);
    const Layout from = MakeLayout(c.shape, mesh, c.from);
    const Layout to = MakeLayout(c.shape, mesh, c.to);
    StatusOr<Plan> unlimited = PlanRedistribution(from, to, DType::kF32, Topology(), SearchBudget{.max_edges = 0});
    StatusOr<Plan> by_default = PlanRedistribution(from, to, DType::kF32, Topology());
    ASSERT_TRUE(unlimited.ok()) << unlimited.status();
    ASSERT_TRUE(by_default.ok()) << by_default.status();
    EXPECT_TRUE(unlimited->proven_optimal);
    EXPECT_TRUE(by_default->proven_optimal);
    EXPECT_GT(unlimited->search_edges, 0);
    EXPECT_LE(unlimited->search_edges, SearchBudget::kDefaultMaxEdges);
    EXPECT_EQ(PlanToText(*unlimited), PlanToText(*by_default));
  }
  // from == to: nothing to search, proven optimal.
  const DeviceMesh mesh = MakeMesh({2});
  const Layout a = MakeLayout({4}, mesh, "S(0)");
  StatusOr<Plan> empty = PlanRedistribution(a, a, DType::kF32, Topology(), SearchBudget{.max_edges = 1});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->proven_optimal);
  EXPECT_EQ(empty->search_edges, 0);
  // Greedy and direct plans never claim optimality.
  EXPECT_FALSE(PlanGreedy(a, MakeLayout({4}, mesh, "R"), DType::kF32, Topology())->proven_optimal);
  EXPECT_FALSE(PlanDirect(a, MakeLayout({4}, mesh, "R"), DType::kF32, Topology())->proven_optimal);
}

TEST(SearchBudgetTest, ValidateAndToString) {
  EXPECT_TRUE(SearchBudget().Validate().ok());
  EXPECT_EQ(SearchBudget().max_edges, SearchBudget::kDefaultMaxEdges);
  EXPECT_EQ(SearchBudget().ToString(), "max_edges=20000");
  EXPECT_EQ((SearchBudget{.max_edges = 0, .max_ms = 50}).ToString(), "max_edges=0;max_ms=50");
  EXPECT_TRUE((SearchBudget{.max_edges = 0, .max_ms = 0}).Validate().ok());
  struct Bad {
    SearchBudget budget;
    const char* message;
  };
  for (const Bad& b : {Bad{{.max_edges = -1}, "search budget max_edges=-1 must be >= 0 (0: unlimited)"},
                       Bad{{.max_ms = -2.5}, "search budget max_ms=-2.5 must be >= 0 and finite (0: unlimited)"},
                       Bad{{.max_ms = std::numeric_limits<double>::quiet_NaN()}, "search budget max_ms=nan"},
                       Bad{{.max_ms = std::numeric_limits<double>::infinity()}, "search budget max_ms=inf"}}) {
    const Status s = b.budget.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.message;
    EXPECT_NE(s.message().find(b.message), std::string::npos) << s;
  }
  // The planner checks it before searching.
  const DeviceMesh mesh = MakeMesh({2});
  StatusOr<Plan> plan = PlanRedistribution(MakeLayout({4}, mesh, "S(0)"), MakeLayout({4}, mesh, "R"), DType::kF32,
                                           Topology(), SearchBudget{.max_edges = -1});
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("max_edges=-1"), std::string::npos) << plan.status();
}

TEST(SearchTest, TopologyMustFitTheMesh) {
  const DeviceMesh mesh = MakeMesh({2, 2});
  const Layout from = MakeLayout({8, 8}, mesh, "S(0),S(1)");
  const Layout to = MakeLayout({8, 8}, mesh, "S(1),S(0)");
  const Topology topo = *ParseTopology("intra=7");  // parses: the mesh is not known yet
  const std::string want = "topology intra= names mesh dim 7 but the mesh has 2 dims (0..1)";
  for (const Status& s : {PlanRedistribution(from, to, DType::kF32, topo).status(),
                          PlanGreedy(from, to, DType::kF32, topo).status(),
                          PlanDirect(from, to, DType::kF32, topo).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
  }
  EXPECT_TRUE(PlanRedistribution(from, to, DType::kF32, *ParseTopology("intra=1")).ok());
}

TEST(SearchTest, DirectPlan) {
  const DeviceMesh mesh = MakeMesh({2, 2});
  const Layout from = MakeLayout({8, 8}, mesh, "S(0),S(1)");
  const Layout to = MakeLayout({8, 8}, mesh, "S(1),P");
  StatusOr<Plan> plan = PlanDirect(from, to, DType::kF32, Topology());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->planner, PlannerKind::kDirect);
  ASSERT_EQ(plan->steps.size(), 2u);
  EXPECT_EQ(plan->steps[0].kind, StepKind::kSendRecv);
  EXPECT_EQ(plan->steps[1].kind, StepKind::kLocalPartial);
  EXPECT_TRUE(CheckPlan(*plan).ok()) << CheckPlan(*plan);
  // Every rank receives its whole target box less its source box: 8x4 columns less the 4x4 it
  // holds when its column chunk is its own: 32 f32 = 128 bytes for the busiest.
  EXPECT_EQ(plan->max_bytes_received_per_rank, 128);
  // The lower bound knows that the P group over mesh dim 1 may split the value: the group holds
  // 16 of the 32 elements of its 8x4 target box, so its 2 members need >= 8 elements (32 bytes)
  // each, not 32 (direct does not split; it meets the bound only for Partial-free targets).
  EXPECT_EQ(plan->lower_bound_bytes_per_rank, std::optional<int64_t>(32));
}

}  // namespace
}  // namespace meshflow
