#include "meshflow/runtime/buffer_pool.h"

#include <algorithm>
#include <utility>

namespace meshflow {

TensorBuffer BufferPool::Take(int64_t bytes) {
  const size_t want = static_cast<size_t>(bytes);
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i) {
    if (free_[i].capacity() >= want && (best == free_.size() || free_[i].capacity() < free_[best].capacity())) {
      best = i;
    }
  }
  TensorBuffer out;
  if (best < free_.size()) {
    out = std::move(free_[best]);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
  } else if (want > 0) {
    ++allocations_;
  }
  out.resize(want);  // within capacity for a pooled buffer: no allocation, no zero-fill
  return out;
}

void BufferPool::Give(TensorBuffer buffer) {
  if (buffer.capacity() == 0) return;
  free_.push_back(std::move(buffer));
  if (free_.size() <= kMaxBuffers) return;
  auto smallest = std::min_element(free_.begin(), free_.end(), [](const TensorBuffer& a, const TensorBuffer& b) {
    return a.capacity() < b.capacity();
  });
  free_.erase(smallest);
}

int64_t BufferPool::capacity_bytes() const {
  int64_t n = 0;
  for (const TensorBuffer& b : free_) n += static_cast<int64_t>(b.capacity());
  return n;
}

}  // namespace meshflow
