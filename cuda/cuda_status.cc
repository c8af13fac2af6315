#include "meshflow/cuda/cuda_status.h"

namespace meshflow {

Status CheckCuda(cudaError_t e, std::string_view call, std::string_view where) {
  if (e == cudaSuccess) return Status();
  std::string msg = std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (!where.empty()) msg += " in " + std::string(where);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorMemoryAllocation) {
    return UnavailableError(msg);
  }
  return InternalError(msg);
}

StatusOr<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  (void)cudaGetLastError();  // clear the sticky-free error state of this thread
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return 0;
  return CheckCuda(e, "cudaGetDeviceCount", "");
}

std::string NoCudaDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return "";
  (void)cudaGetLastError();
  if (e == cudaSuccess) return "no CUDA device: cudaGetDeviceCount reports 0 devices";
  return std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(e) + " (" +
         cudaGetErrorString(e) + ")";
}

}  // namespace meshflow
