// Raw launchers of meshflow's CUDA byte kernels (device_kernels.cu), compiled by nvcc.
//
// Overview. This header is shared by the .cu file (built by nvcc through a Bazel genrule) and the
// C++ wrappers in device_kernels.h, which validate arguments and turn cudaError_t into Status. It
// uses only plain types so that nvcc never sees meshflow's C++20 headers. Call the wrappers in
// device_kernels.h, not these.
//
//   BoxCopyArgs a;  // shapes, offsets and extent of a row-major region copy (rank <= kMaxBoxRank)
//   cudaError_t e = LaunchBoxCopy(a, stream);
#ifndef MESHFLOW_RUNTIME_CUDA_DEVICE_KERNELS_LAUNCH_H_
#define MESHFLOW_RUNTIME_CUDA_DEVICE_KERNELS_LAUNCH_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshflow {
namespace device_kernels_internal {

constexpr int kMaxBoxRank = 8;
constexpr int kMaxFillBytes = 64;

// Copy of the region `extent` of `src` (row-major, src_shape, starting at src_offset) to `dst`
// (row-major, dst_shape, at dst_offset); elements of elem_size bytes. rank 0 copies one element.
struct BoxCopyArgs {
  const void* src = nullptr;
  void* dst = nullptr;
  int rank = 0;
  int64_t elem_size = 0;
  int64_t src_shape[kMaxBoxRank] = {};
  int64_t src_offset[kMaxBoxRank] = {};
  int64_t dst_shape[kMaxBoxRank] = {};
  int64_t dst_offset[kMaxBoxRank] = {};
  int64_t extent[kMaxBoxRank] = {};
};
cudaError_t LaunchBoxCopy(const BoxCopyArgs& args, cudaStream_t stream);

// Sets `count` elements of `elem_size` (1..kMaxFillBytes) bytes at dst to value[0..elem_size).
// A value whose bytes are all equal is one cudaMemsetAsync; otherwise a kernel that stores whole
// elements (1, 2, 4, 8, 16 bytes, when dst is aligned to them) or bytes.
struct FillArgs {
  void* dst = nullptr;
  int64_t count = 0;
  int64_t elem_size = 0;
  unsigned char value[kMaxFillBytes] = {};
};
cudaError_t LaunchFill(const FillArgs& args, cudaStream_t stream);

// Element-wise rank-order reduction: out[i] = op over r = 0..n-1 of in[r * stride + i], i < count.
// dtype and op are the integer values of meshflow::DType (f32, f64, bf16, i32, i64 = 0..4) and
// meshflow::ReduceOp (sum, avg, max, min = 0..3); semantics of collectives/reduce.h.
cudaError_t LaunchReduceStrided(const void* in, int64_t n, int64_t stride, int64_t count, void* out, int dtype, int op,
                                cudaStream_t stream);

}  // namespace device_kernels_internal
}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_CUDA_DEVICE_KERNELS_LAUNCH_H_
