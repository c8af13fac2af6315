// Host block cache: where every Tensor's bytes (TensorBuffer) come from.
//
// Every meshflow op returns a new tensor, so a training step allocates and frees the same large
// blocks again and again. glibc serves blocks above its mmap threshold (128 KiB at first) with
// mmap and returns them on free, and trims freed heap memory of its per-thread arenas, so every
// step faulted in fresh pages: more than half of the 2-layer MLP step of bench/train_bench on one
// rank went to page faults and zero-fill in the kernel. This cache keeps freed blocks of
// >= kHostCacheMinBytes (sizes rounded up to 4 KiB) and hands them out again for the same rounded
// size, as PyTorch's caching allocator does for GPU memory; smaller blocks go straight to
// operator new / delete. Thread-safe (one mutex; a block freed by one thread may serve another).
//
// The cache holds at most limit_bytes of freed blocks (default 1 GiB, or MESHFLOW_HOST_CACHE_MB
// from the environment at first use; 0 turns it off); a freed block that does not fit is
// released. Cached memory stays with the process until ReleaseHostCache(). Under AddressSanitizer
// the default is 0, so that a use after free is still reported.
//
//   HostCacheStats s = GetHostCacheStats();   // s.hits, s.misses, s.cached_bytes, s.limit_bytes
//   ReleaseHostCache();                       // give every cached block back
//   SetHostCacheLimit(0);                     // no caching from now on
#ifndef MESHFLOW_DTENSOR_HOST_CACHE_H_
#define MESHFLOW_DTENSOR_HOST_CACHE_H_

#include <cstddef>
#include <cstdint>

namespace meshflow {

inline constexpr size_t kHostCacheMinBytes = size_t{64} << 10;

struct HostCacheStats {
  int64_t cached_bytes = 0;  // freed blocks held now
  int64_t limit_bytes = 0;
  int64_t hits = 0;          // allocations served from the cache
  int64_t misses = 0;        // cacheable allocations that found no block
};

HostCacheStats GetHostCacheStats();
// The limit a process starts with when MESHFLOW_HOST_CACHE_MB is not set: 1 GiB, or 0 in a build
// with AddressSanitizer.
int64_t HostCacheDefaultLimit();
// Frees every cached block (blocks in use are not affected).
void ReleaseHostCache();
// Sets the limit (bytes; < 0 is taken as 0) and frees cached blocks above it.
void SetHostCacheLimit(int64_t bytes);

namespace tensor_internal {
// Storage of `bytes` bytes, aligned as operator new aligns; release with DeallocateHostBytes and
// the same size.
void* AllocateHostBytes(size_t bytes);
void DeallocateHostBytes(void* p, size_t bytes) noexcept;
}  // namespace tensor_internal

}  // namespace meshflow

#endif  // MESHFLOW_DTENSOR_HOST_CACHE_H_
