// CopyRegion: the host's copy of a box region between two row-major buffers (the executor's pack
// and unpack, Tensor::Slice / Insert). A device's stream-ordered form is DeviceRuntime::CopyRegion
// (runtime/device_runtime.h); the CUDA kernel is CopyRegionOnDevice.
//
//   const int64_t shape[] = {4, 8}, off[] = {1, 2}, ext[] = {2, 4}, zero[] = {0, 0};
//   CopyRegion(src, shape, off, dst, ext, zero, ext, sizeof(float));   // block [1:3, 2:6] -> dst
#ifndef MESHFLOW_RUNTIME_REGION_COPY_H_
#define MESHFLOW_RUNTIME_REGION_COPY_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <span>

namespace meshflow {

// Copies the region `extent` from src (at src_offset) to dst (at dst_offset); both row-major
// with the given shapes. Innermost runs are memcpy'd. Precondition: regions fit.
void CopyRegion(const std::byte* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                std::byte* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                std::span<const int64_t> extent, int64_t elem_size);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_REGION_COPY_H_
