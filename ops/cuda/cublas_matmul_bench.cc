// cublas_matmul_bench: cuBLAS GEMM throughput of CudaMatmulDevice on device buffers.
//
//   bazel run -c opt //ops/cuda:cublas_matmul_bench -- [SIZE [ITERS]]     (default 4096, 20)
//
// Prints TFLOP/s (2*m*n*k / time, cudaEvent timing over ITERS back-to-back calls after 3 warm-ups)
// for f32 (CUBLAS_COMPUTE_32F), f32 with TF32 tensor cores, and f64, for a SIZE^3 GEMM. Exits 1 with a
// message when there is no CUDA device or a call fails.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "meshflow/cuda/cuda_status.h"
#include "meshflow/ops/cuda/cublas_matmul.h"

namespace meshflow {
namespace {

StatusOr<double> Measure(int64_t size, int iters, DType dtype, bool tf32) {
  const int64_t es = DTypeSize(dtype);
  const size_t bytes = static_cast<size_t>(size * size * es);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&a, bytes), "cudaMalloc", "bench"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&b, bytes), "cudaMalloc", "bench"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&c, bytes), "cudaMalloc", "bench"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaMemset(a, 0, bytes), "cudaMemset", "bench"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaMemset(b, 0, bytes), "cudaMemset", "bench"));
  cudaStream_t stream = nullptr;
  MF_RETURN_IF_ERROR(CheckCuda(cudaStreamCreate(&stream), "cudaStreamCreate", "bench"));
  const int64_t shape[] = {size, size};
  CudaMatmulOptions opts;
  opts.allow_tf32 = tf32;
  for (int i = 0; i < 3; ++i) MF_RETURN_IF_ERROR(CudaMatmulDevice(a, shape, b, shape, c, dtype, stream, opts));
  cudaEvent_t start, stop;
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventCreate(&start), "cudaEventCreate", "bench"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventCreate(&stop), "cudaEventCreate", "bench"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord", "bench"));
  for (int i = 0; i < iters; ++i) MF_RETURN_IF_ERROR(CudaMatmulDevice(a, shape, b, shape, c, dtype, stream, opts));
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord", "bench"));
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventSynchronize(stop), "cudaEventSynchronize", "bench"));
  float ms = 0;
  MF_RETURN_IF_ERROR(CheckCuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", "bench"));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  const double seconds = ms / 1e3 / iters;
  return 2.0 * static_cast<double>(size) * size * size / seconds / 1e12;
}

int Main(int argc, char** argv) {
  const int64_t size = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  if (size < 1 || iters < 1) {
    std::fprintf(stderr, "cublas_matmul_bench: bad SIZE %lld or ITERS %d\n", static_cast<long long>(size), iters);
    return 2;
  }
  const std::string reason = NoCudaDeviceReason();
  if (!reason.empty()) {
    std::fprintf(stderr, "cublas_matmul_bench: %s\n", reason.c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  std::printf("# cuBLAS GEMM %lldx%lldx%lld, %d iterations, device 0: %s\n", static_cast<long long>(size),
              static_cast<long long>(size), static_cast<long long>(size), iters, prop.name);
  std::printf("# %-28s %10s\n", "type", "TFLOP/s");
  struct Row {
    const char* name;
    DType dtype;
    bool tf32;
  };
  for (const Row& r : {Row{"f32 (CUBLAS_COMPUTE_32F)", DType::kF32, false}, Row{"f32 (TF32 tensor cores)", DType::kF32, true},
                       Row{"f64", DType::kF64, false}}) {
    auto t = Measure(size, iters, r.dtype, r.tf32);
    if (!t.ok()) {
      std::fprintf(stderr, "cublas_matmul_bench: %s\n", t.status().ToString().c_str());
      return 1;
    }
    std::printf("  %-28s %10.1f\n", r.name, *t);
  }
  return 0;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
