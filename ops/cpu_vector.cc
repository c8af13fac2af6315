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

namespace {

// One level's build of the loops (cpu_vector_impl.h).
struct LevelImpl {
  bool (*unary)(UnaryOp, const float*, float*, int64_t, float);
  void (*softmax_rows)(const float*, float*, int64_t, int64_t, bool);
  double (*sum)(const float*, int64_t);
  void (*norm_rows)(NormKind, const float*, const float*, const float*, float*, int64_t, int64_t, double);
  float (*exp)(float);
};

#define MF_LEVEL_IMPL(ns) \
  LevelImpl { ns::UnaryF32, ns::SoftmaxRowsF32, ns::SumF32, ns::NormRowsF32, ns::ExpF32 }
constexpr LevelImpl kV4 = MF_LEVEL_IMPL(cpu_vector_v4);
constexpr LevelImpl kV3 = MF_LEVEL_IMPL(cpu_vector_v3);
constexpr LevelImpl kBaseline = MF_LEVEL_IMPL(cpu_vector_baseline);
#undef MF_LEVEL_IMPL

// The active level's loops; nullptr at kScalar (the callers' scalar loops run).
const LevelImpl* ActiveImpl() {
  switch (ActiveCpuVectorLevel()) {
    case CpuVectorLevel::kAvx512: return &kV4;
    case CpuVectorLevel::kAvx2: return &kV3;
    case CpuVectorLevel::kBaseline: return &kBaseline;
    case CpuVectorLevel::kScalar: break;
  }
  return nullptr;
}

}  // namespace

bool VectorUnaryF32(UnaryOp op, const float* x, float* y, int64_t n, float a) {
  const LevelImpl* impl = ActiveImpl();
  return impl != nullptr && impl->unary(op, x, y, n, a);
}

bool VectorSoftmaxRowsF32(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  const LevelImpl* impl = ActiveImpl();
  if (impl == nullptr) return false;
  impl->softmax_rows(x, y, rows, n, log);
  return true;
}

bool VectorSumF32(const float* x, int64_t n, double* sum) {
  const LevelImpl* impl = ActiveImpl();
  if (impl == nullptr) return false;
  *sum = impl->sum(x, n);
  return true;
}

bool VectorNormRowsF32(NormKind kind, const float* x, const float* w, const float* b, float* y, int64_t rows,
                       int64_t n, double eps) {
  const LevelImpl* impl = ActiveImpl();
  if (impl == nullptr) return false;
  impl->norm_rows(kind, x, w, b, y, rows, n, eps);
  return true;
}

float VectorExpF32(float x) {
  const LevelImpl* impl = ActiveImpl();
  return (impl != nullptr ? impl : &kBaseline)->exp(x);
}

}  // namespace meshflow
