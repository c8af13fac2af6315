// Tests of PlanCache: hits and misses, key sensitivity (order, dtype, topology), sharing across
// threads.
#include "meshflow/planner/plan_cache.h"

#include <gtest/gtest.h>

#include <latch>
#include <thread>
#include <vector>

#include "meshflow/planner/test_util.h"

namespace meshflow {
namespace {

using testing::MakeLayout;
using testing::MakeMesh;

TEST(PlanCacheTest, HitsAndMisses) {
  PlanCache cache;
  const DeviceMesh m = MakeMesh({2, 2});
  const Layout a = MakeLayout({8, 8}, m, "S(0),S(0)");
  const Layout b = MakeLayout({8, 8}, m, "R,S(1)");
  StatusOr<std::shared_ptr<const Plan>> p1 = cache.GetOrPlan(a, b, DType::kF32, Topology());
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_EQ(cache.hits(), 0);
  EXPECT_EQ(cache.misses(), 1);
  StatusOr<std::shared_ptr<const Plan>> p2 = cache.GetOrPlan(a, b, DType::kF32, Topology());
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(p1->get(), p2->get());  // the same shared plan
  // Every part of the key matters.
  ASSERT_TRUE(cache.GetOrPlan(a, b, DType::kF64, Topology()).ok());
  ASSERT_TRUE(cache.GetOrPlan(a, b, DType::kF32, *ParseTopology("intra=1")).ok());
  ASSERT_TRUE(cache.GetOrPlan(MakeLayout({8, 8}, m, "S(0),S(0)", "0:[1,0]"), b, DType::kF32, Topology()).ok());
  ASSERT_TRUE(cache.GetOrPlan(a, b, DType::kF32, Topology()).ok());
  EXPECT_EQ(cache.misses(), 4);
  EXPECT_EQ(cache.hits(), 2);
  EXPECT_EQ(cache.size(), 4u);
  // Errors are not cached.
  EXPECT_FALSE(cache.GetOrPlan(a, MakeLayout({8, 9}, m, "R,R"), DType::kF32, Topology()).ok());
  EXPECT_EQ(cache.size(), 4u);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.hits(), 0);
}

TEST(PlanCacheTest, KeyDistinguishesMeshNamesAndRanks) {
  const DeviceMesh plain = MakeMesh({2});
  const DeviceMesh named = *DeviceMesh::Create({2}, {"tp"});
  const DeviceMesh other = *DeviceMesh::CreateWithRanks({2}, {4, 5});
  PlanCache cache;
  for (const DeviceMesh* m : {&plain, &named, &other, &plain}) {
    ASSERT_TRUE(cache.GetOrPlan(MakeLayout({4}, *m, "S(0)"), MakeLayout({4}, *m, "R"), DType::kF32, {}).ok());
  }
  EXPECT_EQ(cache.misses(), 3);  // names and ranks are part of the key
  EXPECT_EQ(cache.hits(), 1);
  // Equal keys hash equal; the hash sees names, ranks, dtype and topology.
  const auto hash = [](const DeviceMesh& m, DType t, const Topology& topo) {
    return PlanCache::KeyHash(MakeLayout({4}, m, "S(0)"), MakeLayout({4}, m, "R"), t, topo);
  };
  EXPECT_EQ(hash(plain, DType::kF32, {}), hash(MakeMesh({2}), DType::kF32, {}));
  EXPECT_NE(hash(plain, DType::kF32, {}), hash(named, DType::kF32, {}));
  EXPECT_NE(hash(plain, DType::kF32, {}), hash(other, DType::kF32, {}));
  EXPECT_NE(hash(plain, DType::kF32, {}), hash(plain, DType::kF64, {}));
  EXPECT_NE(hash(plain, DType::kF32, {}), hash(plain, DType::kF32, *ParseTopology("intra=0")));
}

TEST(PlanCacheTest, ThreadSafe) {
  PlanCache cache;
  const DeviceMesh m = MakeMesh({2, 2});
  const std::vector<Layout> layouts = {MakeLayout({6, 5}, m, "S(0),S(1)"), MakeLayout({6, 5}, m, "S(1),S(0)"),
                                       MakeLayout({6, 5}, m, "R,S(0)"), MakeLayout({6, 5}, m, "P,R")};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int rep = 0; rep < 3; ++rep) {
        for (const Layout& a : layouts) {
          for (const Layout& b : layouts) {
            EXPECT_TRUE(cache.GetOrPlan(a, b, DType::kF32, Topology()).ok());
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(cache.size(), 16u);
  EXPECT_EQ(cache.hits() + cache.misses(), 4 * 3 * 16);
  EXPECT_GE(cache.hits(), 4 * 3 * 16 - 4 * 16);
}

TEST(PlanCacheTest, ConcurrentMissesOfOneKeyShareOneSearch) {
  // The ranks of an in-process world all ask for the same plan at once: one searches, the others
  // wait for its plan. misses() == 1, hits() == kThreads - 1 and one plan pointer hold however
  // the threads interleave; how many of the hits waited (shared_waits) depends on scheduling: a
  // thread that starts after the search finished gets a plain hit. The search (6-D mesh, a
  // budget of 10^6 edges: ~0.2 s at -O1; the default 20000 take ~5 ms, which a loaded 2-core
  // machine can spend before scheduling another thread) keeps the key in flight long enough that
  // some thread always finds it so.
  constexpr int kThreads = 8;
  const DeviceMesh m = MakeMesh({2, 2, 2, 2, 2, 2});
  const Layout from = MakeLayout({8, 8, 8}, m, "P,S(0),S(1),S(2),R,S(0)");
  const Layout to = MakeLayout({8, 8, 8}, m, "S(2),S(1),S(0),R,P,R");
  const SearchBudget kBudget{.max_edges = 1000000};
  PlanCache cache;
  std::latch start(kThreads);
  std::vector<StatusOr<std::shared_ptr<const Plan>>> results(kThreads, InternalError("not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      results[t] = cache.GetOrPlan(from, to, DType::kF32, Topology(), kBudget);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(results[t].ok()) << results[t].status();
    EXPECT_EQ(results[t]->get(), results[0]->get()) << "thread " << t;
  }
  EXPECT_EQ(cache.misses(), 1);
  EXPECT_EQ(cache.hits(), kThreads - 1);
  const int64_t waits = cache.shared_waits();
  EXPECT_GE(waits, 1);
  EXPECT_LE(waits, kThreads - 1);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_FALSE((*results[0])->proven_optimal);  // the budget ran out; still one shared plan
  // A later call is a plain hit, not a shared wait.
  ASSERT_TRUE(cache.GetOrPlan(from, to, DType::kF32, Topology(), kBudget).ok());
  EXPECT_EQ(cache.hits(), kThreads);
  EXPECT_EQ(cache.shared_waits(), waits);
  cache.Clear();
  EXPECT_EQ(cache.shared_waits(), 0);
}

TEST(PlanCacheTest, BudgetIsPartOfTheKeyAndErrorsAreNotCached) {
  PlanCache cache;
  const DeviceMesh m = MakeMesh({2, 2});
  const Layout a = MakeLayout({8, 8}, m, "S(0),S(1)");
  const Layout b = MakeLayout({8, 8}, m, "S(1),S(0)");
  ASSERT_TRUE(cache.GetOrPlan(a, b, DType::kF32, Topology()).ok());
  ASSERT_TRUE(cache.GetOrPlan(a, b, DType::kF32, Topology(), SearchBudget{.max_edges = 0}).ok());
  ASSERT_TRUE(cache.GetOrPlan(a, b, DType::kF32, Topology(), SearchBudget{.max_edges = 0}).ok());
  EXPECT_EQ(cache.misses(), 2);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_NE(PlanCache::KeyHash(a, b, DType::kF32, Topology()),
            PlanCache::KeyHash(a, b, DType::kF32, Topology(), SearchBudget{.max_edges = 0}));
  EXPECT_NE(PlanCache::KeyHash(a, b, DType::kF32, Topology(), SearchBudget{.max_edges = 0}),
            PlanCache::KeyHash(a, b, DType::kF32, Topology(), SearchBudget{.max_edges = 0, .max_ms = 5}));
  // Each failing call plans again and returns its own error; nothing is stored.
  for (int i = 0; i < 2; ++i) {
    StatusOr<std::shared_ptr<const Plan>> bad = cache.GetOrPlan(a, b, DType::kF32, Topology(), SearchBudget{.max_edges = -1});
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("max_edges=-1"), std::string::npos) << bad.status();
    StatusOr<std::shared_ptr<const Plan>> intra = cache.GetOrPlan(a, b, DType::kF32, *ParseTopology("intra=7"));
    EXPECT_NE(intra.status().message().find("names mesh dim 7 but the mesh has 2 dims"), std::string::npos)
        << intra.status();
  }
  EXPECT_EQ(cache.misses(), 2 + 4);
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace meshflow
