#include "meshflow/ops/blas.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

namespace meshflow {
namespace {

std::once_flag g_init;

// The environment's MESHFLOW_BLAS_THREADS (default 1), applied once before the first GEMM. An
// unparsable or non-positive value is ignored with a message on stderr rather than failing every
// matmul of the process.
void InitThreads() {
  std::call_once(g_init, [] {
    int n = 1;
    if (const char* env = std::getenv("MESHFLOW_BLAS_THREADS"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (*end == '\0' && v >= 1 && v <= 4096) {
        n = static_cast<int>(v);
      } else {
        std::fprintf(stderr, "meshflow: ignoring MESHFLOW_BLAS_THREADS='%s' (want an integer >= 1); using 1\n", env);
      }
    }
    openblas_set_num_threads(n);
  });
}

}  // namespace

template <typename T>
Status Gemm(int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c) {
  if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return InvalidArgumentError("gemm: sizes m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                " k=" + std::to_string(k) + " outside [0, 2^31)");
  }
  if (m == 0 || n == 0) return Status::Ok();
  if (k == 0) {
    std::fill(c, c + m * n, T(0));
    return Status::Ok();
  }
  InitThreads();
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0, a, K, b, N, 0.0, c, N);
  }
  return Status::Ok();
}

template Status Gemm<float>(int64_t, int64_t, int64_t, const float*, const float*, float*);
template Status Gemm<double>(int64_t, int64_t, int64_t, const double*, const double*, double*);

Status SetBlasThreads(int n) {
  if (n < 1) return InvalidArgumentError("SetBlasThreads: need n >= 1, got " + std::to_string(n));
  InitThreads();  // so that a later first GEMM does not reset it from the environment
  openblas_set_num_threads(n);
  return Status::Ok();
}

int BlasThreads() {
  InitThreads();
  return openblas_get_num_threads();
}

const char* BlasCoreName() { return openblas_get_corename(); }

}  // namespace meshflow
