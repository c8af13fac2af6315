// Allocators: where a device's bytes come from, with a cache of freed blocks and memory statistics.
//
// Every Tensor's storage (dtensor/tensor_buffer.h) comes from the Allocator of its device. Each
// device has one CachingAllocator (PyTorch's caching allocator, in small): freed blocks of at least
// min_cached_bytes are kept, by rounded size and by stream, and serve the next allocation of that
// size on that stream, so a training step that frees and allocates the same large blocks again and
// again touches no new memory (on the host, more than half of a small MLP step once went to page
// faults of fresh blocks). The raw memory under it is a RawMemory: operator new on the host,
// cudaMalloc on a CUDA device (runtime/cuda/).
//
// Streams. A block allocated for a stream (Allocate(bytes, stream)) may be reused, once freed, by
// later allocations for the same stream without any synchronization: the stream runs its work in
// order. A block that another stream used too (RecordStream on its TensorBuffer) is reused only
// after an event recorded at the free on each such stream completed. Blocks allocated without a
// stream (host tensors: host work is synchronous or owns its buffers) form one pool.
//
//   Allocator& host = HostAllocator();
//   MF_ASSIGN_OR_RETURN(void* p, host.Allocate(1 << 20));
//   host.Deallocate(p, 1 << 20);                    // kept: the next 1 MiB allocation reuses it
//   MemoryStats s = host.stats();                   // allocated, peak, cached, hits, misses
//   host.SetCacheLimit(0);                          // no caching from now on (frees the cache)
//
// The host cache holds at most 1 GiB of freed blocks by default (MESHFLOW_HOST_CACHE_MB in the
// environment at first use; 0 under AddressSanitizer, so that a use after free is still reported).
//
// Errors: Allocate returns RESOURCE_EXHAUSTED naming the device and the size when the raw memory
// is out (after freeing the cache and trying once more).
#ifndef MESHFLOW_RUNTIME_ALLOCATOR_H_
#define MESHFLOW_RUNTIME_ALLOCATOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "meshflow/base/status.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // bytes of live allocations (as requested)
  int64_t peak_allocated_bytes = 0;  // max of allocated_bytes since creation or ResetPeak()
  int64_t cached_bytes = 0;          // freed blocks kept for reuse (rounded sizes)
  int64_t pending_bytes = 0;         // freed blocks waiting for other streams' events
  int64_t limit_bytes = 0;           // cap on cached_bytes
  int64_t hits = 0;                  // cacheable allocations served from the cache
  int64_t misses = 0;                // cacheable allocations that found no block
  int64_t allocations = 0;           // Allocate calls of > 0 bytes
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // `bytes` bytes on device(), for use in `stream`'s order (null: no stream). nullptr for 0 bytes.
  virtual StatusOr<void*> Allocate(int64_t bytes, Stream* stream = nullptr) = 0;
  // Gives back a block of Allocate(bytes, stream) (same bytes and stream). `other_uses`: streams
  // other than `stream` that used it; the block is reused only after the work enqueued on them so
  // far has run.
  virtual void Deallocate(void* p, int64_t bytes, Stream* stream = nullptr,
                          std::span<Stream* const> other_uses = {}) noexcept = 0;
  virtual MemoryStats stats() const = 0;
  virtual void ResetPeak() = 0;
  // Frees every cached block (and every pending one whose events completed).
  virtual void ReleaseCached() = 0;
  // Caps the cache (bytes; < 0 is taken as 0) and frees cached blocks above it.
  virtual void SetCacheLimit(int64_t bytes) = 0;
};

// The memory under a CachingAllocator.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual Device device() const = 0;
  // nullptr when out of memory.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* p, size_t bytes) = 0;
};

struct CachingAllocatorOptions {
  size_t min_cached_bytes = 0;  // smaller blocks go straight to the raw memory and back
  size_t granule = 512;         // cached sizes are rounded up to a multiple of this
  int64_t limit_bytes = int64_t{1} << 30;
};

// A thread-safe caching allocator over `raw` (see the file comment).
std::unique_ptr<Allocator> NewCachingAllocator(std::unique_ptr<RawMemory> raw, CachingAllocatorOptions options);

// The host's allocator (operator new; blocks of >= 64 KiB cached by 4 KiB classes). Never
// destroyed: tensors may be freed by static destructors after main.
Allocator& HostAllocator();
// The host cache limit a process starts with when MESHFLOW_HOST_CACHE_MB is not set: 1 GiB, or 0
// in a build with AddressSanitizer.
int64_t HostCacheDefaultLimit();
inline constexpr size_t kHostCacheMinBytes = size_t{64} << 10;

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_ALLOCATOR_H_
