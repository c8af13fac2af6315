// The per-element and per-row math of every op, written once: the CPU kernels (ops/kernels.cc) call
// it on their loops, and the device kernels run it in kernel *bodies*: MF_HOST_DEVICE functors of
// (a struct of raw pointers and sizes, one linear index or one row index). A CUDA __global__
// wrapper runs a body in a grid-stride loop (ops/cuda/op_kernels.cu); a host loop runs the same
// body on host memory (ops/shared_kernels.h: HostLoopBackend), which is how the host tests check
// the device arithmetic against the CPU kernels.
//
//   const float g = elementwise::UnaryFixed<UnaryOp::kGelu>(0.5f, 1.0f);   // gelu(0.5), tanh form
//   const float x[3] = {-1, 0, 2};
//   float y[3];
//   const elementwise::UnaryArgs args{elementwise::ElemType::kF32, UnaryOp::kRelu, 1.0, x, y};
//   for (int64_t i = 0; i < 3; ++i) elementwise::UnaryBody<float>{}(args, i);  // y = {0, 0, 2}
//
// Numerics (the CPU kernels' own, so host runs are bitwise equal): bf16 is loaded to float,
// computed in float and rounded once to nearest even (Bf16ToFloat / FloatToBf16 give BFloat16's
// bits); sums accumulate in double (integers: int64, wrapping like the C++ type) in row-major order;
// max / min are std::max / std::min (a NaN does not replace the running value); softmax subtracts
// the row max; norm statistics are double. Reductions, softmax, norms and cross-entropy rows are
// one thread per output element or row looping in the CPU's order, so device results differ from
// the CPU only by the device's transcendental functions (exp, log, tanh, pow: a few ulp).
//
// Header-only; compiles with g++ -std=c++17/20 and with nvcc (C++17, no Eigen, no std::span or
// std::vector in device code). Index maps hold at most kMaxDims dims (after merging contiguous
// dims: the caller's job, ops/shared_kernels.cc).
#ifndef MESHFLOW_OPS_ELEMENTWISE_H_
#define MESHFLOW_OPS_ELEMENTWISE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "meshflow/ops/op_kinds.h"

#if defined(__CUDACC__)
#define MF_HOST_DEVICE __host__ __device__
#else
#define MF_HOST_DEVICE
#endif

namespace meshflow {
namespace elementwise {

// ---- Element types and storage ----

inline constexpr int kMaxDims = 8;

// The element types, with meshflow::DType's values (dtensor/dtype.h; checked by shared_kernels.cc).
enum class ElemType : int { kF32, kF64, kBF16, kI32, kI64 };

// bf16 storage as a pointer tag: the 16 bits are always read and written as uint16_t.
struct Bf16 {
  uint16_t bits;
};

MF_HOST_DEVICE inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// Round to nearest even; NaN stays a quiet NaN (BFloat16::FromFloat's bits).
MF_HOST_DEVICE inline uint16_t FloatToBf16(float f) {
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// The type a storage type computes in: float for bf16, else itself.
template <class S>
struct ComputeOf {
  using type = S;
};
template <>
struct ComputeOf<Bf16> {
  using type = float;
};
template <class S>
using Compute = typename ComputeOf<S>::type;

template <class S>
MF_HOST_DEVICE inline Compute<S> Load(const void* p, int64_t i) {
  if constexpr (std::is_same_v<S, Bf16>) {
    return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  } else {
    return static_cast<const S*>(p)[i];
  }
}

template <class S>
MF_HOST_DEVICE inline void Store(void* p, int64_t i, Compute<S> v) {
  if constexpr (std::is_same_v<S, Bf16>) {
    static_cast<uint16_t*>(p)[i] = FloatToBf16(v);
  } else {
    static_cast<S*>(p)[i] = v;
  }
}

// Element i as a double / a double stored as S (through float for bf16): the CPU kernels' Doubles
// and FromDoubles.
template <class S>
MF_HOST_DEVICE inline double LoadDouble(const void* p, int64_t i) {
  return static_cast<double>(Load<S>(p, i));
}
template <class S>
MF_HOST_DEVICE inline void StoreDouble(void* p, int64_t i, double v) {
  Store<S>(p, i, static_cast<Compute<S>>(v));
}

MF_HOST_DEVICE inline double LoadAsDouble(ElemType t, const void* p, int64_t i) {
  switch (t) {
    case ElemType::kF32: return LoadDouble<float>(p, i);
    case ElemType::kF64: return LoadDouble<double>(p, i);
    case ElemType::kBF16: return LoadDouble<Bf16>(p, i);
    case ElemType::kI32: return LoadDouble<int32_t>(p, i);
    case ElemType::kI64: return LoadDouble<int64_t>(p, i);
  }
  return 0;
}

// An id / target (i32 or i64) as int64.
MF_HOST_DEVICE inline int64_t LoadId(ElemType t, const void* p, int64_t i) {
  return t == ElemType::kI32 ? static_cast<const int32_t*>(p)[i] : static_cast<const int64_t*>(p)[i];
}

template <class T>
MF_HOST_DEVICE inline T Infinity() {
  return static_cast<T>(INFINITY);
}
MF_HOST_DEVICE inline double QuietNaN() { return static_cast<double>(NAN); }

// ---- Scalar math ----

// std::max / std::min (the first argument wins ties and NaN comparisons).
template <class T>
MF_HOST_DEVICE inline T MaxOf(T a, T b) {
  return (a < b) ? b : a;
}
template <class T>
MF_HOST_DEVICE inline T MinOf(T a, T b) {
  return (b < a) ? b : a;
}

// Two's-complement negation (no UB on the minimum value).
template <class T>
MF_HOST_DEVICE inline T WrapNeg(T x) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U(0) - static_cast<U>(x));
}

// x (op) y; integers wrap (add, sub, mul; div is not an integer op and returns x).
template <BinaryOp kOp, class T>
MF_HOST_DEVICE inline T BinaryFixed(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    const U a = static_cast<U>(x), b = static_cast<U>(y);
    if constexpr (kOp == BinaryOp::kAdd) {
      return static_cast<T>(a + b);
    } else if constexpr (kOp == BinaryOp::kSub) {
      return static_cast<T>(a - b);
    } else if constexpr (kOp == BinaryOp::kMul) {
      return static_cast<T>(static_cast<U>(a * b));
    } else {
      return x;
    }
  } else if constexpr (kOp == BinaryOp::kAdd) {
    return x + y;
  } else if constexpr (kOp == BinaryOp::kSub) {
    return x - y;
  } else if constexpr (kOp == BinaryOp::kMul) {
    return x * y;
  } else {
    return x / y;
  }
}

template <class T>
MF_HOST_DEVICE inline T BinaryApply(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::kAdd: return BinaryFixed<BinaryOp::kAdd>(x, y);
    case BinaryOp::kSub: return BinaryFixed<BinaryOp::kSub>(x, y);
    case BinaryOp::kMul: return BinaryFixed<BinaryOp::kMul>(x, y);
    case BinaryOp::kDiv: return BinaryFixed<BinaryOp::kDiv>(x, y);
  }
  return x;
}

// The float unary ops (T float or double; `a` is alpha converted to T). gelu is the tanh form.
template <class T>
MF_HOST_DEVICE inline T GeluInner(T v) {
  const T c = static_cast<T>(0.7978845608028654);  // sqrt(2/pi)
  return c * (v + T(0.044715) * v * v * v);
}
template <UnaryOp kOp, class T>
MF_HOST_DEVICE inline T UnaryFixed(T v, T a) {
  if constexpr (kOp == UnaryOp::kNeg) {
    return -v;
  } else if constexpr (kOp == UnaryOp::kScale) {
    return a * v;
  } else if constexpr (kOp == UnaryOp::kRelu) {
    return v > T(0) ? v : T(0);
  } else if constexpr (kOp == UnaryOp::kExp) {
    return std::exp(v);
  } else if constexpr (kOp == UnaryOp::kGelu) {
    return T(0.5) * v * (T(1) + std::tanh(GeluInner(v)));
  } else if constexpr (kOp == UnaryOp::kTanh) {
    return std::tanh(v);
  } else if constexpr (kOp == UnaryOp::kSigmoid) {
    return T(1) / (T(1) + std::exp(-v));
  } else if constexpr (kOp == UnaryOp::kSilu) {
    return v / (T(1) + std::exp(-v));
  } else if constexpr (kOp == UnaryOp::kSqrt) {
    return std::sqrt(v);
  } else if constexpr (kOp == UnaryOp::kRsqrt) {
    return T(1) / std::sqrt(v);
  } else if constexpr (kOp == UnaryOp::kPow) {
    return std::pow(v, a);
  } else if constexpr (kOp == UnaryOp::kAddScalar) {
    return v + a;
  } else if constexpr (kOp == UnaryOp::kLog) {
    return std::log(v);
  } else if constexpr (kOp == UnaryOp::kStep) {
    return v > T(0) ? T(1) : T(0);
  } else if constexpr (kOp == UnaryOp::kFill) {
    return a;
  } else if constexpr (kOp == UnaryOp::kGeluDeriv) {
    // d/dv 0.5 v (1 + tanh(u)), u = c (v + 0.044715 v^3).
    const T c = static_cast<T>(0.7978845608028654);
    const T t = std::tanh(GeluInner(v));
    return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * v * v);
  } else if constexpr (kOp == UnaryOp::kSiluDeriv) {
    const T sg = T(1) / (T(1) + std::exp(-v));
    return sg * (T(1) + v * (T(1) - sg));
  } else if constexpr (kOp == UnaryOp::kTanhDeriv) {
    const T t = std::tanh(v);
    return T(1) - t * t;
  } else {
    static_assert(kOp == UnaryOp::kSigmoidDeriv, "every UnaryOp has a branch");
    const T sg = T(1) / (T(1) + std::exp(-v));
    return sg * (T(1) - sg);
  }
}

template <class T>
MF_HOST_DEVICE inline T UnaryApply(UnaryOp op, T v, T a) {
  switch (op) {
    case UnaryOp::kNeg: return UnaryFixed<UnaryOp::kNeg>(v, a);
    case UnaryOp::kScale: return UnaryFixed<UnaryOp::kScale>(v, a);
    case UnaryOp::kRelu: return UnaryFixed<UnaryOp::kRelu>(v, a);
    case UnaryOp::kExp: return UnaryFixed<UnaryOp::kExp>(v, a);
    case UnaryOp::kGelu: return UnaryFixed<UnaryOp::kGelu>(v, a);
    case UnaryOp::kTanh: return UnaryFixed<UnaryOp::kTanh>(v, a);
    case UnaryOp::kSigmoid: return UnaryFixed<UnaryOp::kSigmoid>(v, a);
    case UnaryOp::kSilu: return UnaryFixed<UnaryOp::kSilu>(v, a);
    case UnaryOp::kSqrt: return UnaryFixed<UnaryOp::kSqrt>(v, a);
    case UnaryOp::kRsqrt: return UnaryFixed<UnaryOp::kRsqrt>(v, a);
    case UnaryOp::kPow: return UnaryFixed<UnaryOp::kPow>(v, a);
    case UnaryOp::kAddScalar: return UnaryFixed<UnaryOp::kAddScalar>(v, a);
    case UnaryOp::kLog: return UnaryFixed<UnaryOp::kLog>(v, a);
    case UnaryOp::kStep: return UnaryFixed<UnaryOp::kStep>(v, a);
    case UnaryOp::kGeluDeriv: return UnaryFixed<UnaryOp::kGeluDeriv>(v, a);
    case UnaryOp::kSiluDeriv: return UnaryFixed<UnaryOp::kSiluDeriv>(v, a);
    case UnaryOp::kTanhDeriv: return UnaryFixed<UnaryOp::kTanhDeriv>(v, a);
    case UnaryOp::kSigmoidDeriv: return UnaryFixed<UnaryOp::kSigmoidDeriv>(v, a);
    case UnaryOp::kFill: return UnaryFixed<UnaryOp::kFill>(v, a);
  }
  return v;
}

// Comparisons are made on the operands as doubles (the CPU kernel's contract).
MF_HOST_DEVICE inline bool CompareApply(CompareOp op, double x, double y) {
  switch (op) {
    case CompareOp::kEq: return x == y;
    case CompareOp::kNe: return x != y;
    case CompareOp::kLt: return x < y;
    case CompareOp::kLe: return x <= y;
    case CompareOp::kGt: return x > y;
    case CompareOp::kGe: return x >= y;
  }
  return false;
}

// where's condition: cond != 0 (NaN counts as true).
MF_HOST_DEVICE inline bool Truthy(double cond) { return cond != 0; }

// ---- Reductions: the accumulator of S (int64 for integers, else double), its identity and fold ----

template <class S>
using ReduceAcc = std::conditional_t<std::is_integral_v<S>, int64_t, double>;

template <class S>
MF_HOST_DEVICE inline ReduceAcc<S> ReduceInit(ReduceKind kind) {
  if constexpr (std::is_integral_v<S>) {
    using U = std::make_unsigned_t<S>;
    const S hi = static_cast<S>(static_cast<U>(~U(0)) >> 1);
    const S lo = static_cast<S>(-hi - 1);
    return kind == ReduceKind::kMax ? lo : kind == ReduceKind::kMin ? hi : 0;
  } else {
    return kind == ReduceKind::kMax ? -Infinity<double>() : kind == ReduceKind::kMin ? Infinity<double>() : 0.0;
  }
}

// Integer sums wrap (uint64 arithmetic).
template <class Acc>
MF_HOST_DEVICE inline Acc ReduceSum(Acc a, Acc v) {
  if constexpr (std::is_integral_v<Acc>) {
    return static_cast<Acc>(static_cast<uint64_t>(a) + static_cast<uint64_t>(v));
  } else {
    return a + v;
  }
}

template <class Acc>
MF_HOST_DEVICE inline Acc ReduceCombine(ReduceKind kind, Acc a, Acc v) {
  switch (kind) {
    case ReduceKind::kMax: return MaxOf(a, v);
    case ReduceKind::kMin: return MinOf(a, v);
    case ReduceKind::kSum:
    case ReduceKind::kMean: return ReduceSum(a, v);
  }
  return a;
}

// ---- Row algorithms ----

// Softmax / log-softmax of one row x[base + j * stride], j < n: the row max (in the compute type,
// as a double) and log(sum exp(x - max)) (double). A row without a finite max uses 0.
struct SoftmaxStats {
  double max;
  double lse;
};
template <class S>
MF_HOST_DEVICE inline SoftmaxStats SoftmaxRowStats(const void* x, int64_t base, int64_t n, int64_t stride) {
  using T = Compute<S>;
  T mx = -Infinity<T>();
  for (int64_t j = 0; j < n; ++j) mx = MaxOf(mx, Load<S>(x, base + j * stride));
  if (!std::isfinite(mx)) mx = T(0);  // all -inf (or +inf present): avoid inf - inf
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(Load<S>(x, base + j * stride) - mx));
  return {static_cast<double>(mx), std::log(sum)};
}
template <class T>
MF_HOST_DEVICE inline T SoftmaxValue(T x, T mx, double lse, bool log_softmax) {
  const double z = static_cast<double>(x - mx);
  return static_cast<T>(log_softmax ? z - lse : std::exp(z - lse));
}

// Layer norm (mean, biased variance) or RMS norm (mean 0) of one row x[base, base + inner): the
// mean and 1 / sqrt(var + eps), in double.
struct NormStats {
  double mean;
  double inv;
};
template <class S>
MF_HOST_DEVICE inline NormStats NormRowStats(const void* x, int64_t base, int64_t inner, NormKind kind, double eps) {
  double mean = 0, sq = 0;
  if (kind == NormKind::kLayerNorm) {
    for (int64_t j = 0; j < inner; ++j) mean += static_cast<double>(Load<S>(x, base + j));
    mean /= static_cast<double>(inner);
  }
  for (int64_t j = 0; j < inner; ++j) {
    const double c = static_cast<double>(Load<S>(x, base + j)) - mean;
    sq += c * c;
  }
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(inner) + eps)};
}
MF_HOST_DEVICE inline double NormValue(double x, NormStats s, bool has_weight, double w, bool has_bias, double b) {
  double v = (x - s.mean) * s.inv;
  if (has_weight) v *= w;
  if (has_bias) v += b;
  return v;
}

// Cross-entropy of one row of c logits at base: max, sum of exp(x - max), the row's loss term, and
// one element of the gradient. The vocab-parallel kernels reduce max and sum over the class shards
// between the phases; FiniteOrZero is applied to the (reduced) max before the sum.
template <class S>
MF_HOST_DEVICE inline double CeRowMax(const void* x, int64_t base, int64_t c) {
  double m = -Infinity<double>();
  for (int64_t j = 0; j < c; ++j) m = MaxOf(m, static_cast<double>(Load<S>(x, base + j)));
  return m;
}
MF_HOST_DEVICE inline double FiniteOrZero(double m) { return std::isfinite(m) ? m : 0.0; }
template <class S>
MF_HOST_DEVICE inline double CeRowSumExp(const void* x, int64_t base, int64_t c, double m) {
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(Load<S>(x, base + j)) - m);
  return s;
}
// owner: the rank holding class 0 adds logsumexp; every rank subtracts its local target logit.
MF_HOST_DEVICE inline double CeRowLoss(bool owner, double mx, double sum, double target_logit) {
  return (owner ? mx + std::log(sum) : 0.0) - target_logit;
}
// (softmax - onehot) * g, g already divided by the mean count.
MF_HOST_DEVICE inline double CeGradValue(double x, double mx, double sum, bool is_target, double g) {
  return (std::exp(x - mx) / sum - (is_target ? 1.0 : 0.0)) * g;
}

// ---- Index math ----

// N operands walked over one iteration space `shape` (row-major): operand o's element offset of
// index i is base[o] + sum_k idx_k * stride[o][k] (stride 0: a broadcast dim).
template <int N>
struct IndexMap {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};
  int64_t base[N] = {};

  MF_HOST_DEVICE void Offsets(int64_t i, int64_t* off) const {
    for (int o = 0; o < N; ++o) off[o] = base[o];
    for (int k = ndim - 1; k >= 0; --k) {
      const int64_t idx = i % shape[k];
      i /= shape[k];
      for (int o = 0; o < N; ++o) off[o] += idx * stride[o][k];
    }
  }
};

// The first index p in sorted[0, n) with sorted[p] >= key.
MF_HOST_DEVICE inline int64_t LowerBound(const int64_t* sorted, int64_t n, int64_t key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// ---- Kernel bodies: the argument structs and one functor per body (i: an element or a row) ----

// y[i] = op(x[i], alpha) (integers: neg only, wrapping).
struct UnaryArgs {
  ElemType type = ElemType::kF32;
  UnaryOp op = UnaryOp::kNeg;
  double alpha = 1.0;
  const void* x = nullptr;
  void* y = nullptr;
};
template <class S>
struct UnaryBody {
  MF_HOST_DEVICE void operator()(const UnaryArgs& a, int64_t i) const {
    if constexpr (std::is_integral_v<S>) {
      Store<S>(a.y, i, WrapNeg(Load<S>(a.x, i)));
    } else {
      using T = Compute<S>;
      Store<S>(a.y, i, UnaryApply<T>(a.op, Load<S>(a.x, i), static_cast<T>(a.alpha)));
    }
  }
};

// out[i] = a[map 0] (op) b[map 1]; compare: 1 / 0 in the operands' type.
struct BinaryArgs {
  ElemType type = ElemType::kF32;
  BinaryOp op = BinaryOp::kAdd;
  CompareOp compare = CompareOp::kEq;
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  IndexMap<2> map;
};
template <class S>
struct BinaryBody {
  MF_HOST_DEVICE void operator()(const BinaryArgs& a, int64_t i) const {
    int64_t off[2];
    a.map.Offsets(i, off);
    Store<S>(a.out, i, BinaryApply(a.op, Load<S>(a.a, off[0]), Load<S>(a.b, off[1])));
  }
};
template <class S>
struct CompareBody {
  MF_HOST_DEVICE void operator()(const BinaryArgs& a, int64_t i) const {
    int64_t off[2];
    a.map.Offsets(i, off);
    const bool v = CompareApply(a.compare, LoadDouble<S>(a.a, off[0]), LoadDouble<S>(a.b, off[1]));
    StoreDouble<S>(a.out, i, v ? 1.0 : 0.0);
  }
};

// out[i] = cond[map 0] != 0 ? a[map 1] : b[map 2]; elements of elem_size bytes (2, 4 or 8).
struct WhereArgs {
  ElemType cond_type = ElemType::kF32;
  int64_t elem_size = 4;
  const void* cond = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  IndexMap<3> map;
};
template <class W>
struct WhereBody {
  MF_HOST_DEVICE void operator()(const WhereArgs& a, int64_t i) const {
    int64_t off[3];
    a.map.Offsets(i, off);
    const bool c = Truthy(LoadAsDouble(a.cond_type, a.cond, off[0]));
    static_cast<W*>(a.out)[i] = c ? static_cast<const W*>(a.a)[off[1]] : static_cast<const W*>(a.b)[off[2]];
  }
};

// dst[map 1] = src[map 0]: permute, slice, expand, concat pieces, slice_grad placement.
struct CopyArgs {
  int64_t elem_size = 4;
  const void* src = nullptr;
  void* dst = nullptr;
  IndexMap<2> map;
};
template <class W>
struct CopyBody {
  MF_HOST_DEVICE void operator()(const CopyArgs& a, int64_t i) const {
    int64_t off[2];
    a.map.Offsets(i, off);
    static_cast<W*>(a.dst)[off[1]] = static_cast<const W*>(a.src)[off[0]];
  }
};

// out[o] = fold of x over the reduced dims (row-major) at kept index o (kept.Offsets: its base).
struct ReduceArgs {
  ElemType type = ElemType::kF32;
  ReduceKind kind = ReduceKind::kSum;
  const void* x = nullptr;
  void* out = nullptr;
  IndexMap<1> kept;
  int red_ndim = 0;
  int64_t red_shape[kMaxDims] = {};
  int64_t red_stride[kMaxDims] = {};
  int64_t red_count = 0;
  double mean_div = 1;
};
template <class S>
struct ReduceBody {
  MF_HOST_DEVICE void operator()(const ReduceArgs& a, int64_t o) const {
    using Acc = ReduceAcc<S>;
    int64_t off = 0;
    a.kept.Offsets(o, &off);
    int64_t idx[kMaxDims] = {};
    Acc acc = ReduceInit<S>(a.kind);
    for (int64_t r = 0; r < a.red_count; ++r) {
      acc = ReduceCombine(a.kind, acc, static_cast<Acc>(Load<S>(a.x, off)));
      for (int k = a.red_ndim - 1; k >= 0; --k) {  // the next reduced index, row-major
        off += a.red_stride[k];
        if (++idx[k] < a.red_shape[k]) break;
        off -= a.red_stride[k] * a.red_shape[k];
        idx[k] = 0;
      }
    }
    if constexpr (!std::is_integral_v<S>) {
      if (a.kind == ReduceKind::kMean) acc /= a.mean_div;
    }
    Store<S>(a.out, o, static_cast<Compute<S>>(acc));
  }
};

// Softmax along a dim of size n with `inner` elements after it: stats per row (outer * inner
// rows: max, lse), then one element per index.
struct SoftmaxArgs {
  ElemType type = ElemType::kF32;
  bool log_softmax = false;
  const void* x = nullptr;
  void* y = nullptr;
  double* stats = nullptr;  // 2 per row
  int64_t n = 0;
  int64_t inner = 1;
};
template <class S>
struct SoftmaxStatsBody {
  MF_HOST_DEVICE void operator()(const SoftmaxArgs& a, int64_t r) const {
    const int64_t base = (r / a.inner) * a.n * a.inner + r % a.inner;
    const SoftmaxStats s = SoftmaxRowStats<S>(a.x, base, a.n, a.inner);
    a.stats[2 * r] = s.max;
    a.stats[2 * r + 1] = s.lse;
  }
};
template <class S>
struct SoftmaxApplyBody {
  MF_HOST_DEVICE void operator()(const SoftmaxArgs& a, int64_t i) const {
    using T = Compute<S>;
    const int64_t r = (i / (a.n * a.inner)) * a.inner + i % a.inner;
    Store<S>(a.y, i, SoftmaxValue(Load<S>(a.x, i), static_cast<T>(a.stats[2 * r]), a.stats[2 * r + 1], a.log_softmax));
  }
};

// Layer / RMS norm over rows of `inner` elements: stats per row (mean, inv), then per element
// (times w[j], plus b[j] where given).
struct NormArgs {
  ElemType type = ElemType::kF32;
  NormKind kind = NormKind::kLayerNorm;
  const void* x = nullptr;
  const void* w = nullptr;  // null: none
  const void* b = nullptr;  // null: none
  void* y = nullptr;
  double* stats = nullptr;  // 2 per row
  int64_t inner = 1;
  double eps = 1e-5;
};
template <class S>
struct NormStatsBody {
  MF_HOST_DEVICE void operator()(const NormArgs& a, int64_t r) const {
    const NormStats s = NormRowStats<S>(a.x, r * a.inner, a.inner, a.kind, a.eps);
    a.stats[2 * r] = s.mean;
    a.stats[2 * r + 1] = s.inv;
  }
};
template <class S>
struct NormApplyBody {
  MF_HOST_DEVICE void operator()(const NormArgs& a, int64_t i) const {
    const int64_t r = i / a.inner, j = i % a.inner;
    const double w = a.w != nullptr ? LoadDouble<S>(a.w, j) : 0.0;
    const double b = a.b != nullptr ? LoadDouble<S>(a.b, j) : 0.0;
    const double v = NormValue(LoadDouble<S>(a.x, i), NormStats{a.stats[2 * r], a.stats[2 * r + 1]}, a.w != nullptr,
                               w, a.b != nullptr, b);
    StoreDouble<S>(a.y, i, v);
  }
};

// out[p, j] = table[ids[p] - row_offset, j] for a local row, 0 for another shard's row, and the
// bits `poison` (NaN for floats) for an id outside [0, num_rows) (devices report no errors).
struct EmbeddingArgs {
  int64_t elem_size = 4;
  ElemType ids_type = ElemType::kI64;
  const void* table = nullptr;
  const void* ids = nullptr;
  void* out = nullptr;
  int64_t d = 0, rows = 0, row_offset = 0, num_rows = 0;
  uint64_t poison = 0;
};
template <class W>
struct EmbeddingBody {
  MF_HOST_DEVICE void operator()(const EmbeddingArgs& a, int64_t i) const {
    const int64_t id = LoadId(a.ids_type, a.ids, i / a.d), local = id - a.row_offset;
    W v = 0;
    if (id < 0 || id >= a.num_rows) {
      v = static_cast<W>(a.poison);
    } else if (local >= 0 && local < a.rows) {
      v = static_cast<const W*>(a.table)[local * a.d + i % a.d];
    }
    static_cast<W*>(a.out)[i] = v;
  }
};

// embedding_grad in three bodies around a stable sort of (key, position) pairs: keys (the local
// row of each id; `rows` for another shard's or a bad id), the start of each row's run in the
// sorted keys (rows + 1 entries), and per output element the sum in position order (the CPU's).
struct EmbeddingGradArgs {
  ElemType type = ElemType::kF32;
  ElemType ids_type = ElemType::kI64;
  const void* grad = nullptr;
  const void* ids = nullptr;
  int64_t* keys = nullptr;
  int64_t* positions = nullptr;
  const int64_t* sorted_keys = nullptr;
  const int64_t* sorted_positions = nullptr;
  int64_t* starts = nullptr;
  void* out = nullptr;
  int64_t n = 0, d = 0, rows = 0, row_offset = 0, num_rows = 0;
};
struct EmbeddingGradKeysBody {
  MF_HOST_DEVICE void operator()(const EmbeddingGradArgs& a, int64_t p) const {
    const int64_t id = LoadId(a.ids_type, a.ids, p), local = id - a.row_offset;
    const bool mine = id >= 0 && id < a.num_rows && local >= 0 && local < a.rows;
    a.keys[p] = mine ? local : a.rows;
    a.positions[p] = p;
  }
};
struct EmbeddingGradStartsBody {
  MF_HOST_DEVICE void operator()(const EmbeddingGradArgs& a, int64_t r) const {
    a.starts[r] = LowerBound(a.sorted_keys, a.n, r);
  }
};
template <class S>
struct EmbeddingGradSumBody {
  MF_HOST_DEVICE void operator()(const EmbeddingGradArgs& a, int64_t i) const {
    const int64_t r = i / a.d, j = i % a.d;
    double acc = 0.0;
    for (int64_t p = a.starts[r]; p < a.starts[r + 1]; ++p) {
      acc += LoadDouble<S>(a.grad, a.sorted_positions[p] * a.d + j);
    }
    StoreDouble<S>(a.out, i, acc);
  }
};

// Cross-entropy over rows of c logits (classes [class_offset, class_offset + c) of num_classes):
// row max, row sum (fixing a non-finite max to 0 first), row loss (kNone: into out, else into
// loss), the total (one item), and the gradient per element. A target outside [0, num_classes)
// gives NaN (devices report no errors).
struct CrossEntropyArgs {
  ElemType type = ElemType::kF32;
  ElemType ids_type = ElemType::kI64;
  ElemType grad_type = ElemType::kF32;
  LossReduction reduction = LossReduction::kMean;
  bool owner = true;
  const void* logits = nullptr;
  const void* targets = nullptr;
  const void* grad = nullptr;
  double* mx = nullptr;
  double* sum = nullptr;
  double* loss = nullptr;
  void* out = nullptr;
  int64_t rows = 0, c = 0, class_offset = 0, num_classes = 0;
  double div = 1;  // the mean's count (1 otherwise)
};
template <class S>
struct CeRowMaxBody {
  MF_HOST_DEVICE void operator()(const CrossEntropyArgs& a, int64_t r) const {
    a.mx[r] = CeRowMax<S>(a.logits, r * a.c, a.c);
  }
};
template <class S>
struct CeRowSumBody {
  MF_HOST_DEVICE void operator()(const CrossEntropyArgs& a, int64_t r) const {
    const double m = FiniteOrZero(a.mx[r]);
    a.mx[r] = m;
    a.sum[r] = CeRowSumExp<S>(a.logits, r * a.c, a.c, m);
  }
};
template <class S>
struct CeRowLossBody {
  MF_HOST_DEVICE void operator()(const CrossEntropyArgs& a, int64_t r) const {
    const int64_t target = LoadId(a.ids_type, a.targets, r), t = target - a.class_offset;
    double loss = QuietNaN();
    if (target >= 0 && target < a.num_classes) {
      const double target_logit = t >= 0 && t < a.c ? LoadDouble<S>(a.logits, r * a.c + t) : 0.0;
      loss = CeRowLoss(a.owner, a.mx[r], a.sum[r], target_logit);
    }
    if (a.reduction == LossReduction::kNone) {
      StoreDouble<S>(a.out, r, loss);
    } else {
      a.loss[r] = loss;
    }
  }
};
template <class S>
struct CeTotalBody {
  MF_HOST_DEVICE void operator()(const CrossEntropyArgs& a, int64_t) const {
    double total = 0;
    for (int64_t r = 0; r < a.rows; ++r) total += a.loss[r];
    if (a.reduction == LossReduction::kMean) total /= a.div;
    StoreDouble<S>(a.out, 0, total);
  }
};
template <class S>
struct CeGradBody {
  MF_HOST_DEVICE void operator()(const CrossEntropyArgs& a, int64_t i) const {
    const int64_t r = i / a.c, j = i % a.c, target = LoadId(a.ids_type, a.targets, r);
    double v = QuietNaN();
    if (target >= 0 && target < a.num_classes) {
      const int64_t gi = a.reduction == LossReduction::kNone ? r : 0;
      const double g = LoadAsDouble(a.grad_type, a.grad, gi) / a.div;
      v = CeGradValue(LoadDouble<S>(a.logits, i), a.mx[r], a.sum[r], a.class_offset + j == target, g);
    }
    StoreDouble<S>(a.out, i, v);
  }
};

// bf16 <-> f32 (the bf16 matmul computes in f32 and rounds once).
struct ConvertArgs {
  bool to_bf16 = false;
  const void* src = nullptr;
  void* dst = nullptr;
};
struct ConvertBody {
  MF_HOST_DEVICE void operator()(const ConvertArgs& a, int64_t i) const {
    if (a.to_bf16) {
      Store<Bf16>(a.dst, i, Load<float>(a.src, i));
    } else {
      Store<float>(a.dst, i, Load<Bf16>(a.src, i));
    }
  }
};

// ---- Dispatch: one entry point per body, written once for every executor ----

enum class Body {
  kUnary, kBinary, kCompare, kWhere, kCopy, kReduce, kSoftmaxStats, kSoftmaxApply, kNormStats, kNormApply,
  kEmbedding, kEmbeddingGradKeys, kEmbeddingGradStarts, kEmbeddingGradSum, kCeRowMax, kCeRowSum, kCeRowLoss,
  kCeTotal, kCeGrad, kConvert,
};

inline const char* BodyName(Body b) {
  constexpr const char* kNames[] = {
      "unary",          "binary",         "compare",  "where",       "copy",
      "reduce",         "softmax_stats",  "softmax",  "norm_stats",  "norm",
      "embedding",      "embedding_grad_keys",        "embedding_grad_starts",
      "embedding_grad_sum",               "ce_row_max", "ce_row_sum", "ce_row_loss",
      "ce_total",       "ce_grad",        "convert"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Body::kConvert) + 1, "a name per body");
  return kNames[static_cast<int>(b)];
}

namespace dispatch_internal {

template <template <class> class F, class A, class Exec>
void AnyType(Exec& e, ElemType t, const A& a, int64_t n) {
  switch (t) {
    case ElemType::kF32: e.template Run<F<float>>(a, n); break;
    case ElemType::kF64: e.template Run<F<double>>(a, n); break;
    case ElemType::kBF16: e.template Run<F<Bf16>>(a, n); break;
    case ElemType::kI32: e.template Run<F<int32_t>>(a, n); break;
    case ElemType::kI64: e.template Run<F<int64_t>>(a, n); break;
  }
}

// Float bodies: integer types run nothing (the callers validate dtypes first).
template <template <class> class F, class A, class Exec>
void FloatType(Exec& e, ElemType t, const A& a, int64_t n) {
  switch (t) {
    case ElemType::kF32: e.template Run<F<float>>(a, n); break;
    case ElemType::kF64: e.template Run<F<double>>(a, n); break;
    case ElemType::kBF16: e.template Run<F<Bf16>>(a, n); break;
    default: break;
  }
}

// Byte-moving bodies by element size (2, 4, 8).
template <template <class> class F, class A, class Exec>
void Word(Exec& e, int64_t size, const A& a, int64_t n) {
  switch (size) {
    case 2: e.template Run<F<uint16_t>>(a, n); break;
    case 4: e.template Run<F<uint32_t>>(a, n); break;
    default: e.template Run<F<uint64_t>>(a, n); break;
  }
}

template <class A>
const A& As(const void* p) {
  return *static_cast<const A*>(p);
}

template <class Exec>
void CrossEntropy(Exec& e, Body body, const CrossEntropyArgs& a, int64_t n) {
  switch (body) {
    case Body::kCeRowMax: return FloatType<CeRowMaxBody>(e, a.type, a, n);
    case Body::kCeRowSum: return FloatType<CeRowSumBody>(e, a.type, a, n);
    case Body::kCeRowLoss: return FloatType<CeRowLossBody>(e, a.type, a, n);
    case Body::kCeTotal: return FloatType<CeTotalBody>(e, a.type, a, n);
    case Body::kCeGrad: return FloatType<CeGradBody>(e, a.type, a, n);
    default: return;
  }
}

}  // namespace dispatch_internal

// Runs body `body` on `args` (the matching *Args struct) for items [0, n) on `exec`, whose
// `template <class F, class A> void Run(const A& args, int64_t n)` runs F{}(args, i) for each i
// (a CUDA launch, or a host loop).
template <class Exec>
void DispatchBody(Exec& exec, Body body, const void* args, int64_t n) {
  namespace d = dispatch_internal;
  switch (body) {
    case Body::kUnary: return d::AnyType<UnaryBody>(exec, d::As<UnaryArgs>(args).type, d::As<UnaryArgs>(args), n);
    case Body::kBinary: return d::AnyType<BinaryBody>(exec, d::As<BinaryArgs>(args).type, d::As<BinaryArgs>(args), n);
    case Body::kCompare:
      return d::AnyType<CompareBody>(exec, d::As<BinaryArgs>(args).type, d::As<BinaryArgs>(args), n);
    case Body::kWhere: return d::Word<WhereBody>(exec, d::As<WhereArgs>(args).elem_size, d::As<WhereArgs>(args), n);
    case Body::kCopy: return d::Word<CopyBody>(exec, d::As<CopyArgs>(args).elem_size, d::As<CopyArgs>(args), n);
    case Body::kReduce: return d::AnyType<ReduceBody>(exec, d::As<ReduceArgs>(args).type, d::As<ReduceArgs>(args), n);
    case Body::kSoftmaxStats:
      return d::FloatType<SoftmaxStatsBody>(exec, d::As<SoftmaxArgs>(args).type, d::As<SoftmaxArgs>(args), n);
    case Body::kSoftmaxApply:
      return d::FloatType<SoftmaxApplyBody>(exec, d::As<SoftmaxArgs>(args).type, d::As<SoftmaxArgs>(args), n);
    case Body::kNormStats:
      return d::FloatType<NormStatsBody>(exec, d::As<NormArgs>(args).type, d::As<NormArgs>(args), n);
    case Body::kNormApply:
      return d::FloatType<NormApplyBody>(exec, d::As<NormArgs>(args).type, d::As<NormArgs>(args), n);
    case Body::kEmbedding:
      return d::Word<EmbeddingBody>(exec, d::As<EmbeddingArgs>(args).elem_size, d::As<EmbeddingArgs>(args), n);
    case Body::kEmbeddingGradKeys: return exec.template Run<EmbeddingGradKeysBody>(d::As<EmbeddingGradArgs>(args), n);
    case Body::kEmbeddingGradStarts:
      return exec.template Run<EmbeddingGradStartsBody>(d::As<EmbeddingGradArgs>(args), n);
    case Body::kEmbeddingGradSum: {
      const auto& a = d::As<EmbeddingGradArgs>(args);
      return d::FloatType<EmbeddingGradSumBody>(exec, a.type, a, n);
    }
    case Body::kConvert: return exec.template Run<ConvertBody>(d::As<ConvertArgs>(args), n);
    case Body::kCeRowMax:
    case Body::kCeRowSum:
    case Body::kCeRowLoss:
    case Body::kCeTotal:
    case Body::kCeGrad: return d::CrossEntropy(exec, body, d::As<CrossEntropyArgs>(args), n);
  }
}

}  // namespace elementwise
}  // namespace meshflow

#endif  // MESHFLOW_OPS_ELEMENTWISE_H_
