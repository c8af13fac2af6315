#include "meshflow/runtime/buffer_pool.h"

#include <algorithm>
#include <utility>

namespace meshflow {

StatusOr<TensorBuffer> BufferPool::Take(int64_t bytes) {
  if (bytes < 0) return InvalidArgumentError("BufferPool::Take: negative size " + std::to_string(bytes));
  const int64_t want = bytes;
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i) {
    if (free_[i].capacity() >= want && (best == free_.size() || free_[i].capacity() < free_[best].capacity())) {
      best = i;
    }
  }
  if (best < free_.size()) {
    TensorBuffer out = std::move(free_[best]);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
    MF_RETURN_IF_ERROR(out.Resize(want));  // within capacity: no allocation, no zero-fill
    return out;
  }
  if (want > 0) ++allocations_;
  return TensorBuffer::Allocate(device_, want, stream_);
}

void BufferPool::Give(TensorBuffer buffer) {
  if (buffer.capacity() == 0 || buffer.device() != device_ || buffer.stream() != stream_) return;
  free_.push_back(std::move(buffer));
  if (free_.size() <= kMaxBuffers) return;
  auto smallest = std::min_element(free_.begin(), free_.end(), [](const TensorBuffer& a, const TensorBuffer& b) {
    return a.capacity() < b.capacity();
  });
  free_.erase(smallest);
}

int64_t BufferPool::capacity_bytes() const {
  int64_t n = 0;
  for (const TensorBuffer& b : free_) n += b.capacity();
  return n;
}

}  // namespace meshflow
