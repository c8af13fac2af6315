// BufferPool: reusable byte buffers for the plan executor's step outputs and scratch.
//
// A repeated redistribution needs the same buffer sizes every time; taking them from a pool
// instead of the allocator means no per-call mmap and no page touched for the first time in
// steady state (large allocations are served by fresh, zero-filled pages). Buffers come back
// uninitialized: their bytes are whatever the last user left, so a caller must write every byte
// it reads (or clear it). One per RankContext (RankContext::buffers()); used by one thread at a time,
// like the communicators.
//
//   TensorBuffer scratch = pool.Take(bytes);        // scratch.size() == bytes, contents stale
//   ...
//   pool.Give(std::move(scratch));                  // capacity kept for the next Take
#ifndef MESHFLOW_RUNTIME_BUFFER_POOL_H_
#define MESHFLOW_RUNTIME_BUFFER_POOL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

class BufferPool {
 public:
  BufferPool() = default;  // host buffers, no stream
  BufferPool(Device device, std::shared_ptr<Stream> stream) : device_(device), stream_(std::move(stream)) {}

  // Buffers kept at most; giving back one more drops the one with the smallest capacity.
  static constexpr size_t kMaxBuffers = 8;

  // A buffer of exactly `bytes` bytes (unspecified contents): the pooled one with the smallest
  // capacity that holds `bytes`, else a newly allocated one on the pool's device and stream.
  // Errors: a negative size; the allocator's.
  StatusOr<TensorBuffer> Take(int64_t bytes);
  // Keeps `buffer`'s capacity for later Takes (buffers without capacity are dropped).
  void Give(TensorBuffer buffer);
  // Frees every pooled buffer.
  void Clear() { free_.clear(); }

  // Number and total capacity (bytes) of the pooled buffers.
  size_t size() const { return free_.size(); }
  int64_t capacity_bytes() const;
  // Takes of a non-zero size that no pooled buffer could serve (each allocated a new buffer).
  int64_t allocations() const { return allocations_; }

 private:
  Device device_;
  std::shared_ptr<Stream> stream_;
  std::vector<TensorBuffer> free_;
  int64_t allocations_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_BUFFER_POOL_H_
