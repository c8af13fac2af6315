// The per-instruction-set builds of the vectorized f32 loops behind ops/cpu_vector.h:
// cpu_vector_impl.cc is compiled once per level (ops/BUILD.bazel: -march=x86-64-v4, x86-64-v3 and
// the baseline, each into its own namespace) and cpu_vector.cc dispatches. Internal to ops/.
#ifndef MESHFLOW_OPS_CPU_VECTOR_IMPL_H_
#define MESHFLOW_OPS_CPU_VECTOR_IMPL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>

#include "meshflow/ops/op_kinds.h"

#define MF_CPU_VECTOR_DECLARE(ns)                                                         \
  namespace meshflow::ns {                                                                \
  bool UnaryF32(UnaryOp op, const float* x, float* y, int64_t n, float a);                \
  void SoftmaxRowsF32(const float* x, float* y, int64_t rows, int64_t n, bool log);       \
  float ExpF32(float x);                                                                  \
  double SumF32(const float* x, int64_t n);                                               \
  void NormRowsF32(NormKind kind, const float* x, const float* w, const float* b, float* y, \
                   int64_t rows, int64_t n, double eps);                                  \
  }

MF_CPU_VECTOR_DECLARE(cpu_vector_v4)
MF_CPU_VECTOR_DECLARE(cpu_vector_v3)
MF_CPU_VECTOR_DECLARE(cpu_vector_baseline)

#undef MF_CPU_VECTOR_DECLARE

#endif  // MESHFLOW_OPS_CPU_VECTOR_IMPL_H_
