#include "meshflow/dtensor/host_cache.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
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

constexpr size_t kGranule = 4096;
constexpr int64_t kDefaultLimit = int64_t{1} << 30;

size_t Rounded(size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }

int64_t InitialLimit() {
  if (const char* env = std::getenv("MESHFLOW_HOST_CACHE_MB")) {
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && mb >= 0 && mb < (int64_t{1} << 40)) return mb << 20;
  }
  return HostCacheDefaultLimit();
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;  // rounded size -> blocks
  int64_t cached = 0;
  int64_t limit = 0;
  int64_t hits = 0;
  int64_t misses = 0;
};

// Never destroyed: tensors may be freed by static destructors after main.
Cache& TheCache() {
  static Cache* cache = [] {
    auto* c = new Cache;
    c->limit = InitialLimit();
    return c;
  }();
  return *cache;
}

// Frees cached blocks until at most `keep` bytes remain. Caller holds c.mu.
void TrimLocked(Cache& c, int64_t keep) {
  for (auto it = c.free.begin(); it != c.free.end() && c.cached > keep;) {
    std::vector<void*>& blocks = it->second;
    while (!blocks.empty() && c.cached > keep) {
      ::operator delete(blocks.back());
      blocks.pop_back();
      c.cached -= static_cast<int64_t>(it->first);
    }
    it = blocks.empty() ? c.free.erase(it) : std::next(it);
  }
}

}  // namespace

int64_t HostCacheDefaultLimit() { return kAsan ? 0 : kDefaultLimit; }

HostCacheStats GetHostCacheStats() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return HostCacheStats{c.cached, c.limit, c.hits, c.misses};
}

void ReleaseHostCache() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  TrimLocked(c, 0);
}

void SetHostCacheLimit(int64_t bytes) {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.limit = bytes < 0 ? 0 : bytes;
  TrimLocked(c, c.limit);
}

namespace tensor_internal {

void* AllocateHostBytes(size_t bytes) {
  if (bytes < kHostCacheMinBytes) return ::operator new(bytes);
  const size_t r = Rounded(bytes);
  Cache& c = TheCache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free.find(r);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.cached -= static_cast<int64_t>(r);
      ++c.hits;
      return p;
    }
    ++c.misses;
  }
  return ::operator new(r);
}

void DeallocateHostBytes(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHostCacheMinBytes) {
    ::operator delete(p);
    return;
  }
  const size_t r = Rounded(bytes);
  Cache& c = TheCache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.cached + static_cast<int64_t>(r) <= c.limit) {
      try {
        c.free[r].push_back(p);
      } catch (...) {
        ::operator delete(p);  // no room for the bookkeeping: release the block instead
        return;
      }
      c.cached += static_cast<int64_t>(r);
      return;
    }
  }
  ::operator delete(p);
}

}  // namespace tensor_internal
}  // namespace meshflow
