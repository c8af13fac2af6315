// cuBLAS batched matmul: the GPU counterpart of MatmulKernel (ops/kernels.h).
//
// Overview. Same semantics as the CPU kernel: a [..., m, k] x b [..., k, n] -> [batch..., m, n],
// row-major, rank >= 2, batch dims broadcast like numpy; f32 and f64 (bf16 host tensors are
// computed in f32 and rounded once, like the CPU kernel). Row-major C = A B is computed as the
// column-major product C^T = B^T A^T, so no transposes are materialized. Batches run as one
// cublasGemmStridedBatchedEx when each operand's batch is either full or entirely broadcast (stride
// 0); other broadcast patterns loop over the output batch with one strided call per entry.
// Accumulation: f32 in f32 (CUBLAS_COMPUTE_32F; TF32 tensor cores only with allow_tf32), f64 in f64.
// Results match the CPU kernel (OpenBLAS) up to summation order (tests: relative 1e-5 for f32).
//
//   MF_ASSIGN_OR_RETURN(Tensor c, CudaMatmulKernel(a, b));              // host tensors
//   const int64_t a_shape[] = {8, 64, 32}, b_shape[] = {32, 16};        // d_c: [8, 64, 16]
//   MF_RETURN_IF_ERROR(CudaMatmulDevice(d_a, a_shape, d_b, b_shape, d_c, DType::kF32, stream));
//
// Host entry: allocates device buffers, copies in and out on a per-thread stream and synchronizes.
// Device entry: enqueues on `stream` without host synchronization. Each thread keeps one cuBLAS
// handle per device (created on first use).
#ifndef MESHFLOW_OPS_CUDA_CUBLAS_MATMUL_H_
#define MESHFLOW_OPS_CUDA_CUBLAS_MATMUL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor.h"

namespace meshflow {

struct CudaMatmulOptions {
  // f32 only: let cuBLAS use TF32 tensor cores (10-bit mantissa products; much faster on H100/H200,
  // no longer within 1e-5 of the CPU kernel).
  bool allow_tf32 = false;
};

// Output shape of a [..., m, k] x b [..., k, n]. Errors (InvalidArgument): rank < 2, k mismatch,
// batch dims that do not broadcast.
StatusOr<std::vector<int64_t>> MatmulOutputShape(std::span<const int64_t> a_shape, std::span<const int64_t> b_shape);

// Host tensors in and out. Errors: as MatmulOutputShape; dtype mismatch or an integer dtype
// (InvalidArgument); no CUDA device (Unavailable); CUDA/cuBLAS failures (Internal, naming the call).
StatusOr<Tensor> CudaMatmulKernel(const Tensor& a, const Tensor& b, const CudaMatmulOptions& options = {});

// Device pointers (row-major, dense): c gets MatmulOutputShape(a_shape, b_shape). dtype f32 or f64.
// Errors: as above, plus null pointers for non-empty operands; a dimension above INT_MAX.
Status CudaMatmulDevice(const void* a, std::span<const int64_t> a_shape, const void* b,
                        std::span<const int64_t> b_shape, void* c, DType dtype, cudaStream_t stream,
                        const CudaMatmulOptions& options = {});

}  // namespace meshflow

#endif  // MESHFLOW_OPS_CUDA_CUBLAS_MATMUL_H_
