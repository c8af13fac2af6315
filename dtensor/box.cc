#include "meshflow/dtensor/box.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace meshflow {
namespace {

// Decimal text of an __int128 (|v| < 2^127).
std::string Int128ToString(__int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string digits;
  while (u != 0) {
    digits.push_back(static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  if (negative) digits.push_back('-');
  std::reverse(digits.begin(), digits.end());
  return digits;
}

}  // namespace

int64_t Box::NumElements() const {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (__builtin_mul_overflow(n, s, &n)) {
      // Saturates with the sign of the exact product (boxes read from untrusted metadata).
      int sign = 1;
      for (int64_t t : shape) {
        if (t == 0) return 0;
        if (t < 0) sign = -sign;
      }
      return sign > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
    }
  }
  return n;
}

std::optional<int64_t> Box::End(int d) const {
  int64_t end = 0;
  if (__builtin_add_overflow(offset[d], shape[d], &end)) return std::nullopt;
  return end;
}

bool Box::Contains(std::span<const int64_t> index) const {
  if (static_cast<int>(index.size()) != rank()) return false;
  for (int d = 0; d < rank(); ++d) {
    // index - offset < shape, in 128 bits: no overflow for any offset and shape.
    if (index[d] < offset[d] || static_cast<__int128>(index[d]) - offset[d] >= shape[d]) return false;
  }
  return true;
}

std::string Box::ToString() const {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < rank(); ++d) {
    // The end in 128 bits: boxes read from crafted metadata may have offset + shape > INT64_MAX.
    os << (d ? ", " : "") << offset[d] << ":" << Int128ToString(static_cast<__int128>(offset[d]) + shape[d]);
  }
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
    // In 128 bits: no overflow for any offsets and extents; the result fits in int64 (its extent
    // is at most each box's, its offset one of the offsets).
    const __int128 lo = std::max(a.offset[d], b.offset[d]);
    const __int128 hi = std::min(static_cast<__int128>(a.offset[d]) + a.shape[d],
                                 static_cast<__int128>(b.offset[d]) + b.shape[d]);
    out.offset[d] = static_cast<int64_t>(lo);
    out.shape[d] = static_cast<int64_t>(std::max<__int128>(0, hi - lo));
  }
  return out;
}

}  // namespace meshflow
