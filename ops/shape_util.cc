#include "meshflow/ops/shape_util.h"

#include <algorithm>

#include "meshflow/base/strings.h"

namespace meshflow {

std::string ShapeString(std::span<const int64_t> s) { return ListString(s); }

StatusOr<std::vector<int64_t>> BroadcastShapes(std::string_view op, std::span<const int64_t> a,
                                               std::span<const int64_t> b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      return InvalidArgumentError(std::string(op) + ": shapes " + ShapeString(a) + " and " + ShapeString(b) +
                                  " do not broadcast (sizes " + std::to_string(da) + " vs " + std::to_string(db) +
                                  " at broadcast dim " + std::to_string(i) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> RowMajorStrides(std::span<const int64_t> shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) st[d - 1] = st[d] * shape[d];
  return st;
}

std::vector<int64_t> BroadcastStrides(std::span<const int64_t> s, std::span<const int64_t> out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t stride = 1;
  const size_t lead = out.size() - s.size();
  for (size_t i = s.size(); i-- > 0;) {
    st[lead + i] = s[i] == 1 ? 0 : stride;
    stride *= s[i];
  }
  return st;
}

}  // namespace meshflow
