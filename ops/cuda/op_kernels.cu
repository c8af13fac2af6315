// The op kernels of CudaOpKernels: every body of ops/elementwise.h as a grid-stride __global__
// kernel (one instantiation per body and element type), and cub's stable radix sort for
// embedding_grad.
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "meshflow/cuda/grid.h"
#include "meshflow/ops/cuda/op_kernels_launch.h"
#include "meshflow/ops/elementwise.h"

namespace meshflow {
namespace op_kernels_internal {
namespace {

using cuda_grid::Blocks;
using cuda_grid::kThreads;

template <class F, class A>
__global__ void GridStride(A args, int64_t n) {
  const F f{};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    f(args, i);
  }
}

// The executor of elementwise::DispatchBody: one launch per body.
struct CudaExec {
  cudaStream_t stream;
  template <class F, class A>
  void Run(const A& args, int64_t n) {
    GridStride<F, A><<<Blocks(n), kThreads, 0, stream>>>(args, n);
  }
};

}  // namespace

cudaError_t LaunchBody(elementwise::Body body, const void* args, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  CudaExec exec{stream};
  elementwise::DispatchBody(exec, body, args, n);
  return cudaGetLastError();
}

cudaError_t SortPairsTempBytes(int64_t n, int key_bits, size_t* bytes) {
  *bytes = 0;
  return cub::DeviceRadixSort::SortPairs(nullptr, *bytes, static_cast<const int64_t*>(nullptr),
                                         static_cast<int64_t*>(nullptr), static_cast<const int64_t*>(nullptr),
                                         static_cast<int64_t*>(nullptr), n, 0, key_bits);
}

cudaError_t LaunchSortPairs(void* temp, size_t temp_bytes, const int64_t* keys_in, int64_t* keys_out,
                            const int64_t* values_in, int64_t* values_out, int64_t n, int key_bits,
                            cudaStream_t stream) {
  return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, values_in, values_out, n, 0, key_bits,
                                         stream);
}

}  // namespace op_kernels_internal
}  // namespace meshflow
