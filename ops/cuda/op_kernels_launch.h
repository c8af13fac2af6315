// Raw launchers of the op kernel bodies (op_kernels.cu, compiled by nvcc).
//
// Overview. Shared by the .cu file (built by nvcc through a Bazel genrule) and CudaOpKernels
// (cuda_op_kernels.cc), which validates arguments, builds the bodies' argument structs
// (ops/shared_kernels.cc) and turns cudaError_t into Status. Only plain types and
// ops/elementwise.h, so that nvcc never sees meshflow's C++20 headers. Use CudaOpKernels
// (cuda_op_kernels.h), not these.
//
//   elementwise::UnaryArgs a{elementwise::ElemType::kF32, UnaryOp::kExp, 1.0, d_x, d_y};
//   cudaError_t e = LaunchBody(elementwise::Body::kUnary, &a, n, stream);  // d_y = exp(d_x)
#ifndef MESHFLOW_OPS_CUDA_OP_KERNELS_LAUNCH_H_
#define MESHFLOW_OPS_CUDA_OP_KERNELS_LAUNCH_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "meshflow/ops/elementwise.h"

namespace meshflow {
namespace op_kernels_internal {

// Runs `body` on `args` (its elementwise::*Args struct, copied into the launch) for items
// [0, n) as one grid-stride kernel on `stream`. Returns the launch's error (n <= 0: nothing).
cudaError_t LaunchBody(elementwise::Body body, const void* args, int64_t n, cudaStream_t stream);

// Stable radix sort of n (key, value) int64 pairs by the key's low key_bits bits (cub): the
// temporary storage it needs, then the sort on `stream`.
cudaError_t SortPairsTempBytes(int64_t n, int key_bits, size_t* bytes);
cudaError_t LaunchSortPairs(void* temp, size_t temp_bytes, const int64_t* keys_in, int64_t* keys_out,
                            const int64_t* values_in, int64_t* values_out, int64_t n, int key_bits,
                            cudaStream_t stream);

}  // namespace op_kernels_internal
}  // namespace meshflow

#endif  // MESHFLOW_OPS_CUDA_OP_KERNELS_LAUNCH_H_
