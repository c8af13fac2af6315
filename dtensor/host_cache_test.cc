#include "meshflow/dtensor/host_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "meshflow/dtensor/tensor.h"

namespace meshflow {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Runs first (gtest keeps declaration order within a file): the limit before any test sets it.
TEST(HostCache, DefaultLimit) {
  if (std::getenv("MESHFLOW_HOST_CACHE_MB") != nullptr) GTEST_SKIP() << "MESHFLOW_HOST_CACHE_MB is set";
  const int64_t want = HostCacheDefaultLimit();
  EXPECT_TRUE(want == 0 || want == int64_t{1} << 30) << want;
  EXPECT_EQ(GetHostCacheStats().limit_bytes, want);
}

class HostCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetHostCacheLimit(64 * kMiB);
    ReleaseHostCache();
  }
  void TearDown() override { SetHostCacheLimit(64 * kMiB); }
};

TEST_F(HostCacheTest, FreedBlockServesTheNextTensorOfTheSameSize) {
  const HostCacheStats before = GetHostCacheStats();
  const void* first = nullptr;
  {
    Tensor t = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
    first = t.data<float>().data();
    EXPECT_EQ(GetHostCacheStats().misses, before.misses + 1);
  }
  EXPECT_EQ(GetHostCacheStats().cached_bytes, kMiB);
  Tensor again = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
  EXPECT_EQ(again.data<float>().data(), first);
  EXPECT_EQ(GetHostCacheStats().hits, before.hits + 1);
  EXPECT_EQ(GetHostCacheStats().cached_bytes, 0);
}

TEST_F(HostCacheTest, ReusedBlockIsStillZeroedByZeros) {
  {
    Tensor dirty = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
    for (float& x : dirty.data<float>()) x = 7.0f;
  }
  const HostCacheStats before = GetHostCacheStats();
  Tensor z = Tensor::Zeros(DType::kF32, {kMiB / 4});
  EXPECT_EQ(GetHostCacheStats().hits, before.hits + 1);
  for (float x : z.data<float>()) ASSERT_EQ(x, 0.0f);
}

TEST_F(HostCacheTest, SizesShareA4KiBClass) {
  { Tensor a = Tensor::Uninitialized(DType::kBF16, {kMiB / 2 + 1}); }  // 1 MiB + 2 bytes
  const HostCacheStats before = GetHostCacheStats();
  Tensor b = Tensor::Uninitialized(DType::kBF16, {kMiB / 2 + 50});  // + 100 bytes: the same 4 KiB granule
  EXPECT_EQ(GetHostCacheStats().hits, before.hits + 1);
  Tensor c = Tensor::Uninitialized(DType::kBF16, {kMiB / 2 + 2500});  // + 5000 bytes: the next one, a miss
  EXPECT_EQ(GetHostCacheStats().misses, before.misses + 1);
}

TEST_F(HostCacheTest, SmallBlocksBypassTheCache) {
  const HostCacheStats before = GetHostCacheStats();
  { Tensor t = Tensor::Uninitialized(DType::kF32, {1024}); }  // 4 KiB
  const HostCacheStats after = GetHostCacheStats();
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.cached_bytes, 0);
}

TEST_F(HostCacheTest, LimitBoundsTheCachedBytes) {
  SetHostCacheLimit(kMiB + kMiB / 2);
  {
    Tensor a = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
    Tensor b = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
  }
  EXPECT_EQ(GetHostCacheStats().cached_bytes, kMiB);  // the second block did not fit
  SetHostCacheLimit(0);
  EXPECT_EQ(GetHostCacheStats().cached_bytes, 0);
  EXPECT_EQ(GetHostCacheStats().limit_bytes, 0);
  { Tensor c = Tensor::Uninitialized(DType::kF32, {kMiB / 4}); }
  EXPECT_EQ(GetHostCacheStats().cached_bytes, 0);
  SetHostCacheLimit(-5);
  EXPECT_EQ(GetHostCacheStats().limit_bytes, 0);
}

TEST_F(HostCacheTest, ReleaseFreesEveryCachedBlock) {
  {
    std::vector<Tensor> ts;
    for (int i = 0; i < 4; ++i) ts.push_back(Tensor::Uninitialized(DType::kF32, {kMiB / 4 + 1024 * i}));
  }
  EXPECT_GT(GetHostCacheStats().cached_bytes, 4 * kMiB);
  ReleaseHostCache();
  EXPECT_EQ(GetHostCacheStats().cached_bytes, 0);
}

// Blocks allocated on one thread and freed on another, from several threads at once (TSan).
TEST_F(HostCacheTest, ThreadsShareTheCache) {
  std::vector<std::thread> threads;
  std::vector<std::vector<Tensor>> made(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &made] {
      for (int i = 0; i < 50; ++i) {
        Tensor x = Tensor::Zeros(DType::kF32, {kMiB / 16 * (1 + i % 3)});
        x.data<float>()[0] = static_cast<float>(t);
        if (i % 10 == 0) made[static_cast<size_t>(t)].push_back(std::move(x));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  threads.clear();
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &made] { made[static_cast<size_t>((t + 1) % 4)].clear(); });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_GT(GetHostCacheStats().cached_bytes, 0);
}

}  // namespace
}  // namespace meshflow
