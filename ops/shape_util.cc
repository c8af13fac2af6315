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

}  // namespace meshflow
