// Device byte operations, launched on a CUDA stream: box-region copies (pack / unpack), fills and
// rank-order reductions.
//
// Overview. The plan executor (runtime/executor.cc) moves non-contiguous shards by copying box
// regions of row-major tensors (CopyRegion, runtime/region_copy.h) and zero-fills or identity-fills
// buffers; on a CUDA device it does both through the device's runtime (runtime/cuda/cuda_device.h),
// which calls CopyRegionOnDevice and FillOnDevice. Each is one CUDA kernel (device_kernels.cu, built
// by nvcc) with a grid-stride loop over the elements, enqueued on `stream` without any host
// synchronization. ReduceOnDevice folds n equally long device arrays element-wise in rank order
// with exactly the semantics (and bits) of ReduceBuffers in collectives/reduce.h; the NCCL backend
// (collectives/nccl/) uses it for its exact reductions.
//
//   // Pack block [1:3, 2:6] of a device 4x8 f32 tensor into a dense 2x4 device buffer:
//   const int64_t shape[] = {4, 8}, off[] = {1, 2}, ext[] = {2, 4}, zero[] = {0, 0};
//   MF_RETURN_IF_ERROR(CopyRegionOnDevice(d_tensor, shape, off, d_block, ext, zero, ext, 4, stream));
//   // Set the 8 floats of the block to 1.5 (the value is read from host memory during the call):
//   const float one_and_a_half = 1.5f;
//   MF_RETURN_IF_ERROR(FillOnDevice(d_block, 8, &one_and_a_half, sizeof(float), stream));
//
// Errors are reported when the launch fails (Internal, naming the kernel and the CUDA error) or the
// arguments are bad (InvalidArgument, naming the value); kernel faults surface at the next
// synchronization of the stream.
#ifndef MESHFLOW_RUNTIME_CUDA_DEVICE_KERNELS_H_
#define MESHFLOW_RUNTIME_CUDA_DEVICE_KERNELS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"

namespace meshflow {

// Largest tensor rank CopyRegionOnDevice handles.
inline constexpr int kMaxDeviceCopyRank = 8;
// Largest element FillOnDevice handles, in bytes.
inline constexpr int64_t kMaxDeviceFillElemSize = 64;

// Device form of CopyRegion: copies the region `extent` of src (row-major, src_shape, at src_offset)
// to dst (row-major, dst_shape, at dst_offset); elements of elem_size bytes; src and dst are device
// (or managed) pointers and must not overlap. An empty extent copies nothing (null pointers allowed).
// Errors (InvalidArgument): rank mismatch between the spans, rank > kMaxDeviceCopyRank, negative
// sizes or offsets, a region outside its tensor, elem_size < 1, null pointers with a non-empty extent.
Status CopyRegionOnDevice(const void* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                          void* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                          std::span<const int64_t> extent, int64_t elem_size, cudaStream_t stream);

// Each of the `count` elements of `elem_size` bytes at dst (a device or managed pointer) becomes the
// elem_size bytes at `value_bytes` (host memory, read during the call: it may be freed on return).
// A value whose bytes are all equal becomes one cudaMemsetAsync. count == 0 does nothing (null
// pointers allowed). Errors (InvalidArgument): count < 0, elem_size outside [1,
// kMaxDeviceFillElemSize], null dst or value_bytes with count > 0.
Status FillOnDevice(void* dst, int64_t count, const void* value_bytes, int64_t elem_size, cudaStream_t stream);

// out[i] = op over r = 0..n-1 of in[r * stride + i] for i < count (device pointers), with the
// semantics of ReduceBuffers. `out` must not overlap `in`. Errors (InvalidArgument): n < 1,
// count < 0, stride < count, null pointers with count > 0.
Status ReduceOnDevice(const void* in, int n, int64_t stride, int64_t count, void* out, DType dtype, ReduceOp op,
                      cudaStream_t stream);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_CUDA_DEVICE_KERNELS_H_
