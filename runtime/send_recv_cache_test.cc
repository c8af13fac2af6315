#include "meshflow/runtime/send_recv_cache.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace meshflow {
namespace {

Layout L(int64_t rows, const DeviceMesh& mesh, Placements p) { return *Layout::Create({rows, 8}, mesh, std::move(p)); }

SendRecvSchedule Tagged(int64_t tag) {
  SendRecvSchedule s;
  s.covered = tag;
  return s;
}

TEST(SendRecvCacheTest, KeyedOnLayoutValues) {
  SendRecvCache cache;
  const DeviceMesh mesh = *DeviceMesh::Create({4});
  const Layout s0 = L(16, mesh, {Shard{0}}), s1 = L(16, mesh, {Shard{1}});
  EXPECT_EQ(cache.Find(s0, s1), nullptr);
  EXPECT_EQ(cache.Insert(s0, s1, Tagged(1)).covered, 1);
  // An equal layout built separately (another mesh object over the same ranks) finds the entry.
  const DeviceMesh mesh2 = *DeviceMesh::Create({4});
  const SendRecvSchedule* hit = cache.Find(L(16, mesh2, {Shard{0}}), L(16, mesh2, {Shard{1}}));
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->covered, 1);
  // Direction, shape and mesh ranks are part of the key.
  EXPECT_EQ(cache.Find(s1, s0), nullptr);
  EXPECT_EQ(cache.Find(L(17, mesh, {Shard{0}}), L(17, mesh, {Shard{1}})), nullptr);
  const DeviceMesh other = *DeviceMesh::CreateWithRanks({4}, {3, 2, 1, 0});
  EXPECT_EQ(cache.Find(L(16, other, {Shard{0}}), L(16, other, {Shard{1}})), nullptr);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 4);
  // Inserting an equal key replaces the entry.
  cache.Insert(s0, s1, Tagged(2));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Find(s0, s1)->covered, 2);
}

TEST(SendRecvCacheTest, BoundedLeastRecentlyUsedFirst) {
  SendRecvCache cache;
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  const Layout r = L(4, mesh, {Replicate{}});
  for (int64_t i = 0; i < static_cast<int64_t>(SendRecvCache::kMaxEntries); ++i) {
    cache.Insert(L(i, mesh, {Shard{0}}), r, Tagged(i));
  }
  EXPECT_EQ(cache.size(), SendRecvCache::kMaxEntries);
  ASSERT_NE(cache.Find(L(0, mesh, {Shard{0}}), r), nullptr);  // 0 is now the most recent; 1 the oldest
  cache.Insert(L(1000, mesh, {Shard{0}}), r, Tagged(1000));
  EXPECT_EQ(cache.size(), SendRecvCache::kMaxEntries);
  EXPECT_EQ(cache.Find(L(1, mesh, {Shard{0}}), r), nullptr);
  ASSERT_NE(cache.Find(L(0, mesh, {Shard{0}}), r), nullptr);
  ASSERT_NE(cache.Find(L(1000, mesh, {Shard{0}}), r), nullptr);
  EXPECT_EQ(cache.Find(L(2, mesh, {Shard{0}}), r)->covered, 2);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace meshflow
