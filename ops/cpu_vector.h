// Vectorized f32 loops of the CPU kernels (ops/kernels.cc): the transcendental unary ops and
// softmax rows, whose scalar forms called libm per element (gelu 18 ns/element, softmax two
// double exps per element; bench/README.md, "CPU kernels").
//
// The loops are compiled once per instruction set (cpu_vector_impl.cc built with -march=x86-64-v4
// (AVX-512), x86-64-v3 (AVX2 + FMA) and the x86-64 baseline) and the best level the CPU has is
// used (MESHFLOW_CPU_VECTOR=scalar|baseline|avx2|avx512 or SetCpuVectorLevel caps it); exp is a
// branch-free polynomial (Cody-Waite range reduction, degree-7 Taylor on |r| <= ln2/2) that the
// compiler vectorizes, tanh is 1 - 2 / (exp(2|x|) + 1) with an odd polynomial under |x| < 1/16.
// f64 keeps the scalar libm loops (it is the reference dtype of the tests).
//
// Accuracy (cpu_vector_test, a dense sweep of [-20, 20] against the double forms): exp relative
// 1e-7 over [-87.3, 88.7] (0 below, where results are under FLT_MIN; inf above); the other ops'
// worst absolute errors equal those of the scalar float forms they replace (libm expf / tanhf)
// within 1e-8 (tanh 9.2e-8, gelu 4.3e-7, gelu' 5.6e-7); tanh's relative error near |x| = 1/16 is
// 1.3e-6 (libm: 1.6e-7). Softmax rows: relative 1e-6; log-softmax: absolute 1e-6 (1 + |y|).
// NaN in gives NaN out; +-inf give the limits.
//
//   if (!VectorUnaryF32(UnaryOp::kGelu, x, y, n, 1.0f)) { /* scalar loop */ }
//   if (!VectorSoftmaxRowsF32(x, y, rows, n / rows, /*log=*/false)) { /* scalar loop */ }
#ifndef MESHFLOW_OPS_CPU_VECTOR_H_
#define MESHFLOW_OPS_CPU_VECTOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <string_view>

#include "meshflow/base/status.h"
#include "meshflow/ops/op_kinds.h"

namespace meshflow {

// Instruction-set levels of the vectorized loops, lowest first. kScalar turns them off: the
// kernels run their scalar loops (elementwise.h's per-element math, libm), the reference that the
// vector levels are tested against and that the device kernel bodies match bit for bit.
enum class CpuVectorLevel { kScalar, kBaseline, kAvx2, kAvx512 };
std::string_view CpuVectorLevelName(CpuVectorLevel level);  // "scalar", "baseline", "avx2", "avx512"

// The best level this CPU runs (AVX2 needs AVX2 + FMA + BMI2; AVX-512: F, BW, DQ, VL, CD).
CpuVectorLevel BestCpuVectorLevel();
// The level the loops use now: the best, or MESHFLOW_CPU_VECTOR's (read once), or the last
// SetCpuVectorLevel's. Process-wide.
CpuVectorLevel ActiveCpuVectorLevel();
// Errors: a level above BestCpuVectorLevel() (FAILED_PRECONDITION, naming both).
Status SetCpuVectorLevel(CpuVectorLevel level);

// Each function below returns false (and writes nothing) at level kScalar: the caller's scalar
// loop handles it.
//
// y[i] = op(x[i], a) for the ops whose scalar form calls libm: exp, tanh, gelu, sigmoid, silu
// and the derivatives of gelu, silu, tanh and sigmoid. Returns false (and writes nothing) for
// any other op. x and y may be the same array.
bool VectorUnaryF32(UnaryOp op, const float* x, float* y, int64_t n, float a);

// Softmax (or log-softmax) of `rows` contiguous rows of n elements: max-shifted exp, sum in
// double, scaled by 1 / sum (log: x - max - log(sum)). A row without a finite max shifts by 0,
// as the scalar kernel does. x and y must not overlap.
bool VectorSoftmaxRowsF32(const float* x, float* y, int64_t rows, int64_t n, bool log);

// *sum = the sum of n floats, accumulated in double (8 lanes: the order differs from a sequential
// fold, by at most a few ulp of the double sum).
bool VectorSumF32(const float* x, int64_t n, double* sum);

// Layer norm ((x - mean) / sqrt(var + eps), biased variance) or RMS norm (x / sqrt(mean(x^2) +
// eps)) of `rows` contiguous rows of n elements, then * w + b (each may be nullptr), statistics
// and the affine map in double, as the scalar kernel; x and y must not overlap.
bool VectorNormRowsF32(NormKind kind, const float* x, const float* w, const float* b, float* y, int64_t rows,
                       int64_t n, double eps);

// The scalar-call form of the vector exp, for tests: exactly what the loops compute per element
// (at kScalar: the baseline build's).
float VectorExpF32(float x);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_CPU_VECTOR_H_
