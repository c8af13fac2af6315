#include "meshflow/dtensor/tensor_buffer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <string>
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
  EXPECT_EQ(HostAllocator().stats().limit_bytes, want);
}

class HostCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostAllocator().SetCacheLimit(64 * kMiB);
    HostAllocator().ReleaseCached();
  }
  void TearDown() override { HostAllocator().SetCacheLimit(64 * kMiB); }
};

TEST_F(HostCacheTest, FreedBlockServesTheNextTensorOfTheSameSize) {
  const MemoryStats before = HostAllocator().stats();
  const void* first = nullptr;
  {
    Tensor t = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
    first = t.data<float>().data();
    EXPECT_EQ(HostAllocator().stats().misses, before.misses + 1);
  }
  EXPECT_EQ(HostAllocator().stats().cached_bytes, kMiB);
  Tensor again = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
  EXPECT_EQ(again.data<float>().data(), first);
  EXPECT_EQ(HostAllocator().stats().hits, before.hits + 1);
  EXPECT_EQ(HostAllocator().stats().cached_bytes, 0);
}

TEST_F(HostCacheTest, ReusedBlockIsStillZeroedByZeros) {
  {
    Tensor dirty = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
    for (float& x : dirty.data<float>()) x = 7.0f;
  }
  const MemoryStats before = HostAllocator().stats();
  Tensor z = Tensor::Zeros(DType::kF32, {kMiB / 4});
  EXPECT_EQ(HostAllocator().stats().hits, before.hits + 1);
  for (float x : z.data<float>()) ASSERT_EQ(x, 0.0f);
}

TEST_F(HostCacheTest, SizesShareA4KiBClass) {
  { Tensor a = Tensor::Uninitialized(DType::kBF16, {kMiB / 2 + 1}); }  // 1 MiB + 2 bytes
  const MemoryStats before = HostAllocator().stats();
  Tensor b = Tensor::Uninitialized(DType::kBF16, {kMiB / 2 + 50});  // + 100 bytes: the same 4 KiB granule
  EXPECT_EQ(HostAllocator().stats().hits, before.hits + 1);
  Tensor c = Tensor::Uninitialized(DType::kBF16, {kMiB / 2 + 2500});  // + 5000 bytes: the next one, a miss
  EXPECT_EQ(HostAllocator().stats().misses, before.misses + 1);
}

TEST_F(HostCacheTest, SmallBlocksBypassTheCache) {
  const MemoryStats before = HostAllocator().stats();
  { Tensor t = Tensor::Uninitialized(DType::kF32, {1024}); }  // 4 KiB
  const MemoryStats after = HostAllocator().stats();
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.cached_bytes, 0);
}

TEST_F(HostCacheTest, LimitBoundsTheCachedBytes) {
  HostAllocator().SetCacheLimit(kMiB + kMiB / 2);
  {
    Tensor a = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
    Tensor b = Tensor::Uninitialized(DType::kF32, {kMiB / 4});
  }
  EXPECT_EQ(HostAllocator().stats().cached_bytes, kMiB);  // the second block did not fit
  HostAllocator().SetCacheLimit(0);
  EXPECT_EQ(HostAllocator().stats().cached_bytes, 0);
  EXPECT_EQ(HostAllocator().stats().limit_bytes, 0);
  { Tensor c = Tensor::Uninitialized(DType::kF32, {kMiB / 4}); }
  EXPECT_EQ(HostAllocator().stats().cached_bytes, 0);
  HostAllocator().SetCacheLimit(-5);
  EXPECT_EQ(HostAllocator().stats().limit_bytes, 0);
}

TEST_F(HostCacheTest, ReleaseFreesEveryCachedBlock) {
  {
    std::vector<Tensor> ts;
    for (int i = 0; i < 4; ++i) ts.push_back(Tensor::Uninitialized(DType::kF32, {kMiB / 4 + 1024 * i}));
  }
  EXPECT_GT(HostAllocator().stats().cached_bytes, 4 * kMiB);
  HostAllocator().ReleaseCached();
  EXPECT_EQ(HostAllocator().stats().cached_bytes, 0);
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
  EXPECT_GT(HostAllocator().stats().cached_bytes, 0);
}

}  // namespace
}  // namespace meshflow

namespace meshflow {
namespace {

TEST(TensorBufferTest, ResizeKeepsTheBlockWithinItsCapacity) {
  TensorBuffer b(1000);
  b.data()[999] = std::byte{3};
  std::byte* data = b.data();
  ASSERT_TRUE(b.Resize(10).ok());
  EXPECT_EQ(b.size(), 10);
  EXPECT_EQ(b.capacity(), 1000);
  ASSERT_TRUE(b.Resize(1000).ok());
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.data()[999], std::byte{3});
  ASSERT_TRUE(b.Resize(2000).ok());  // above the capacity: a new block
  EXPECT_EQ(b.size(), 2000);
  EXPECT_EQ(b.Resize(-1).code(), StatusCode::kInvalidArgument);
}

TEST(TensorBufferTest, MovesTransferTheBlock) {
  TensorBuffer a(100);
  std::byte* data = a.data();
  TensorBuffer b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a.size(), 0);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(a.data(), nullptr);
  TensorBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.device(), Device::Host());
  EXPECT_EQ(c.stream(), nullptr);
}

TEST(TensorBufferTest, AllocationCountsInTheHostStats) {
  const MemoryStats before = HostAllocator().stats();
  {
    StatusOr<TensorBuffer> b = TensorBuffer::Allocate(Device::Host(), 1 << 20);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(HostAllocator().stats().allocated_bytes, before.allocated_bytes + (1 << 20));
    EXPECT_GE(HostAllocator().stats().peak_allocated_bytes, before.allocated_bytes + (1 << 20));
  }
  EXPECT_EQ(HostAllocator().stats().allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(TensorBuffer::Allocate(Device::Host(), -1).status().code(), StatusCode::kInvalidArgument);
}

// No CUDA runtime is linked into this test: device buffers are refused with a message that says
// what to link.
TEST(TensorBufferTest, ADeviceWithoutRuntimeIsUnavailable) {
  StatusOr<TensorBuffer> b = TensorBuffer::Allocate(Device::Cuda(0), 16);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find("//runtime/cuda:cuda_device"), std::string::npos) << b.status();
  StatusOr<Tensor> t = Tensor::Empty(DType::kF32, {4}, Device::Cuda(1));
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(Tensor::Empty(DType::kF32, {-1}, Device::Host()).status().code(), StatusCode::kInvalidArgument);
}

TEST(TensorBufferTest, HostTensorsCopyToTheHost) {
  const Tensor t = Tensor::Iota(DType::kF64, {3, 2});
  StatusOr<Tensor> c = t.CopyTo(Device::Host(), nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, t);
  EXPECT_NE(c->raw(), t.raw());
  StatusOr<Tensor> h = t.ToHost();
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, t);
  StatusOr<Tensor> k = t.Clone();
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, t);
  EXPECT_TRUE(t.is_host());
  EXPECT_EQ(t.stream(), nullptr);
}

}  // namespace
}  // namespace meshflow
