#include "meshflow/runtime/allocator.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace meshflow {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(std::unique_ptr<RawMemory> raw, CachingAllocatorOptions options)
      : raw_(std::move(raw)), options_(options), limit_(options.limit_bytes < 0 ? 0 : options.limit_bytes) {
    if (options_.granule == 0) options_.granule = 1;
  }
  ~CachingAllocator() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (PendingBlock& b : pending_) {
      for (const std::shared_ptr<Event>& e : b.events) (void)e->Synchronize();
      free_[{b.stream, b.rounded}].push_back(b.p);
    }
    pending_.clear();
    TrimLocked(0);
  }

  Device device() const override { return raw_->device(); }

  StatusOr<void*> Allocate(int64_t bytes, Stream* stream) override {
    if (bytes <= 0) return static_cast<void*>(nullptr);
    const size_t n = static_cast<size_t>(bytes);
    const bool cached = n >= options_.min_cached_bytes;
    const size_t r = cached ? Rounded(n) : n;
    allocations_.fetch_add(1, std::memory_order_relaxed);
    if (cached) {
      std::lock_guard<std::mutex> lock(mu_);
      CollectPendingLocked();
      auto it = free_.find({stream, r});
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        if (it->second.empty()) free_.erase(it);
        cached_ -= static_cast<int64_t>(r);
        ++hits_;
        CountAllocated(bytes);
        return p;
      }
      ++misses_;
    }
    void* p = raw_->Allocate(r);
    if (p == nullptr) {
      ReleaseCached();  // blocks cached for other sizes or streams may be what the device lacks
      p = raw_->Allocate(r);
    }
    if (p == nullptr) {
      return ResourceExhaustedError("out of memory on " + device().ToString() + ": allocating " +
                                    std::to_string(bytes) + " bytes (" + std::to_string(stats().allocated_bytes) +
                                    " bytes allocated)");
    }
    CountAllocated(bytes);
    return p;
  }

  void Deallocate(void* p, int64_t bytes, Stream* stream, std::span<Stream* const> other_uses) noexcept override {
    if (p == nullptr || bytes <= 0) return;
    allocated_.fetch_sub(bytes, std::memory_order_relaxed);
    const size_t n = static_cast<size_t>(bytes);
    if (n < options_.min_cached_bytes) {
      raw_->Free(p, n);
      return;
    }
    const size_t r = Rounded(n);
    std::vector<std::shared_ptr<Event>> events;
    for (Stream* s : other_uses) {
      if (s == nullptr || s == stream) continue;
      StatusOr<std::shared_ptr<Event>> e = s->RecordEvent();
      if (e.ok()) {
        if (!(*e)->Query()) events.push_back(std::move(*e));
      } else {
        (void)s->Synchronize();  // a broken stream runs nothing more: waiting for it is enough
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    try {
      if (!events.empty()) {
        pending_.push_back(PendingBlock{p, r, stream, std::move(events)});
        pending_bytes_ += static_cast<int64_t>(r);
        return;
      }
      KeepLocked(p, r, stream);
    } catch (...) {
      raw_->Free(p, r);  // no room for the bookkeeping: release the block instead
    }
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    MemoryStats s;
    s.allocated_bytes = allocated_.load(std::memory_order_relaxed);
    s.peak_allocated_bytes = peak_.load(std::memory_order_relaxed);
    s.cached_bytes = cached_;
    s.pending_bytes = pending_bytes_;
    s.limit_bytes = limit_;
    s.hits = hits_;
    s.misses = misses_;
    s.allocations = allocations_.load(std::memory_order_relaxed);
    return s;
  }

  void ResetPeak() override { peak_.store(allocated_.load(std::memory_order_relaxed), std::memory_order_relaxed); }

  void ReleaseCached() override {
    std::lock_guard<std::mutex> lock(mu_);
    CollectPendingLocked();
    TrimLocked(0);
  }

  void SetCacheLimit(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = bytes < 0 ? 0 : bytes;
    TrimLocked(limit_);
  }

 private:
  struct PendingBlock {
    void* p;
    size_t rounded;
    Stream* stream;
    std::vector<std::shared_ptr<Event>> events;
  };

  size_t Rounded(size_t n) const { return (n + options_.granule - 1) / options_.granule * options_.granule; }

  void CountAllocated(int64_t bytes) {
    const int64_t now = allocated_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  // Caches a free block (or frees it when the cache is full). Caller holds mu_.
  void KeepLocked(void* p, size_t r, Stream* stream) {
    if (cached_ + static_cast<int64_t>(r) > limit_) {
      raw_->Free(p, r);
      return;
    }
    free_[{stream, r}].push_back(p);
    cached_ += static_cast<int64_t>(r);
  }

  // Moves the pending blocks whose events all completed into the cache. Caller holds mu_.
  void CollectPendingLocked() {
    for (size_t i = 0; i < pending_.size();) {
      PendingBlock& b = pending_[i];
      bool done = true;
      for (const std::shared_ptr<Event>& e : b.events) done = done && e->Query();
      if (!done) {
        ++i;
        continue;
      }
      pending_bytes_ -= static_cast<int64_t>(b.rounded);
      PendingBlock ready = std::move(b);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
      try {
        KeepLocked(ready.p, ready.rounded, ready.stream);
      } catch (...) {
        raw_->Free(ready.p, ready.rounded);
      }
    }
  }

  // Frees cached blocks until at most `keep` bytes remain. Caller holds mu_.
  void TrimLocked(int64_t keep) {
    for (auto it = free_.begin(); it != free_.end() && cached_ > keep;) {
      std::vector<void*>& blocks = it->second;
      while (!blocks.empty() && cached_ > keep) {
        raw_->Free(blocks.back(), it->first.second);
        blocks.pop_back();
        cached_ -= static_cast<int64_t>(it->first.second);
      }
      it = blocks.empty() ? free_.erase(it) : std::next(it);
    }
  }

  std::unique_ptr<RawMemory> raw_;
  CachingAllocatorOptions options_;
  mutable std::mutex mu_;
  std::map<std::pair<Stream*, size_t>, std::vector<void*>> free_;
  std::vector<PendingBlock> pending_;
  int64_t cached_ = 0, pending_bytes_ = 0, limit_ = 0, hits_ = 0, misses_ = 0;
  std::atomic<int64_t> allocated_{0}, peak_{0}, allocations_{0};
};

class HostMemory final : public RawMemory {
 public:
  Device device() const override { return Device::Host(); }
  void* Allocate(size_t bytes) override { return ::operator new(bytes, std::nothrow); }
  void Free(void* p, size_t) override { ::operator delete(p); }
};

int64_t InitialHostLimit() {
  if (const char* env = std::getenv("MESHFLOW_HOST_CACHE_MB")) {
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && mb >= 0 && mb < (int64_t{1} << 40)) return mb << 20;
  }
  return HostCacheDefaultLimit();
}

}  // namespace

std::unique_ptr<Allocator> NewCachingAllocator(std::unique_ptr<RawMemory> raw, CachingAllocatorOptions options) {
  return std::make_unique<CachingAllocator>(std::move(raw), options);
}

int64_t HostCacheDefaultLimit() { return kAsan ? 0 : int64_t{1} << 30; }

Allocator& HostAllocator() {
  static Allocator* host = NewCachingAllocator(std::make_unique<HostMemory>(),
                                               CachingAllocatorOptions{.min_cached_bytes = kHostCacheMinBytes,
                                                                       .granule = 4096,
                                                                       .limit_bytes = InitialHostLimit()})
                               .release();
  return *host;
}

}  // namespace meshflow
