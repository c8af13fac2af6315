// Shape helpers shared by the sharding rules and the kernels.
//
//   const std::vector<int64_t> a = {5, 1}, b = {3}, c = {5, 2}, d = {7};
//   ShapeString(c)                  -> "[5,2]"
//   BroadcastShapes("add", a, b)    -> {5, 3}
//   BroadcastShapes("add", c, d)    -> INVALID_ARGUMENT: add: shapes [5,2] and [7] do not
//                                      broadcast (sizes 2 vs 7 at broadcast dim 1)
#ifndef MESHFLOW_OPS_SHAPE_UTIL_H_
#define MESHFLOW_OPS_SHAPE_UTIL_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"

namespace meshflow {

std::string ShapeString(std::span<const int64_t> shape);

// Numpy broadcast of two shapes (right-aligned). Errors name `op`, both shapes and the dim.
StatusOr<std::vector<int64_t>> BroadcastShapes(std::string_view op, std::span<const int64_t> a,
                                               std::span<const int64_t> b);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_SHAPE_UTIL_H_
