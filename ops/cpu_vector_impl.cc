#include "meshflow/ops/cpu_vector_impl.h"

#include <cmath>

#ifndef MF_CPU_VECTOR_NS
#error "compile with -DMF_CPU_VECTOR_NS=<namespace> (ops/BUILD.bazel builds this file once per level)"
#endif

namespace meshflow {
namespace MF_CPU_VECTOR_NS {
namespace {

// Only builtins and functions of internal linkage here: an inline library function (std::fabs,
// std::bit_cast, ...) left out of line at -O0 would be a weak symbol that the linker may take from
// the AVX-512 build of this file for every caller, the baseline one included.
constexpr float kInf = __builtin_inff();

// exp(x): x = n ln2 + r, |r| <= ln2 / 2, exp(r) by its degree-7 Taylor polynomial, 2^n by building
// the exponent bits (n = 128, at the top of the range, as 2^127 * 2). Branch-free so that the
// loops around it vectorize: the range fixes are selects. Above 88.72283 the result is inf; below
// -87.3365 (results under FLT_MIN) it is 0.
inline float ExpCore(float x) {
  float xc = x < -87.3365f ? -87.3365f : x;
  xc = xc > 88.72283f ? 88.72283f : xc;
  const float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float top = n > 127.0f ? 1.0f : 0.0f;
  const int32_t e = (static_cast<int32_t>(n - top) + 127) << 23;
  float y = p * __builtin_bit_cast(float, e) * (1.0f + top);
  y = x > 88.72283f ? kInf : y;
  y = x < -87.3365f ? 0.0f : y;
  y = x != x ? x : y;  // NaN
  return y;
}

inline float TanhCore(float x) {
  const float ax = __builtin_fabsf(x);
  const float e = ExpCore(2.0f * ax);
  float t = 1.0f - 2.0f / (e + 1.0f);
  const float x2 = ax * ax;  // |x| < 1/16: the odd series to x^7 (next term < 1e-10 relative)
  const float small = ax * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f))));
  t = ax < 0.0625f ? small : t;
  return __builtin_copysignf(t, x);
}

inline float SigmoidCore(float v) { return 1.0f / (1.0f + ExpCore(-v)); }

inline float GeluInnerF(float v) { return 0.7978845608028654f * (v + 0.044715f * v * v * v); }

template <UnaryOp kOp>
inline float Apply(float v) {
  if constexpr (kOp == UnaryOp::kExp) {
    return ExpCore(v);
  } else if constexpr (kOp == UnaryOp::kTanh) {
    return TanhCore(v);
  } else if constexpr (kOp == UnaryOp::kGelu) {
    return 0.5f * v * (1.0f + TanhCore(GeluInnerF(v)));
  } else if constexpr (kOp == UnaryOp::kSigmoid) {
    return SigmoidCore(v);
  } else if constexpr (kOp == UnaryOp::kSilu) {
    return v * SigmoidCore(v);
  } else if constexpr (kOp == UnaryOp::kGeluDeriv) {
    const float t = TanhCore(GeluInnerF(v));
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * v * v);
  } else if constexpr (kOp == UnaryOp::kSiluDeriv) {
    const float sg = SigmoidCore(v);
    return sg * (1.0f + v * (1.0f - sg));
  } else if constexpr (kOp == UnaryOp::kTanhDeriv) {
    const float t = TanhCore(v);
    return 1.0f - t * t;
  } else {
    static_assert(kOp == UnaryOp::kSigmoidDeriv);
    const float sg = SigmoidCore(v);
    return sg * (1.0f - sg);
  }
}

template <UnaryOp kOp>
void MapF32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Apply<kOp>(x[i]);
}

// Sum of n floats in double over 8 lanes (the loop vectorizes; the order differs from a
// sequential fold).
double SumRow(const float* x, int64_t n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) part[l] += static_cast<double>(x[j + l]);
  }
  double sum = 0;
  for (int l = 0; l < 8; ++l) sum += part[l];
  for (; j < n; ++j) sum += static_cast<double>(x[j]);
  return sum;
}

// y[j] = exp(x[j] - mx) for one row; returns their sum (SumRow's order, not the scalar kernel's:
// within the stated tolerance).
double ShiftedExpRow(const float* x, float* y, int64_t n, float mx) {
  for (int64_t j = 0; j < n; ++j) y[j] = ExpCore(x[j] - mx);
  return SumRow(y, n);
}

void ScaleRow(float* y, int64_t n, float s) {
  for (int64_t j = 0; j < n; ++j) y[j] *= s;
}

void LogSoftmaxRow(const float* x, float* y, int64_t n, float mx, float lse) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mx) - lse;
}

// The row max (8 lanes so that the loop vectorizes; max is exact, so the order does not matter);
// NaN anywhere gives NaN, as MaxOf does. A non-finite max shifts by 0.
float RowMax(const float* x, int64_t n) {
  float part[8] = {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};
  int nan = 0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) {
      const float v = x[j + l];
      part[l] = v > part[l] ? v : part[l];
      nan |= v != v;
    }
  }
  float mx = -kInf;
  for (int l = 0; l < 8; ++l) mx = part[l] > mx ? part[l] : mx;
  for (; j < n; ++j) {
    mx = x[j] > mx ? x[j] : mx;
    nan |= x[j] != x[j];
  }
  if (nan) return 0.0f;  // NaN max: not finite
  return __builtin_isfinite(mx) ? mx : 0.0f;
}

double CenteredSquares(const float* x, int64_t n, double mean) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) {
      const double c = static_cast<double>(x[j + l]) - mean;
      part[l] += c * c;
    }
  }
  double sum = 0;
  for (int l = 0; l < 8; ++l) sum += part[l];
  for (; j < n; ++j) {
    const double c = static_cast<double>(x[j]) - mean;
    sum += c * c;
  }
  return sum;
}

void NormApply(const float* x, const float* w, const float* b, float* y, int64_t n, double mean, double inv) {
  if (w != nullptr && b != nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      y[j] = static_cast<float>((static_cast<double>(x[j]) - mean) * inv * static_cast<double>(w[j]) +
                                static_cast<double>(b[j]));
    }
  } else if (w != nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>((static_cast<double>(x[j]) - mean) * inv * static_cast<double>(w[j]));
  } else if (b != nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>((static_cast<double>(x[j]) - mean) * inv + static_cast<double>(b[j]));
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>((static_cast<double>(x[j]) - mean) * inv);
  }
}

}  // namespace

double SumF32(const float* x, int64_t n) { return SumRow(x, n); }

void NormRowsF32(NormKind kind, const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t n,
                 double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const double mean = kind == NormKind::kLayerNorm ? SumRow(xr, n) / static_cast<double>(n) : 0.0;
    const double inv = 1.0 / __builtin_sqrt(CenteredSquares(xr, n, mean) / static_cast<double>(n) + eps);
    NormApply(xr, w, b, y + r * n, n, mean, inv);
  }
}

bool UnaryF32(UnaryOp op, const float* x, float* y, int64_t n, float a) {
  switch (op) {
    case UnaryOp::kExp: MapF32<UnaryOp::kExp>(x, y, n); return true;
    case UnaryOp::kTanh: MapF32<UnaryOp::kTanh>(x, y, n); return true;
    case UnaryOp::kGelu: MapF32<UnaryOp::kGelu>(x, y, n); return true;
    case UnaryOp::kSigmoid: MapF32<UnaryOp::kSigmoid>(x, y, n); return true;
    case UnaryOp::kSilu: MapF32<UnaryOp::kSilu>(x, y, n); return true;
    case UnaryOp::kGeluDeriv: MapF32<UnaryOp::kGeluDeriv>(x, y, n); return true;
    case UnaryOp::kSiluDeriv: MapF32<UnaryOp::kSiluDeriv>(x, y, n); return true;
    case UnaryOp::kTanhDeriv: MapF32<UnaryOp::kTanhDeriv>(x, y, n); return true;
    case UnaryOp::kSigmoidDeriv: MapF32<UnaryOp::kSigmoidDeriv>(x, y, n); return true;
    default: return false;
  }
}

void SoftmaxRowsF32(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float mx = RowMax(xr, n);
    const double sum = ShiftedExpRow(xr, yr, n, mx);
    if (log) {
      LogSoftmaxRow(xr, yr, n, mx, static_cast<float>(__builtin_log(sum)));
    } else {
      ScaleRow(yr, n, static_cast<float>(1.0 / sum));
    }
  }
}

float ExpF32(float x) { return ExpCore(x); }

}  // namespace MF_CPU_VECTOR_NS
}  // namespace meshflow
