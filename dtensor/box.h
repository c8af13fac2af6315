// Box: a hyper-rectangle of tensor indices, one half-open interval per tensor dim.
//
// Every local shard of a DTensor is a box of the global tensor (see Layout::LocalBoxAt in
// layout.h).
#ifndef MESHFLOW_DTENSOR_BOX_H_
#define MESHFLOW_DTENSOR_BOX_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace meshflow {

struct Interval {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive; end >= begin
  constexpr int64_t size() const { return end - begin; }
  constexpr bool empty() const { return end <= begin; }
  friend bool operator==(const Interval&, const Interval&) = default;
};

// torch.chunk of [iv.begin, iv.end) into k parts: chunk = ceil(len/k); part i is
// [begin + i*chunk, min(end, begin + (i+1)*chunk)), clipped (possibly empty).
// Precondition: k >= 1, 0 <= i < k.
constexpr Interval ChunkOf(Interval iv, int64_t k, int64_t i) {
  const int64_t len = iv.size();
  const int64_t chunk = (len + k - 1) / k;
  const int64_t b = iv.begin + i * chunk < iv.end ? iv.begin + i * chunk : iv.end;
  const int64_t e = b + chunk < iv.end ? b + chunk : iv.end;
  return Interval{b, e};
}

struct Box {
  std::vector<int64_t> offset;  // global index of the first element
  std::vector<int64_t> shape;   // extent per dim (>= 0)

  int rank() const { return static_cast<int>(shape.size()); }
  // The product of the extents; saturates at INT64_MAX (INT64_MIN for a negative product) where
  // it would overflow, so boxes from untrusted input (checkpoint metadata) cannot cause UB.
  int64_t NumElements() const;
  // offset[d] + shape[d], or nullopt when that overflows int64.
  std::optional<int64_t> End(int d) const;
  bool empty() const { return NumElements() == 0; }
  Interval dim(int d) const { return Interval{offset[d], offset[d] + shape[d]}; }
  bool Contains(std::span<const int64_t> index) const;
  // "[0:2, 3:4]": offset:end per dim, the end computed without overflow (a crafted box may end
  // past INT64_MAX; it prints exactly).
  std::string ToString() const;
  friend bool operator==(const Box&, const Box&) = default;
};

// The whole tensor of `shape`.
Box FullBox(std::span<const int64_t> shape);
// Intersection of two boxes of equal rank; an empty box (shape all zeros where disjoint, offset
// clamped) when they do not overlap. No overflow for any offsets and extents.
Box Intersect(const Box& a, const Box& b);

}  // namespace meshflow

#endif  // MESHFLOW_DTENSOR_BOX_H_
