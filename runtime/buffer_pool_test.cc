#include "meshflow/runtime/buffer_pool.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/dtensor/tensor.h"

namespace meshflow {
namespace {

TEST(BufferPoolTest, TakeFromEmptyPoolAllocatesExactSize) {
  BufferPool pool;
  TensorBuffer b = *pool.Take(100);
  EXPECT_EQ(b.size(), 100);
  EXPECT_EQ(pool.Take(0)->size(), 0);
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(pool.allocations(), 1);
}

TEST(BufferPoolTest, TakeReusesTheSmallestBufferThatFits) {
  BufferPool pool;
  TensorBuffer small = *pool.Take(10), mid = *pool.Take(1000), big = *pool.Take(100000);
  const std::byte* mid_data = mid.data();
  pool.Give(std::move(big));
  pool.Give(std::move(small));
  pool.Give(std::move(mid));
  EXPECT_EQ(pool.size(), 3u);
  TensorBuffer got = *pool.Take(500);
  EXPECT_EQ(got.data(), mid_data);  // the same memory, not a new allocation
  EXPECT_EQ(got.size(), 500);
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool.allocations(), 3);
  // Nothing pooled holds 200000 bytes: a new buffer, the pool is untouched.
  EXPECT_EQ(pool.Take(200000)->size(), 200000);
  EXPECT_EQ(pool.size(), 2u);
}

TEST(BufferPoolTest, GivingMoreThanTheLimitDropsTheSmallest) {
  BufferPool pool;
  for (size_t i = 0; i < BufferPool::kMaxBuffers + 2; ++i) pool.Give(TensorBuffer(1000 + i));
  EXPECT_EQ(pool.size(), BufferPool::kMaxBuffers);
  // The two smallest (1000, 1001) went: a request for 1000 gets the 1002-byte one.
  TensorBuffer b = *pool.Take(1000);
  EXPECT_GE(b.capacity(), 1002);
  pool.Give(TensorBuffer());  // no capacity: dropped
  EXPECT_EQ(pool.size(), BufferPool::kMaxBuffers - 1);
  EXPECT_GT(pool.capacity_bytes(), 0);
  pool.Clear();
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(pool.capacity_bytes(), 0);
}

TEST(TensorBufferTest, UninitializedReusesReleasedStorage) {
  Tensor a = Tensor::Iota(DType::kF32, {64, 64});
  const std::byte* data = a.raw();
  TensorBuffer buf = a.ReleaseBuffer();
  EXPECT_EQ(a.NumBytes(), 0);
  EXPECT_EQ(a.shape(), std::vector<int64_t>{0});
  EXPECT_EQ(a.dtype(), DType::kF32);
  // A smaller tensor in the same memory: no allocation, and the old bytes are still there
  // (Uninitialized does not clear them).
  Tensor b = Tensor::Uninitialized(DType::kI32, {10, 4}, std::move(buf));
  EXPECT_EQ(b.raw(), data);
  EXPECT_EQ(b.NumBytes(), 160);
  EXPECT_EQ(b.shape(), (std::vector<int64_t>{10, 4}));
  float first[2];
  std::memcpy(first, b.raw(), sizeof(first));
  EXPECT_EQ(first[1], 1.0f);
  // Too small a buffer grows.
  Tensor c = Tensor::Uninitialized(DType::kF32, {128, 128}, b.ReleaseBuffer());
  EXPECT_EQ(c.NumBytes(), 128 * 128 * 4);
}

TEST(TensorBufferTest, SliceStillCopiesExactly) {
  const Tensor t = Tensor::Iota(DType::kF32, {4, 6});
  Tensor s = t.Slice(Box{{1, 2}, {2, 3}});
  EXPECT_EQ(s, *Tensor::FromVector<float>({2, 3}, {8, 9, 10, 14, 15, 16}));
  EXPECT_EQ(t.Slice(Box{{1, 2}, {0, 3}}).NumBytes(), 0);
}

}  // namespace
}  // namespace meshflow
