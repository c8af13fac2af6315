// Shape helpers shared by the sharding rules and the kernels.
//
//   const std::vector<int64_t> a = {5, 1}, b = {3}, c = {5, 2}, d = {7};
//   ShapeString(c)                  -> "[5,2]"
//   BroadcastShapes("add", a, b)    -> {5, 3}
//   BroadcastShapes("add", c, d)    -> INVALID_ARGUMENT: add: shapes [5,2] and [7] do not
//                                      broadcast (sizes 2 vs 7 at broadcast dim 1)
//   RowMajorStrides(c)              -> {2, 1}
//   BroadcastStrides(a, {5, 3})     -> {1, 0}   (a's dim 1 has size 1: broadcast)
//   BroadcastStrides(b, {5, 3})     -> {0, 1}   (b is right-aligned: dim 0 is new)
#ifndef MESHFLOW_OPS_SHAPE_UTIL_H_
#define MESHFLOW_OPS_SHAPE_UTIL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

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

// Element strides of a contiguous row-major tensor of `shape`.
std::vector<int64_t> RowMajorStrides(std::span<const int64_t> shape);

// Element strides of a row-major `s` read as the broadcast shape `out` (s right-aligned against
// out, s.size() <= out.size()): 0 on dims s lacks or has of size 1.
std::vector<int64_t> BroadcastStrides(std::span<const int64_t> s, std::span<const int64_t> out);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_SHAPE_UTIL_H_
