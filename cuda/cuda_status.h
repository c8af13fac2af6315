// CUDA runtime errors as meshflow Status values, and device discovery for tests and tools.
//
// Overview. Every CUDA runtime call in meshflow goes through CheckCuda, which turns a failing
// cudaError_t into a Status whose message names the call, the CUDA error name and string, and where
// it happened:
//
//   MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s), "cudaMemcpyAsync",
//                                "nccl all_gather on group [0,1]"));
//   // INTERNAL: cudaMemcpyAsync failed: cudaErrorInvalidValue (invalid argument) in nccl all_gather ...
//
// CudaDeviceCount() reports how many devices the runtime sees (0 when there is no device or no
// driver, which is not an error: machines without a GPU build and skip), and NoCudaDeviceReason()
// gives tests a one-line skip message.
#ifndef MESHFLOW_CUDA_CUDA_STATUS_H_
#define MESHFLOW_CUDA_CUDA_STATUS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "meshflow/base/status.h"

namespace meshflow {

// OK for cudaSuccess; otherwise a Status naming `call`, the CUDA error and `where`: Unavailable for
// no device, an insufficient driver or out of device memory, Internal for everything else.
Status CheckCuda(cudaError_t e, std::string_view call, std::string_view where);

// Number of CUDA devices visible to this process; 0 (not an error) when the runtime reports no
// device or no usable driver. Errors: any other cudaGetDeviceCount failure (Internal).
StatusOr<int> CudaDeviceCount();

// "" when at least one device is usable, else "no CUDA device: <why>" (for GTEST_SKIP()).
std::string NoCudaDeviceReason();

}  // namespace meshflow

#endif  // MESHFLOW_CUDA_CUDA_STATUS_H_
