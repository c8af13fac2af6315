// The CPU GEMM: row-major C = A x B on OpenBLAS (Debian's pthread build, kernels chosen for the
// CPU at load time). Every matmul of the CPU kernels (MatmulKernel, hence the batched matmuls and
// the matmuls inside attention) goes through here.
//
// Threads: one BLAS thread per call by default, i.e. per rank (a world of thread ranks or MPI
// processes already fills the cores; a rank that fanned out to every core would oversubscribe
// them). The knob is MESHFLOW_BLAS_THREADS=<n> in the environment (read at the first GEMM) or
// SetBlasThreads(n) at any time; it is process-wide, like OpenBLAS's own setting.
//
//   MF_RETURN_IF_ERROR(SetBlasThreads(4));        // a single-rank program that owns 4 cores
//   MF_RETURN_IF_ERROR(Gemm<float>(m, n, k, a, b, c));   // c[m, n] = a[m, k] x b[k, n]
#ifndef MESHFLOW_OPS_BLAS_H_
#define MESHFLOW_OPS_BLAS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>

#include "meshflow/base/status.h"

namespace meshflow {

// c[m, n] = a[m, k] x b[k, n], dense row-major, c overwritten (not accumulated). T: float or
// double. m, n or k may be 0 (c is then zero-filled when k == 0). Errors: a negative size or one
// above the BLAS's 32-bit index range (INVALID_ARGUMENT, naming the sizes).
template <typename T>
Status Gemm(int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c);

// The number of threads each GEMM may use (>= 1). Errors: n < 1.
Status SetBlasThreads(int n);
int BlasThreads();

// The OpenBLAS kernel set chosen for this CPU (e.g. "Haswell"), for benchmark and log output.
const char* BlasCoreName();

}  // namespace meshflow

#endif  // MESHFLOW_OPS_BLAS_H_
