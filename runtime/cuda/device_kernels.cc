#include "meshflow/runtime/cuda/device_kernels.h"

#include <cstring>
#include <limits>
#include <string>

#include "meshflow/base/strings.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/runtime/cuda/device_kernels_launch.h"

namespace meshflow {

static_assert(kMaxDeviceCopyRank == device_kernels_internal::kMaxBoxRank);
static_assert(kMaxDeviceFillElemSize == device_kernels_internal::kMaxFillBytes);
static_assert(static_cast<int>(DType::kF32) == 0 && static_cast<int>(DType::kF64) == 1 &&
              static_cast<int>(DType::kBF16) == 2 && static_cast<int>(DType::kI32) == 3 &&
              static_cast<int>(DType::kI64) == 4);
static_assert(static_cast<int>(ReduceOp::kSum) == 0 && static_cast<int>(ReduceOp::kAvg) == 1 &&
              static_cast<int>(ReduceOp::kMax) == 2 && static_cast<int>(ReduceOp::kMin) == 3);

Status CopyRegionOnDevice(const void* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                          void* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                          std::span<const int64_t> extent, int64_t elem_size, cudaStream_t stream) {
  const size_t rank = extent.size();
  if (src_shape.size() != rank || src_offset.size() != rank || dst_shape.size() != rank ||
      dst_offset.size() != rank) {
    return InvalidArgumentError("CopyRegionOnDevice: ranks differ: src_shape " + ListString(src_shape) + ", src_offset " +
                                ListString(src_offset) + ", dst_shape " + ListString(dst_shape) + ", dst_offset " +
                                ListString(dst_offset) + ", extent " + ListString(extent));
  }
  if (rank > static_cast<size_t>(kMaxDeviceCopyRank)) {
    return InvalidArgumentError("CopyRegionOnDevice: rank " + std::to_string(rank) + " exceeds " +
                                std::to_string(kMaxDeviceCopyRank));
  }
  if (elem_size < 1) return InvalidArgumentError("CopyRegionOnDevice: elem_size " + std::to_string(elem_size) + " < 1");
  int64_t total = 1;
  for (size_t k = 0; k < rank; ++k) {
    if (extent[k] < 0 || src_offset[k] < 0 || dst_offset[k] < 0 || src_shape[k] < 0 || dst_shape[k] < 0) {
      return InvalidArgumentError("CopyRegionOnDevice: negative size or offset at dim " + std::to_string(k) +
                                  ": src_shape " + ListString(src_shape) + ", src_offset " + ListString(src_offset) +
                                  ", dst_shape " + ListString(dst_shape) + ", dst_offset " + ListString(dst_offset) +
                                  ", extent " + ListString(extent));
    }
    total *= extent[k];
  }
  if (total == 0) return Status();
  for (size_t k = 0; k < rank; ++k) {
    if (src_offset[k] + extent[k] > src_shape[k] || dst_offset[k] + extent[k] > dst_shape[k]) {
      return InvalidArgumentError("CopyRegionOnDevice: region outside its tensor at dim " + std::to_string(k) +
                                  ": src_shape " + ListString(src_shape) + ", src_offset " + ListString(src_offset) +
                                  ", dst_shape " + ListString(dst_shape) + ", dst_offset " + ListString(dst_offset) +
                                  ", extent " + ListString(extent));
    }
  }
  if (src == nullptr || dst == nullptr) {
    return InvalidArgumentError(std::string("CopyRegionOnDevice: ") + (src == nullptr ? "src" : "dst") +
                                " is null for " + std::to_string(total) + " elements");
  }
  device_kernels_internal::BoxCopyArgs a;
  a.src = src;
  a.dst = dst;
  a.rank = static_cast<int>(rank);
  a.elem_size = elem_size;
  for (size_t k = 0; k < rank; ++k) {
    a.src_shape[k] = src_shape[k];
    a.src_offset[k] = src_offset[k];
    a.dst_shape[k] = dst_shape[k];
    a.dst_offset[k] = dst_offset[k];
    a.extent[k] = extent[k];
  }
  return CheckCuda(device_kernels_internal::LaunchBoxCopy(a, stream), "BoxCopyKernel launch",
                   "CopyRegionOnDevice (extent " + ListString(extent) + ")");
}

Status FillOnDevice(void* dst, int64_t count, const void* value_bytes, int64_t elem_size, cudaStream_t stream) {
  if (count < 0) return InvalidArgumentError("FillOnDevice: negative count " + std::to_string(count));
  if (elem_size < 1 || elem_size > kMaxDeviceFillElemSize) {
    return InvalidArgumentError("FillOnDevice: elem_size " + std::to_string(elem_size) + " outside [1, " +
                                std::to_string(kMaxDeviceFillElemSize) + "]");
  }
  if (count == 0) return Status();
  if (count > std::numeric_limits<int64_t>::max() / elem_size) {
    return InvalidArgumentError("FillOnDevice: " + std::to_string(count) + " elements of " +
                                std::to_string(elem_size) + " bytes overflow int64");
  }
  if (dst == nullptr || value_bytes == nullptr) {
    return InvalidArgumentError(std::string("FillOnDevice: ") + (dst == nullptr ? "dst" : "value_bytes") +
                                " is null for " + std::to_string(count) + " elements");
  }
  device_kernels_internal::FillArgs a;
  a.dst = dst;
  a.count = count;
  a.elem_size = elem_size;
  std::memcpy(a.value, value_bytes, static_cast<size_t>(elem_size));
  return CheckCuda(device_kernels_internal::LaunchFill(a, stream), "FillKernel launch",
                   "FillOnDevice (" + std::to_string(count) + " elements of " + std::to_string(elem_size) +
                       " bytes)");
}

Status ReduceOnDevice(const void* in, int n, int64_t stride, int64_t count, void* out, DType dtype, ReduceOp op,
                      cudaStream_t stream) {
  if (n < 1) return InvalidArgumentError("ReduceOnDevice: n = " + std::to_string(n) + " inputs (need >= 1)");
  if (count < 0) return InvalidArgumentError("ReduceOnDevice: negative count " + std::to_string(count));
  if (count == 0) return Status();
  if (stride < count) {
    return InvalidArgumentError("ReduceOnDevice: stride " + std::to_string(stride) + " < count " +
                                std::to_string(count));
  }
  if (in == nullptr || out == nullptr) {
    return InvalidArgumentError(std::string("ReduceOnDevice: ") + (in == nullptr ? "in" : "out") +
                                " is null for count " + std::to_string(count));
  }
  return CheckCuda(device_kernels_internal::LaunchReduceStrided(in, n, stride, count, out, static_cast<int>(dtype),
                                                    static_cast<int>(op), stream),
                   "ReduceKernel launch", "ReduceOnDevice (" + std::string(DTypeName(dtype)) + ", count " +
                                              std::to_string(count) + ")");
}

}  // namespace meshflow
