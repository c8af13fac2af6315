#include "meshflow/runtime/allocator.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshflow/runtime/stream.h"

namespace meshflow {
namespace {

using ::testing::HasSubstr;

// Host memory posing as a device, with a capacity, counting raw calls.
class CountingMemory final : public RawMemory {
 public:
  CountingMemory(int64_t capacity, std::atomic<int64_t>* raw_allocs) : capacity_(capacity), raw_allocs_(raw_allocs) {}
  Device device() const override { return Device::Cuda(3); }
  void* Allocate(size_t bytes) override {
    if (in_use_ + static_cast<int64_t>(bytes) > capacity_) return nullptr;
    in_use_ += static_cast<int64_t>(bytes);
    ++*raw_allocs_;
    return std::malloc(bytes);
  }
  void Free(void* p, size_t bytes) override {
    in_use_ -= static_cast<int64_t>(bytes);
    std::free(p);
  }

 private:
  int64_t capacity_;
  int64_t in_use_ = 0;
  std::atomic<int64_t>* raw_allocs_;
};

class CachingAllocatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<Allocator> Make(int64_t capacity = int64_t{1} << 30, int64_t limit = int64_t{1} << 30) {
    return NewCachingAllocator(std::make_unique<CountingMemory>(capacity, &raw_allocs_),
                               CachingAllocatorOptions{.min_cached_bytes = 1024, .granule = 512, .limit_bytes = limit});
  }
  std::atomic<int64_t> raw_allocs_{0};
};

TEST_F(CachingAllocatorTest, FreedBlockIsReusedForTheSameStreamOnly) {
  std::unique_ptr<Allocator> a = Make();
  std::unique_ptr<Stream> s1 = NewHostStream("s1"), s2 = NewHostStream("s2");
  StatusOr<void*> p = a->Allocate(4000, s1.get());
  ASSERT_TRUE(p.ok());
  a->Deallocate(*p, 4000, s1.get());
  EXPECT_EQ(a->stats().cached_bytes, 4096);  // rounded to the granule
  StatusOr<void*> other = a->Allocate(4000, s2.get());  // another stream: not that block
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *p);
  StatusOr<void*> same = a->Allocate(3900, s1.get());   // same stream, same class: reused
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, *p);
  const MemoryStats st = a->stats();
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.misses, 2);
  EXPECT_EQ(st.allocated_bytes, 7900);
  EXPECT_EQ(raw_allocs_.load(), 2);
  a->Deallocate(*other, 4000, s2.get());
  a->Deallocate(*same, 3900, s1.get());
  EXPECT_EQ(a->stats().allocated_bytes, 0);
  EXPECT_EQ(a->device(), Device::Cuda(3));
}

TEST_F(CachingAllocatorTest, ABlockUsedByAnotherStreamWaitsForIt) {
  std::unique_ptr<Allocator> a = Make();
  std::unique_ptr<Stream> home = NewHostStream("home"), user = NewHostStream("user");
  std::atomic<bool> go{false};
  ASSERT_TRUE(user->Enqueue([&]() {
                    while (!go.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
                    return Status::Ok();
                  }).ok());
  StatusOr<void*> p = a->Allocate(8192, home.get());
  ASSERT_TRUE(p.ok());
  Stream* uses[] = {user.get()};
  a->Deallocate(*p, 8192, home.get(), uses);  // `user` may still read it
  EXPECT_EQ(a->stats().pending_bytes, 8192);
  EXPECT_EQ(a->stats().cached_bytes, 0);
  StatusOr<void*> q = a->Allocate(8192, home.get());
  ASSERT_TRUE(q.ok());
  EXPECT_NE(*q, *p);  // not reused while `user` has not run past the free
  go.store(true);
  ASSERT_TRUE(user->Synchronize().ok());
  a->Deallocate(*q, 8192, home.get());
  StatusOr<void*> r = a->Allocate(8192, home.get());
  StatusOr<void*> t = a->Allocate(8192, home.get());
  ASSERT_TRUE(r.ok() && t.ok());
  const std::set<void*> got = {*r, *t};
  EXPECT_EQ(got, (std::set<void*>{*p, *q}));  // both blocks served again
  EXPECT_EQ(a->stats().pending_bytes, 0);
  a->Deallocate(*r, 8192, home.get());
  a->Deallocate(*t, 8192, home.get());
}

TEST_F(CachingAllocatorTest, SmallBlocksBypassTheCache) {
  std::unique_ptr<Allocator> a = Make();
  StatusOr<void*> p = a->Allocate(100);
  ASSERT_TRUE(p.ok());
  a->Deallocate(*p, 100);
  EXPECT_EQ(a->stats().cached_bytes, 0);
  EXPECT_EQ(a->stats().hits + a->stats().misses, 0);
  EXPECT_EQ(a->stats().allocations, 1);
  StatusOr<void*> zero = a->Allocate(0);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, nullptr);
}

TEST_F(CachingAllocatorTest, PeakAndReset) {
  std::unique_ptr<Allocator> a = Make();
  void* p = *a->Allocate(10000);
  void* q = *a->Allocate(5000);
  a->Deallocate(p, 10000);
  EXPECT_EQ(a->stats().allocated_bytes, 5000);
  EXPECT_EQ(a->stats().peak_allocated_bytes, 15000);
  a->ResetPeak();
  EXPECT_EQ(a->stats().peak_allocated_bytes, 5000);
  a->Deallocate(q, 5000);
}

TEST_F(CachingAllocatorTest, LimitAndRelease) {
  std::unique_ptr<Allocator> a = Make(int64_t{1} << 30, /*limit=*/6000);
  void* p = *a->Allocate(4096);
  void* q = *a->Allocate(4096);
  a->Deallocate(p, 4096);
  a->Deallocate(q, 4096);  // does not fit under the limit: freed
  EXPECT_EQ(a->stats().cached_bytes, 4096);
  a->ReleaseCached();
  EXPECT_EQ(a->stats().cached_bytes, 0);
  a->SetCacheLimit(-1);
  EXPECT_EQ(a->stats().limit_bytes, 0);
}

TEST_F(CachingAllocatorTest, OutOfMemoryFreesTheCacheThenFailsNamingDeviceAndSize) {
  std::unique_ptr<Allocator> a = Make(/*capacity=*/16384);
  std::unique_ptr<Stream> s = NewHostStream("s");
  void* p = *a->Allocate(12288, s.get());
  a->Deallocate(p, 12288, s.get());  // cached for `s`, still holding the raw memory
  StatusOr<void*> q = a->Allocate(12288);  // no stream: the cached block is not eligible; freeing it makes room
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(a->stats().cached_bytes, 0);
  StatusOr<void*> big = a->Allocate(8192);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("cuda:3"));
  EXPECT_THAT(big.status().message(), HasSubstr("8192 bytes"));
  a->Deallocate(*q, 12288);
}

TEST(HostAllocatorTest, IsTheHostsCachingAllocator) {
  EXPECT_EQ(HostAllocator().device(), Device::Host());
  EXPECT_EQ(&HostAllocator(), &HostAllocator());
  if (std::getenv("MESHFLOW_HOST_CACHE_MB") == nullptr) {
    EXPECT_EQ(HostAllocator().stats().limit_bytes, HostCacheDefaultLimit());
  }
}

}  // namespace
}  // namespace meshflow
