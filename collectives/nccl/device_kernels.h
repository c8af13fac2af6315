// Device-side pack/unpack of box regions and rank-order reductions, launched on a CUDA stream.
//
// Overview. The plan executor (runtime/executor.cc) moves non-contiguous shards by copying box
// regions of row-major tensors with CopyRegion (dtensor/tensor.h). CopyRegionOnDevice is the same
// operation on device memory: one CUDA kernel (device_kernels.cu, built by nvcc) with one thread per
// element, enqueued on `stream` without any host synchronization. ReduceOnDevice folds n equally
// long device arrays element-wise in rank order with exactly the semantics (and bits) of
// ReduceBuffers in collectives/reduce.h; the NCCL backend uses it for its exact reductions.
//
//   // Pack block [1:3, 2:6] of a device 4x8 f32 tensor into a dense 2x4 device buffer:
//   const int64_t shape[] = {4, 8}, off[] = {1, 2}, ext[] = {2, 4}, zero[] = {0, 0};
//   MF_RETURN_IF_ERROR(CopyRegionOnDevice(d_tensor, shape, off, d_block, ext, zero, ext, 4, stream));
//
// Errors are reported when the launch fails (Internal, naming the kernel and the CUDA error) or the
// arguments are bad (InvalidArgument, naming the value); kernel faults surface at the next
// synchronization of the stream.
#ifndef MESHFLOW_COLLECTIVES_NCCL_DEVICE_KERNELS_H_
#define MESHFLOW_COLLECTIVES_NCCL_DEVICE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"

namespace meshflow {

// Largest tensor rank CopyRegionOnDevice handles.
inline constexpr int kMaxDeviceCopyRank = 8;

// Device form of CopyRegion: copies the region `extent` of src (row-major, src_shape, at src_offset)
// to dst (row-major, dst_shape, at dst_offset); elements of elem_size bytes; src and dst are device
// (or managed) pointers and must not overlap. An empty extent copies nothing (null pointers allowed).
// Errors (InvalidArgument): rank mismatch between the spans, rank > kMaxDeviceCopyRank, negative
// sizes or offsets, a region outside its tensor, elem_size < 1, null pointers with a non-empty extent.
Status CopyRegionOnDevice(const void* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                          void* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                          std::span<const int64_t> extent, int64_t elem_size, cudaStream_t stream);

// out[i] = op over r = 0..n-1 of in[r * stride + i] for i < count (device pointers), with the
// semantics of ReduceBuffers. `out` must not overlap `in`. Errors (InvalidArgument): n < 1,
// count < 0, stride < count, null pointers with count > 0.
Status ReduceOnDevice(const void* in, int n, int64_t stride, int64_t count, void* out, DType dtype, ReduceOp op,
                      cudaStream_t stream);

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_NCCL_DEVICE_KERNELS_H_
