#include "meshflow/dtensor/box.h"

#include <algorithm>
#include <sstream>

namespace meshflow {

int64_t Box::NumElements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool Box::Contains(std::span<const int64_t> index) const {
  if (static_cast<int>(index.size()) != rank()) return false;
  for (int d = 0; d < rank(); ++d) {
    if (index[d] < offset[d] || index[d] >= offset[d] + shape[d]) return false;
  }
  return true;
}

std::string Box::ToString() const {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < rank(); ++d) os << (d ? ", " : "") << offset[d] << ":" << offset[d] + shape[d];
  os << "]";
  return os.str();
}

Box FullBox(std::span<const int64_t> shape) {
  return Box{std::vector<int64_t>(shape.size(), 0), std::vector<int64_t>(shape.begin(), shape.end())};
}

Box Intersect(const Box& a, const Box& b) {
  Box out;
  out.offset.resize(a.shape.size());
  out.shape.resize(a.shape.size());
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    out.offset[d] = lo;
    out.shape[d] = std::max<int64_t>(0, hi - lo);
  }
  return out;
}

}  // namespace meshflow
