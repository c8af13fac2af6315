#include "meshflow/ops/cpu_vector.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "meshflow/ops/cpu_vector_impl.h"

namespace meshflow {
namespace {

CpuVectorLevel DetectBest() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512cd");
  return avx512 ? CpuVectorLevel::kAvx512 : avx2 ? CpuVectorLevel::kAvx2 : CpuVectorLevel::kBaseline;
#else
  return CpuVectorLevel::kBaseline;
#endif
}

// The environment's cap (MESHFLOW_CPU_VECTOR), never above the CPU's best; an unknown value is
// ignored with a message.
CpuVectorLevel InitialLevel() {
  const CpuVectorLevel best = BestCpuVectorLevel();
  const char* env = std::getenv("MESHFLOW_CPU_VECTOR");
  if (env == nullptr || *env == '\0') return best;
  for (CpuVectorLevel l :
       {CpuVectorLevel::kScalar, CpuVectorLevel::kBaseline, CpuVectorLevel::kAvx2, CpuVectorLevel::kAvx512}) {
    if (CpuVectorLevelName(l) == env) return l < best ? l : best;
  }
  std::fprintf(stderr, "meshflow: ignoring MESHFLOW_CPU_VECTOR='%s' (want scalar, baseline, avx2 or avx512)\n", env);
  return best;
}

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(InitialLevel())};
  return level;
}

}  // namespace

std::string_view CpuVectorLevelName(CpuVectorLevel level) {
  switch (level) {
    case CpuVectorLevel::kScalar: return "scalar";
    case CpuVectorLevel::kBaseline: return "baseline";
    case CpuVectorLevel::kAvx2: return "avx2";
    case CpuVectorLevel::kAvx512: return "avx512";
  }
  return "?";
}

CpuVectorLevel BestCpuVectorLevel() {
  static const CpuVectorLevel best = DetectBest();
  return best;
}

CpuVectorLevel ActiveCpuVectorLevel() { return static_cast<CpuVectorLevel>(Level().load(std::memory_order_relaxed)); }

Status SetCpuVectorLevel(CpuVectorLevel level) {
  if (level > BestCpuVectorLevel()) {
    return FailedPreconditionError("SetCpuVectorLevel: " + std::string(CpuVectorLevelName(level)) +
                                   " is above this CPU's best level, " +
                                   std::string(CpuVectorLevelName(BestCpuVectorLevel())));
  }
  Level().store(static_cast<int>(level), std::memory_order_relaxed);
  return Status::Ok();
}

bool VectorUnaryF32(UnaryOp op, const float* x, float* y, int64_t n, float a) {
  switch (ActiveCpuVectorLevel()) {
    case CpuVectorLevel::kAvx512: return cpu_vector_v4::UnaryF32(op, x, y, n, a);
    case CpuVectorLevel::kAvx2: return cpu_vector_v3::UnaryF32(op, x, y, n, a);
    case CpuVectorLevel::kBaseline: return cpu_vector_baseline::UnaryF32(op, x, y, n, a);
    case CpuVectorLevel::kScalar: break;
  }
  return false;
}

bool VectorSoftmaxRowsF32(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  switch (ActiveCpuVectorLevel()) {
    case CpuVectorLevel::kAvx512: cpu_vector_v4::SoftmaxRowsF32(x, y, rows, n, log); return true;
    case CpuVectorLevel::kAvx2: cpu_vector_v3::SoftmaxRowsF32(x, y, rows, n, log); return true;
    case CpuVectorLevel::kBaseline: cpu_vector_baseline::SoftmaxRowsF32(x, y, rows, n, log); return true;
    case CpuVectorLevel::kScalar: break;
  }
  return false;
}

bool VectorSumF32(const float* x, int64_t n, double* sum) {
  switch (ActiveCpuVectorLevel()) {
    case CpuVectorLevel::kAvx512: *sum = cpu_vector_v4::SumF32(x, n); return true;
    case CpuVectorLevel::kAvx2: *sum = cpu_vector_v3::SumF32(x, n); return true;
    case CpuVectorLevel::kBaseline: *sum = cpu_vector_baseline::SumF32(x, n); return true;
    case CpuVectorLevel::kScalar: break;
  }
  return false;
}

bool VectorNormRowsF32(NormKind kind, const float* x, const float* w, const float* b, float* y, int64_t rows,
                       int64_t n, double eps) {
  switch (ActiveCpuVectorLevel()) {
    case CpuVectorLevel::kAvx512: cpu_vector_v4::NormRowsF32(kind, x, w, b, y, rows, n, eps); return true;
    case CpuVectorLevel::kAvx2: cpu_vector_v3::NormRowsF32(kind, x, w, b, y, rows, n, eps); return true;
    case CpuVectorLevel::kBaseline: cpu_vector_baseline::NormRowsF32(kind, x, w, b, y, rows, n, eps); return true;
    case CpuVectorLevel::kScalar: break;
  }
  return false;
}

float VectorExpF32(float x) {
  switch (ActiveCpuVectorLevel()) {
    case CpuVectorLevel::kAvx512: return cpu_vector_v4::ExpF32(x);
    case CpuVectorLevel::kAvx2: return cpu_vector_v3::ExpF32(x);
    case CpuVectorLevel::kBaseline:
    case CpuVectorLevel::kScalar: break;
  }
  return cpu_vector_baseline::ExpF32(x);
}

}  // namespace meshflow
