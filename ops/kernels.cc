#include "meshflow/ops/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "meshflow/ops/blas.h"
#include "meshflow/ops/cpu_vector.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape_util.h"

namespace meshflow {
namespace {

namespace ew = elementwise;

Tensor ToF32(const Tensor& x) {
  Tensor out = Tensor::Zeros(DType::kF32, x.shape());
  auto src = x.data<BFloat16>();
  auto dst = out.data<float>();
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<float>(src[i]);
  return out;
}

Tensor ToBF16(const Tensor& x) {
  Tensor out = Tensor::Zeros(DType::kBF16, x.shape());
  auto src = x.data<float>();
  auto dst = out.data<BFloat16>();
  for (size_t i = 0; i < src.size(); ++i) dst[i] = BFloat16(src[i]);
  return out;
}

Status CheckFloat(std::string_view op, DType t) {
  if (IsFloatDType(t)) return Status::Ok();
  return UnimplementedError(std::string(op) + ": dtype " + std::string(DTypeName(t)) +
                            " not supported (f32, f64, bf16 only)");
}

// Two's-complement negation (no UB on the minimum value).
template <typename T>
Tensor NegInt(const Tensor& x) {
  Tensor y = Tensor::Zeros(DTypeOf<T>::value, x.shape());
  const auto px = x.data<T>();
  auto py = y.data<T>();
  for (size_t i = 0; i < px.size(); ++i) py[i] = ew::WrapNeg(px[i]);
  return y;
}

Status CheckSameDType(std::string_view op, const Tensor& a, const Tensor& b) {
  MF_RETURN_IF_ERROR(CheckFloat(op, a.dtype()));
  if (a.dtype() != b.dtype()) {
    return InvalidArgumentError(std::string(op) + ": dtypes differ: " + std::string(DTypeName(a.dtype())) +
                                " vs " + std::string(DTypeName(b.dtype())));
  }
  return Status::Ok();
}

// Calls f(out_flat, off_a, off_b) for every index of `out`.
template <typename F>
void ForEachBroadcast(std::span<const int64_t> out, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb,
                      F&& f) {
  int64_t total = 1;
  for (int64_t s : out) total *= s;
  if (total == 0) return;
  std::vector<int64_t> idx(out.size(), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < total; ++i) {
    f(i, oa, ob);
    for (size_t d = out.size(); d-- > 0;) {
      oa += sa[d];
      ob += sb[d];
      if (++idx[d] < out[d]) break;
      oa -= sa[d] * out[d];
      ob -= sb[d] * out[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
StatusOr<Tensor> MatmulT(const Tensor& a, const Tensor& b, const std::vector<int64_t>& batch) {
  const int64_t m = a.shape()[a.rank() - 2], k = a.shape()[a.rank() - 1], n = b.shape()[b.rank() - 1];
  std::vector<int64_t> out_shape = batch;
  out_shape.insert(out_shape.end(), {m, n});
  const bool empty = std::find(out_shape.begin(), out_shape.end(), 0) != out_shape.end();
  if (empty || k == 0) return Tensor::Zeros(DTypeOf<T>::value, out_shape);
  Tensor c = Tensor::Uninitialized(DTypeOf<T>::value, out_shape);  // every element written by the GEMM
  const std::span<const int64_t> ab(a.shape().data(), a.shape().size() - 2);
  const std::span<const int64_t> bb(b.shape().data(), b.shape().size() - 2);
  const std::vector<int64_t> sa = BroadcastStrides(ab, batch), sb = BroadcastStrides(bb, batch);
  const T* pa = a.data<T>().data();
  const T* pb = b.data<T>().data();
  T* pc = c.data<T>().data();
  Status status;
  auto gemm = [&](int64_t i, int64_t oa, int64_t ob) {
    if (status.ok()) status = Gemm<T>(m, n, k, pa + oa * m * k, pb + ob * k * n, pc + i * m * n);
  };
  if (batch.empty()) {
    gemm(0, 0, 0);
  } else {
    ForEachBroadcast(batch, sa, sb, gemm);
  }
  MF_RETURN_IF_ERROR(status);
  return c;
}

// How an operand of shape `s` broadcasts against `out` in the two common non-trivial patterns:
// kRow: `s` is out's trailing dims (bias [D] against [B, T, D]), the same `inner` elements for
// each of `outer` rows; kCol: `s` is out's leading dims followed by ones (a keepdim statistic
// [B, T, 1] against [B, T, D]), one element per row of `inner`. kNone otherwise.
struct BroadcastRun {
  enum class Kind { kNone, kRow, kCol };
  Kind kind = Kind::kNone;
  int64_t outer = 0, inner = 0;
};

BroadcastRun RunOf(std::span<const int64_t> s, std::span<const int64_t> out) {
  if (s.size() > out.size()) return {};
  const size_t lead = out.size() - s.size();
  auto dim = [&](size_t d) { return d < lead ? int64_t{1} : s[d - lead]; };
  int64_t total = 1;
  for (int64_t o : out) total *= o;
  // kRow: dims [0, k) of s are 1, dims [k, R) equal out's.
  size_t k = out.size();
  while (k > 0 && dim(k - 1) == out[k - 1]) --k;
  bool ones = true;
  for (size_t d = 0; d < k; ++d) ones = ones && dim(d) == 1;
  if (ones && total > 0) {
    int64_t inner = 1;
    for (size_t d = k; d < out.size(); ++d) inner *= out[d];
    return {BroadcastRun::Kind::kRow, total / inner, inner};
  }
  // kCol: dims [0, k) equal out's, dims [k, R) are 1.
  k = 0;
  while (k < out.size() && dim(k) == out[k]) ++k;
  ones = true;
  for (size_t d = k; d < out.size(); ++d) ones = ones && dim(d) == 1;
  if (ones && total > 0) {
    int64_t outer = 1;
    for (size_t d = 0; d < k; ++d) outer *= out[d];
    return {BroadcastRun::Kind::kCol, outer, total / outer};
  }
  return {};
}

// out = full (op) broadcast (or broadcast (op) full with kBroadcastFirst), `full` of the output's
// shape and `bc` broadcasting as `r` says.
template <BinaryOp kOp, typename T, bool kBroadcastFirst>
void BinaryRuns(const T* full, const T* bc, T* out, const BroadcastRun& r) {
  auto apply = [](T f, T b) { return kBroadcastFirst ? ew::BinaryFixed<kOp>(b, f) : ew::BinaryFixed<kOp>(f, b); };
  for (int64_t o = 0; o < r.outer; ++o) {
    const T* rf = full + o * r.inner;
    T* rc = out + o * r.inner;
    if (r.kind == BroadcastRun::Kind::kRow) {
      for (int64_t j = 0; j < r.inner; ++j) rc[j] = apply(rf[j], bc[j]);
    } else {
      const T b = bc[o];
      for (int64_t j = 0; j < r.inner; ++j) rc[j] = apply(rf[j], b);
    }
  }
}

// out = a (op) b with `kOp` fixed at compile time, so the element loops below have no branch
// and vectorize. Fast paths: both operands of the output's shape, or one of them a single
// element; otherwise the general broadcast walk. Every element is written (no zero-fill).
template <BinaryOp kOp, typename T>
Tensor BinaryFixed(const Tensor& a, const Tensor& b, const std::vector<int64_t>& out_shape) {
  Tensor c = Tensor::Uninitialized(DTypeOf<T>::value, out_shape);
  const T* pa = a.data<T>().data();
  const T* pb = b.data<T>().data();
  T* pc = c.data<T>().data();
  const int64_t n = c.NumElements();
  if (a.shape() == out_shape && b.shape() == out_shape) {
    for (int64_t i = 0; i < n; ++i) pc[i] = ew::BinaryFixed<kOp>(pa[i], pb[i]);
  } else if (a.shape() == out_shape && b.NumElements() == 1) {
    const T y = pb[0];
    for (int64_t i = 0; i < n; ++i) pc[i] = ew::BinaryFixed<kOp>(pa[i], y);
  } else if (b.shape() == out_shape && a.NumElements() == 1) {
    const T x = pa[0];
    for (int64_t i = 0; i < n; ++i) pc[i] = ew::BinaryFixed<kOp>(x, pb[i]);
  } else if (const BroadcastRun rb = a.shape() == out_shape ? RunOf(b.shape(), out_shape) : BroadcastRun{};
             rb.kind != BroadcastRun::Kind::kNone) {
    BinaryRuns<kOp, T, /*kBroadcastFirst=*/false>(pa, pb, pc, rb);
  } else if (const BroadcastRun ra = b.shape() == out_shape ? RunOf(a.shape(), out_shape) : BroadcastRun{};
             ra.kind != BroadcastRun::Kind::kNone) {
    BinaryRuns<kOp, T, /*kBroadcastFirst=*/true>(pb, pa, pc, ra);
  } else {
    ForEachBroadcast(out_shape, BroadcastStrides(a.shape(), out_shape), BroadcastStrides(b.shape(), out_shape),
                     [&](int64_t i, int64_t oa, int64_t ob) { pc[i] = ew::BinaryFixed<kOp>(pa[oa], pb[ob]); });
  }
  return c;
}

template <typename T>
Tensor BinaryT(BinaryOp op, const Tensor& a, const Tensor& b, const std::vector<int64_t>& out_shape) {
  switch (op) {
    case BinaryOp::kAdd: return BinaryFixed<BinaryOp::kAdd, T>(a, b, out_shape);
    case BinaryOp::kSub: return BinaryFixed<BinaryOp::kSub, T>(a, b, out_shape);
    case BinaryOp::kMul: return BinaryFixed<BinaryOp::kMul, T>(a, b, out_shape);
    case BinaryOp::kDiv: return BinaryFixed<BinaryOp::kDiv, T>(a, b, out_shape);
  }
  return BinaryFixed<BinaryOp::kAdd, T>(a, b, out_shape);
}

// y[i] = f(x[i]) over the whole tensor (the op is chosen once, outside the loop).
template <typename T, typename F>
void MapInto(std::span<const T> x, std::span<T> y, F f) {
  const T* px = x.data();
  T* py = y.data();
  const size_t n = x.size();
  for (size_t i = 0; i < n; ++i) py[i] = f(px[i]);
}

// y = op(x, alpha) with the op fixed at compile time (the element math: elementwise.h).
template <UnaryOp kOp, typename T>
void UnaryInto(std::span<const T> x, std::span<T> y, T a) {
  MapInto(x, y, [a](T v) { return ew::UnaryFixed<kOp>(v, a); });
}

template <typename T>
Tensor UnaryT(UnaryOp op, const Tensor& x, double alpha) {
  Tensor y = Tensor::Uninitialized(DTypeOf<T>::value, x.shape());
  const auto px = x.data<T>();
  auto py = y.data<T>();
  const T a = static_cast<T>(alpha);
  if constexpr (std::is_same_v<T, float>) {
    if (VectorUnaryF32(op, px.data(), py.data(), static_cast<int64_t>(px.size()), a)) return y;
  }
  switch (op) {
    case UnaryOp::kNeg: UnaryInto<UnaryOp::kNeg>(px, py, a); break;
    case UnaryOp::kScale: UnaryInto<UnaryOp::kScale>(px, py, a); break;
    case UnaryOp::kRelu: UnaryInto<UnaryOp::kRelu>(px, py, a); break;
    case UnaryOp::kExp: UnaryInto<UnaryOp::kExp>(px, py, a); break;
    case UnaryOp::kGelu: UnaryInto<UnaryOp::kGelu>(px, py, a); break;
    case UnaryOp::kTanh: UnaryInto<UnaryOp::kTanh>(px, py, a); break;
    case UnaryOp::kSigmoid: UnaryInto<UnaryOp::kSigmoid>(px, py, a); break;
    case UnaryOp::kSilu: UnaryInto<UnaryOp::kSilu>(px, py, a); break;
    case UnaryOp::kSqrt: UnaryInto<UnaryOp::kSqrt>(px, py, a); break;
    case UnaryOp::kRsqrt: UnaryInto<UnaryOp::kRsqrt>(px, py, a); break;
    case UnaryOp::kPow: UnaryInto<UnaryOp::kPow>(px, py, a); break;
    case UnaryOp::kAddScalar: UnaryInto<UnaryOp::kAddScalar>(px, py, a); break;
    case UnaryOp::kLog: UnaryInto<UnaryOp::kLog>(px, py, a); break;
    case UnaryOp::kStep: UnaryInto<UnaryOp::kStep>(px, py, a); break;
    case UnaryOp::kFill: UnaryInto<UnaryOp::kFill>(px, py, a); break;
    case UnaryOp::kGeluDeriv: UnaryInto<UnaryOp::kGeluDeriv>(px, py, a); break;
    case UnaryOp::kSiluDeriv: UnaryInto<UnaryOp::kSiluDeriv>(px, py, a); break;
    case UnaryOp::kTanhDeriv: UnaryInto<UnaryOp::kTanhDeriv>(px, py, a); break;
    case UnaryOp::kSigmoidDeriv: UnaryInto<UnaryOp::kSigmoidDeriv>(px, py, a); break;
  }
  return y;
}

template <typename T>
Tensor ReduceT(ReduceKind kind, const Tensor& x, const std::vector<int>& dims, bool keepdim, int64_t mean_count) {
  // Integers accumulate exactly in int64 (identities: the type's limits); floats in double.
  using Acc = ew::ReduceAcc<T>;
  const int rank = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int d : dims) reduced[d] = true;
  std::vector<int64_t> kept_shape, out_shape;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) kept_shape.push_back(x.shape()[d]);
    if (!reduced[d] || keepdim) out_shape.push_back(reduced[d] ? 1 : x.shape()[d]);
  }
  // Output strides per input dim (0 on reduced dims).
  std::vector<int64_t> ost(static_cast<size_t>(rank), 0);
  int64_t stride = 1;
  for (int d = rank; d-- > 0;) {
    if (!reduced[d]) {
      ost[d] = stride;
      stride *= x.shape()[d];
    }
  }
  const int64_t n_out = stride;
  const Acc init = ew::ReduceInit<T>(kind);
  std::vector<Acc> acc(static_cast<size_t>(n_out), init);
  const T* px = x.data<T>().data();
  // Reduced dims that are a suffix (rows of `inner` consecutive elements, e.g. the last dim) or a
  // prefix (whole slabs added into the output, e.g. a bias gradient) run as plain loops; other
  // patterns walk the multi-index. Every output folds its inputs in row-major order either way,
  // so all three give the same bits, except f32 sums over a suffix: those use the vectorized
  // 8-lane row sums (cpu_vector.h), a different order (a few ulp of the double sum).
  int suffix_from = rank, prefix_to = 0;
  while (suffix_from > 0 && reduced[static_cast<size_t>(suffix_from - 1)]) --suffix_from;
  while (prefix_to < rank && reduced[static_cast<size_t>(prefix_to)]) ++prefix_to;
  bool suffix = true, prefix = true;
  for (int d = 0; d < rank; ++d) {
    if (reduced[static_cast<size_t>(d)] && d < suffix_from) suffix = false;
    if (reduced[static_cast<size_t>(d)] && d >= prefix_to) prefix = false;
  }
  const int64_t total = x.NumElements();
  auto run = [&](auto combine) {
    if (total == 0) return;
    if (suffix) {
      const int64_t inner = total / n_out;
      if constexpr (std::is_same_v<T, float>) {
        double sum = 0;
        if ((kind == ReduceKind::kSum || kind == ReduceKind::kMean) && VectorSumF32(px, 0, &sum)) {
          for (int64_t o = 0; o < n_out; ++o) {  // the vectorized row sums
            VectorSumF32(px + o * inner, inner, &sum);
            acc[static_cast<size_t>(o)] += sum;
          }
          return;
        }
      }
      for (int64_t o = 0; o < n_out; ++o) {
        Acc a = acc[static_cast<size_t>(o)];
        const T* row = px + o * inner;
        for (int64_t j = 0; j < inner; ++j) a = combine(a, static_cast<Acc>(row[j]));
        acc[static_cast<size_t>(o)] = a;
      }
    } else if (prefix) {
      const int64_t outer = total / n_out;
      Acc* pa = acc.data();
      for (int64_t o = 0; o < outer; ++o) {
        const T* slab = px + o * n_out;
        for (int64_t j = 0; j < n_out; ++j) pa[j] = combine(pa[j], static_cast<Acc>(slab[j]));
      }
    } else {
      const std::vector<int64_t> zeros(static_cast<size_t>(rank), 0);
      ForEachBroadcast(x.shape(), ost, zeros, [&](int64_t i, int64_t o, int64_t) {
        acc[static_cast<size_t>(o)] = combine(acc[static_cast<size_t>(o)], static_cast<Acc>(px[i]));
      });
    }
  };
  if (kind == ReduceKind::kMax) {
    run([](Acc a, Acc v) { return ew::MaxOf(a, v); });
  } else if (kind == ReduceKind::kMin) {
    run([](Acc a, Acc v) { return ew::MinOf(a, v); });
  } else {
    run([](Acc a, Acc v) { return ew::ReduceSum(a, v); });  // integers wrap
  }
  if constexpr (!std::is_integral_v<T>) {
    if (kind == ReduceKind::kMean) {
      int64_t count = 1;
      for (int d : dims) count *= x.shape()[d];
      const double div = static_cast<double>(mean_count >= 0 ? mean_count : count);
      for (double& a : acc) a /= div;
    }
  }
  Tensor y = Tensor::Uninitialized(DTypeOf<T>::value, out_shape);
  auto py = y.data<T>();
  for (int64_t i = 0; i < n_out; ++i) py[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
  return y;
}

template <typename T>
Tensor SoftmaxT(const Tensor& x, int d, bool log) {
  Tensor y = Tensor::Zeros(DTypeOf<T>::value, x.shape());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.shape()[i];
  for (int i = d + 1; i < x.rank(); ++i) inner *= x.shape()[i];
  const int64_t n = x.shape()[d];
  const auto px = x.data<T>();
  auto py = y.data<T>();
  if constexpr (std::is_same_v<T, float>) {
    // Contiguous rows: the vectorized loops (unless the level is kScalar).
    if (inner == 1 && n > 0 && VectorSoftmaxRowsF32(px.data(), py.data(), outer, n, log)) return y;
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      const ew::SoftmaxStats s = ew::SoftmaxRowStats<T>(px.data(), base, n, inner);
      const T mx = static_cast<T>(s.max);
      for (int64_t j = 0; j < n; ++j) py[base + j * inner] = ew::SoftmaxValue(px[base + j * inner], mx, s.lse, log);
    }
  }
  return y;
}

}  // namespace

StatusOr<Tensor> MatmulKernel(const Tensor& a, const Tensor& b) {
  MF_RETURN_IF_ERROR(CheckSameDType("matmul", a, b));
  if (a.rank() < 1 || b.rank() < 1) {
    return InvalidArgumentError("matmul: operands need rank >= 1, got shapes " + ShapeString(a.shape()) + " and " +
                                ShapeString(b.shape()));
  }
  if (a.rank() == 1 || b.rank() == 1) {  // numpy: [k] is a row (a) / column (b), then dropped
    MF_ASSIGN_OR_RETURN(Tensor a2, a.rank() == 1 ? ReshapeKernel(a, std::vector<int64_t>{1, a.shape()[0]})
                                                 : StatusOr<Tensor>(a));
    MF_ASSIGN_OR_RETURN(Tensor b2, b.rank() == 1 ? ReshapeKernel(b, std::vector<int64_t>{b.shape()[0], 1})
                                                 : StatusOr<Tensor>(b));
    MF_ASSIGN_OR_RETURN(Tensor c, MatmulKernel(a2, b2));
    std::vector<int64_t> shape = c.shape();
    if (b.rank() == 1) shape.pop_back();
    if (a.rank() == 1) shape.erase(shape.end() - (b.rank() == 1 ? 1 : 2));
    return ReshapeKernel(c, shape);
  }
  if (a.shape()[a.rank() - 1] != b.shape()[b.rank() - 2]) {
    return InvalidArgumentError("matmul: contracting sizes differ: a " + ShapeString(a.shape()) + ", b " +
                                ShapeString(b.shape()));
  }
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> batch,
                      BroadcastShapes("matmul batch dims",
                                     std::span<const int64_t>(a.shape().data(), a.shape().size() - 2),
                                     std::span<const int64_t>(b.shape().data(), b.shape().size() - 2)));
  switch (a.dtype()) {
    case DType::kF32: return MatmulT<float>(a, b, batch);
    case DType::kF64: return MatmulT<double>(a, b, batch);
    default: {
      MF_ASSIGN_OR_RETURN(Tensor c, MatmulT<float>(ToF32(a), ToF32(b), batch));
      return ToBF16(c);
    }
  }
}

StatusOr<Tensor> BinaryKernel(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (op != BinaryOp::kDiv && IsIntDType(a.dtype()) && a.dtype() == b.dtype()) {
    MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(BinaryOpName(op), a.shape(), b.shape()));
    if (a.dtype() == DType::kI32) return BinaryT<int32_t>(op, a, b, out);
    return BinaryT<int64_t>(op, a, b, out);
  }
  MF_RETURN_IF_ERROR(CheckSameDType(BinaryOpName(op), a, b));
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(BinaryOpName(op), a.shape(), b.shape()));
  switch (a.dtype()) {
    case DType::kF32: return BinaryT<float>(op, a, b, out);
    case DType::kF64: return BinaryT<double>(op, a, b, out);
    default: return ToBF16(BinaryT<float>(op, ToF32(a), ToF32(b), out));
  }
}

StatusOr<Tensor> UnaryKernel(UnaryOp op, const Tensor& x, double alpha) {
  if (op == UnaryOp::kNeg && x.dtype() == DType::kI32) return NegInt<int32_t>(x);
  if (op == UnaryOp::kNeg && x.dtype() == DType::kI64) return NegInt<int64_t>(x);
  MF_RETURN_IF_ERROR(CheckFloat(UnaryOpName(op), x.dtype()));
  switch (x.dtype()) {
    case DType::kF32: return UnaryT<float>(op, x, alpha);
    case DType::kF64: return UnaryT<double>(op, x, alpha);
    default: return ToBF16(UnaryT<float>(op, ToF32(x), alpha));
  }
}

StatusOr<Tensor> ReduceKernel(ReduceKind kind, const Tensor& x, std::span<const int> dims, bool keepdim,
                              int64_t mean_count) {
  MF_ASSIGN_OR_RETURN(std::vector<int> rd, NormalizeReduceDims(x.shape(), dims));
  if (kind != ReduceKind::kMean && x.dtype() == DType::kI32) return ReduceT<int32_t>(kind, x, rd, keepdim, -1);
  if (kind != ReduceKind::kMean && x.dtype() == DType::kI64) return ReduceT<int64_t>(kind, x, rd, keepdim, -1);
  MF_RETURN_IF_ERROR(CheckFloat(ReduceKindName(kind), x.dtype()));
  switch (x.dtype()) {
    case DType::kF32: return ReduceT<float>(kind, x, rd, keepdim, mean_count);
    case DType::kF64: return ReduceT<double>(kind, x, rd, keepdim, mean_count);
    default: return ToBF16(ReduceT<float>(kind, ToF32(x), rd, keepdim, mean_count));
  }
}

StatusOr<Tensor> SoftmaxKernel(const Tensor& x, int dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  MF_RETURN_IF_ERROR(CheckFloat(name, x.dtype()));
  const int d = dim < 0 ? dim + x.rank() : dim;
  if (d < 0 || d >= x.rank()) {
    return InvalidArgumentError(std::string(name) + ": dim " + std::to_string(dim) + " out of range for shape " +
                                ShapeString(x.shape()));
  }
  switch (x.dtype()) {
    case DType::kF32: return SoftmaxT<float>(x, d, log);
    case DType::kF64: return SoftmaxT<double>(x, d, log);
    default: return ToBF16(SoftmaxT<float>(ToF32(x), d, log));
  }
}

// ---- Data movement ----

namespace {

// dst[i] = src[offset of output index i] for every output index (row-major), where the source
// offset is the dot product of the index with `src_strides` (in elements of S bytes). Elements
// move by fixed-size memcpy (one load / store, no aliasing questions); runs of a unit-stride
// innermost dim are one memcpy.
template <size_t S>
void GatherT(const std::byte* src, std::byte* dst, std::span<const int64_t> out_shape,
             const std::vector<int64_t>& src_strides) {
  int64_t total = 1;
  for (int64_t d : out_shape) total *= d;
  if (total == 0) return;
  const size_t rank = out_shape.size();
  if (rank == 0) {
    std::memcpy(dst, src, S);
    return;
  }
  const int64_t inner = out_shape[rank - 1], inner_stride = src_strides[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < total; i += inner) {
    if (inner_stride == 1) {
      std::memcpy(dst + i * S, src + off * S, static_cast<size_t>(inner) * S);
    } else {
      for (int64_t j = 0; j < inner; ++j) std::memcpy(dst + (i + j) * S, src + (off + j * inner_stride) * S, S);
    }
    for (size_t d = rank - 1; d-- > 0;) {  // advance the outer index
      off += src_strides[d];
      if (++idx[d] < out_shape[d]) break;
      off -= src_strides[d] * out_shape[d];
      idx[d] = 0;
    }
  }
}

void Gather(const std::byte* src, std::byte* dst, int64_t size, std::span<const int64_t> out_shape,
            const std::vector<int64_t>& src_strides) {
  switch (size) {
    case 2: GatherT<2>(src, dst, out_shape, src_strides); break;
    case 4: GatherT<4>(src, dst, out_shape, src_strides); break;
    default: GatherT<8>(src, dst, out_shape, src_strides);
  }
}

}  // namespace

StatusOr<Tensor> PermuteKernel(const Tensor& x, std::span<const int> perm) {
  // Validated inline (not through PermuteRule: no factor-name strings on the eager hot path).
  const int rank = x.rank();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool ok = static_cast<int>(perm.size()) == rank;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    const int d = perm[i] < 0 ? perm[i] + rank : perm[i];
    ok = d >= 0 && d < rank && !seen[d];
    if (ok) seen[d] = true;
  }
  if (!ok) return PermuteRule(x.shape(), perm).status();  // the rule's error message
  const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
  std::vector<int64_t> src_strides, out_shape;
  for (int p : perm) {
    const int d = p < 0 ? p + rank : p;
    src_strides.push_back(in_strides[d]);
    out_shape.push_back(x.shape()[d]);
  }
  Tensor y = Tensor::Zeros(x.dtype(), out_shape);
  Gather(x.raw(), y.raw(), DTypeSize(x.dtype()), out_shape, src_strides);
  return y;
}

StatusOr<Tensor> ReshapeKernel(const Tensor& x, std::span<const int64_t> shape) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, ResolveReshape(x.shape(), shape));
  Tensor y = Tensor::Zeros(x.dtype(), std::move(out));
  if (x.NumBytes() > 0) std::memcpy(y.raw(), x.raw(), static_cast<size_t>(x.NumBytes()));
  return y;
}

StatusOr<Tensor> ConcatKernel(std::span<const Tensor* const> xs, int dim) {
  if (xs.empty()) return InvalidArgumentError("concat: no operands");
  const int rank = xs[0]->rank();
  const int d = dim < 0 ? dim + rank : dim;
  bool ok = rank > 0 && d >= 0 && d < rank;
  std::vector<int64_t> out_shape = xs[0]->shape();
  if (ok) out_shape[d] = 0;
  for (size_t i = 0; ok && i < xs.size(); ++i) {
    ok = xs[i]->rank() == rank;
    for (int j = 0; ok && j < rank; ++j) ok = j == d || xs[i]->shape()[j] == out_shape[j];
    if (ok) out_shape[d] += xs[i]->shape()[d];
  }
  if (!ok) {  // the rule's error message
    std::vector<const std::vector<int64_t>*> shapes;
    for (const Tensor* x : xs) shapes.push_back(&x->shape());
    return ConcatRule(shapes, dim).status();
  }
  for (size_t i = 1; i < xs.size(); ++i) {
    if (xs[i]->dtype() != xs[0]->dtype()) {
      return InvalidArgumentError("concat: dtypes differ: " + std::string(DTypeName(xs[0]->dtype())) + " vs " +
                                  std::string(DTypeName(xs[i]->dtype())) + " (operand " + std::to_string(i) + ")");
    }
  }
  Tensor y = Tensor::Zeros(xs[0]->dtype(), out_shape);
  std::vector<int64_t> offset(out_shape.size(), 0);
  for (const Tensor* x : xs) {
    if (x->NumElements() > 0) y.Insert(offset, *x);
    offset[d] += x->shape()[d];
  }
  return y;
}

StatusOr<Tensor> SliceKernel(const Tensor& x, int dim, int64_t start, int64_t end, int64_t step) {
  MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(x.shape(), dim, start, end, step));
  std::vector<int64_t> out_shape = x.shape();
  out_shape[s.dim] = s.size;
  std::vector<int64_t> src_strides = RowMajorStrides(x.shape());
  const int64_t base = s.start * src_strides[s.dim];
  src_strides[s.dim] *= s.step;
  Tensor y = Tensor::Zeros(x.dtype(), out_shape);
  const int64_t size = DTypeSize(x.dtype());
  Gather(x.raw() + base * size, y.raw(), size, out_shape, src_strides);
  return y;
}

// ---- Normalization, embedding, loss ----

namespace {

template <typename T>
Tensor NormT(NormKind kind, const Tensor& x, int64_t inner, const Tensor* w, const Tensor* b, double eps) {
  Tensor y = Tensor::Zeros(DTypeOf<T>::value, x.shape());
  const auto px = x.data<T>();
  auto py = y.data<T>();
  const int64_t outer = inner == 0 ? 0 : x.NumElements() / inner;
  const T* pw = w != nullptr ? w->data<T>().data() : nullptr;
  const T* pb = b != nullptr ? b->data<T>().data() : nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (VectorNormRowsF32(kind, px.data(), pw, pb, py.data(), outer, inner, eps)) return y;
  }
  for (int64_t o = 0; o < outer; ++o) {
    const T* row = px.data() + o * inner;
    const ew::NormStats s = ew::NormRowStats<T>(row, 0, inner, kind, eps);
    for (int64_t j = 0; j < inner; ++j) {
      const double wj = pw != nullptr ? static_cast<double>(pw[j]) : 0.0;
      const double bj = pb != nullptr ? static_cast<double>(pb[j]) : 0.0;
      py[o * inner + j] = static_cast<T>(ew::NormValue(static_cast<double>(row[j]), s, pw != nullptr, wj, pb != nullptr, bj));
    }
  }
  return y;
}

template <typename T, typename I>
Tensor CrossEntropyT(const Tensor& logits, const Tensor& targets, LossReduction reduction, int64_t mean_count,
                     const VocabShard* vocab, Status& error) {
  const int64_t c = logits.shape().back();
  const int64_t rows = targets.NumElements();
  const int64_t offset = vocab ? vocab->class_offset : 0, classes = vocab ? vocab->num_classes : c;
  const auto pl = logits.data<T>();
  const auto pt = targets.data<I>();
  std::vector<double> mx(static_cast<size_t>(rows), -std::numeric_limits<double>::infinity());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = static_cast<int64_t>(pt[r]);
    if (t < 0 || t >= classes) {
      error = InvalidArgumentError("cross_entropy: target " + std::to_string(t) + " at row " + std::to_string(r) +
                                   " outside [0, " + std::to_string(classes) + ")");
      return Tensor();
    }
    mx[r] = ew::CeRowMax<T>(pl.data(), r * c, c);
  }
  if (vocab && rows > 0) {
    error = vocab->all_reduce(mx, ReduceOp::kMax);
    if (!error.ok()) return Tensor();
  }
  std::vector<double> sum(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    mx[r] = ew::FiniteOrZero(mx[r]);
    sum[r] = ew::CeRowSumExp<T>(pl.data(), r * c, c, mx[r]);
  }
  if (vocab && rows > 0) {
    error = vocab->all_reduce(sum, ReduceOp::kSum);
    if (!error.ok()) return Tensor();
  }
  std::vector<double> loss(static_cast<size_t>(rows));
  const bool owner = vocab == nullptr || vocab->owner;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = static_cast<int64_t>(pt[r]) - offset;
    const double target_logit = t >= 0 && t < c ? static_cast<double>(pl[r * c + t]) : 0.0;
    loss[r] = ew::CeRowLoss(owner, mx[r], sum[r], target_logit);
  }
  if (reduction == LossReduction::kNone) {
    Tensor y = Tensor::Zeros(DTypeOf<T>::value, targets.shape());
    auto py = y.data<T>();
    for (int64_t r = 0; r < rows; ++r) py[r] = static_cast<T>(loss[r]);
    return y;
  }
  double total = 0;
  for (double v : loss) total += v;
  if (reduction == LossReduction::kMean) total /= static_cast<double>(mean_count >= 0 ? mean_count : rows);
  Tensor y = Tensor::Zeros(DTypeOf<T>::value, {});
  y.data<T>()[0] = static_cast<T>(total);
  return y;
}

StatusOr<Tensor> CrossEntropyImpl(const Tensor& logits, const Tensor& targets, LossReduction reduction,
                                  int64_t mean_count, const VocabShard* vocab) {
  MF_RETURN_IF_ERROR(CheckFloat("cross_entropy", logits.dtype()));
  if (!IsIntDType(targets.dtype())) {
    return InvalidArgumentError("cross_entropy: targets dtype " + std::string(DTypeName(targets.dtype())) +
                                " must be i32 or i64");
  }
  if (logits.rank() == 0 || !std::equal(targets.shape().begin(), targets.shape().end(), logits.shape().begin(),
                                        logits.shape().end() - 1)) {
    return CrossEntropyRule(logits.shape(), targets.shape(), reduction).status();
  }
  Status error;
  Tensor y;
  const bool i32 = targets.dtype() == DType::kI32;
  switch (logits.dtype()) {
    case DType::kF32:
      y = i32 ? CrossEntropyT<float, int32_t>(logits, targets, reduction, mean_count, vocab, error)
              : CrossEntropyT<float, int64_t>(logits, targets, reduction, mean_count, vocab, error);
      break;
    case DType::kF64:
      y = i32 ? CrossEntropyT<double, int32_t>(logits, targets, reduction, mean_count, vocab, error)
              : CrossEntropyT<double, int64_t>(logits, targets, reduction, mean_count, vocab, error);
      break;
    default: {
      const Tensor f = ToF32(logits);
      y = i32 ? CrossEntropyT<float, int32_t>(f, targets, reduction, mean_count, vocab, error)
              : CrossEntropyT<float, int64_t>(f, targets, reduction, mean_count, vocab, error);
      if (error.ok()) y = ToBF16(y);
    }
  }
  MF_RETURN_IF_ERROR(error);
  return y;
}

}  // namespace

StatusOr<Tensor> NormKernel(NormKind kind, const Tensor& x, int normalized_ndim, const Tensor* weight,
                            const Tensor* bias, double eps) {
  const std::string_view name = NormKindName(kind);
  MF_RETURN_IF_ERROR(CheckFloat(name, x.dtype()));
  for (const Tensor* t : {weight, bias}) {
    if (t != nullptr) MF_RETURN_IF_ERROR(CheckSameDType(name, x, *t));
  }
  bool ok = normalized_ndim >= 1 && normalized_ndim <= x.rank();
  for (const Tensor* t : {weight, bias}) {
    ok = ok && (t == nullptr || std::equal(t->shape().begin(), t->shape().end(),
                                           x.shape().end() - normalized_ndim, x.shape().end()));
  }
  if (!ok) {  // the rule's error message
    return NormRule(kind, x.shape(), normalized_ndim, weight ? &weight->shape() : nullptr,
                    bias ? &bias->shape() : nullptr)
        .status();
  }
  int64_t inner = 1;
  for (int d = x.rank() - normalized_ndim; d < x.rank(); ++d) inner *= x.shape()[d];
  switch (x.dtype()) {
    case DType::kF32: return NormT<float>(kind, x, inner, weight, bias, eps);
    case DType::kF64: return NormT<double>(kind, x, inner, weight, bias, eps);
    default: {
      const Tensor w = weight ? ToF32(*weight) : Tensor(), b = bias ? ToF32(*bias) : Tensor();
      return ToBF16(NormT<float>(kind, ToF32(x), inner, weight ? &w : nullptr, bias ? &b : nullptr, eps));
    }
  }
}

StatusOr<Tensor> EmbeddingKernel(const Tensor& table, const Tensor& ids, int64_t row_offset, int64_t global_rows) {
  if (table.rank() != 2) return EmbeddingRule(table.shape(), ids.shape()).status();
  if (!IsIntDType(ids.dtype())) {
    return InvalidArgumentError("embedding: ids dtype " + std::string(DTypeName(ids.dtype())) +
                                " must be i32 or i64");
  }
  const int64_t rows = table.shape()[0], d = table.shape()[1];
  const int64_t v = global_rows >= 0 ? global_rows : rows;
  std::vector<int64_t> out_shape = ids.shape();
  out_shape.push_back(d);
  Tensor y = Tensor::Zeros(table.dtype(), out_shape);
  const int64_t row_bytes = d * DTypeSize(table.dtype());
  for (int64_t i = 0; i < ids.NumElements(); ++i) {
    const int64_t id = ids.dtype() == DType::kI32 ? ids.data<int32_t>()[i] : ids.data<int64_t>()[i];
    if (id < 0 || id >= v) {
      return InvalidArgumentError("embedding: id " + std::to_string(id) + " at " + std::to_string(i) +
                                  " outside [0, " + std::to_string(v) + ")");
    }
    const int64_t local = id - row_offset;
    if (local >= 0 && local < rows && row_bytes > 0) {
      std::memcpy(y.raw() + i * row_bytes, table.raw() + local * row_bytes, static_cast<size_t>(row_bytes));
    }
  }
  return y;
}

StatusOr<Tensor> CrossEntropyKernel(const Tensor& logits, const Tensor& targets, LossReduction reduction,
                                    int64_t mean_count) {
  return CrossEntropyImpl(logits, targets, reduction, mean_count, nullptr);
}

StatusOr<Tensor> CrossEntropyKernel(const Tensor& logits, const Tensor& targets, LossReduction reduction,
                                    int64_t mean_count, const VocabShard& vocab) {
  if (!vocab.all_reduce) return InvalidArgumentError("cross_entropy: vocab shard without all_reduce");
  return CrossEntropyImpl(logits, targets, reduction, mean_count, &vocab);
}

// ---- Comparison, where, expand and the gradient kernels. They compute in double and store in
// the operands' float dtype (bf16 rounds once), which keeps them exact for f64 references.

namespace {

std::vector<double> Doubles(const Tensor& x) {
  std::vector<double> v(static_cast<size_t>(x.NumElements()));
  switch (x.dtype()) {
    case DType::kF32: std::copy(x.data<float>().begin(), x.data<float>().end(), v.begin()); break;
    case DType::kF64: std::copy(x.data<double>().begin(), x.data<double>().end(), v.begin()); break;
    case DType::kBF16:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(x.data<BFloat16>()[i]);
      break;
    case DType::kI32: std::copy(x.data<int32_t>().begin(), x.data<int32_t>().end(), v.begin()); break;
    case DType::kI64:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(x.data<int64_t>()[i]);
      break;
  }
  return v;
}

Tensor FromDoubles(DType t, const std::vector<int64_t>& shape, const std::vector<double>& v) {
  Tensor y = Tensor::Zeros(t, shape);
  switch (t) {
    case DType::kF32:
      for (size_t i = 0; i < v.size(); ++i) y.data<float>()[i] = static_cast<float>(v[i]);
      break;
    case DType::kF64: std::copy(v.begin(), v.end(), y.data<double>().begin()); break;
    case DType::kBF16:
      for (size_t i = 0; i < v.size(); ++i) y.data<BFloat16>()[i] = BFloat16(static_cast<float>(v[i]));
      break;
    case DType::kI32:
      for (size_t i = 0; i < v.size(); ++i) y.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
      break;
    case DType::kI64:
      for (size_t i = 0; i < v.size(); ++i) y.data<int64_t>()[i] = static_cast<int64_t>(v[i]);
      break;
  }
  return y;
}

int64_t IdAt(const Tensor& ids, int64_t i) {
  return ids.dtype() == DType::kI32 ? ids.data<int32_t>()[i] : ids.data<int64_t>()[i];
}

Status CheckIds(std::string_view op, const Tensor& ids) {
  if (IsIntDType(ids.dtype())) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": ids dtype " + std::string(DTypeName(ids.dtype())) +
                              " must be i32 or i64");
}

}  // namespace

StatusOr<Tensor> CompareKernel(CompareOp op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    return InvalidArgumentError(std::string(CompareOpName(op)) + ": dtypes differ: " +
                                std::string(DTypeName(a.dtype())) + " vs " + std::string(DTypeName(b.dtype())));
  }
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(CompareOpName(op), a.shape(), b.shape()));
  const std::vector<double> va = Doubles(a), vb = Doubles(b);
  int64_t total = 1;
  for (int64_t s : out) total *= s;
  std::vector<double> r(static_cast<size_t>(total));
  ForEachBroadcast(out, BroadcastStrides(a.shape(), out), BroadcastStrides(b.shape(), out),
                   [&](int64_t i, int64_t oa, int64_t ob) {
                     r[i] = ew::CompareApply(op, va[oa], vb[ob]) ? 1.0 : 0.0;
                   });
  return FromDoubles(a.dtype(), out, r);
}

StatusOr<Tensor> WhereKernel(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    return InvalidArgumentError("where: dtypes of a and b differ: " + std::string(DTypeName(a.dtype())) + " vs " +
                                std::string(DTypeName(b.dtype())));
  }
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> ab, BroadcastShapes("where", a.shape(), b.shape()));
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes("where", cond.shape(), ab));
  const std::vector<double> vc = Doubles(cond);
  // Select elements (exact for every dtype), walking the three broadcast operands with
  // incremental offsets.
  Tensor y = Tensor::Uninitialized(a.dtype(), out);
  const std::vector<int64_t> sc = BroadcastStrides(cond.shape(), out), sa = BroadcastStrides(a.shape(), out),
                             sb = BroadcastStrides(b.shape(), out);
  auto select = [&](auto tag) {
    using E = decltype(tag);
    // Element copies of a constant size (one move each; memcpy keeps the access type-safe).
    const std::byte* pa = a.raw();
    const std::byte* pb = b.raw();
    std::byte* py = y.raw();
    constexpr size_t es = sizeof(E);
    int64_t total = 1;
    for (int64_t s : out) total *= s;
    if (total == 0) return;
    std::vector<int64_t> idx(out.size(), 0);
    int64_t oc = 0, oa = 0, ob = 0;
    for (int64_t i = 0; i < total; ++i) {
      const std::byte* src = ew::Truthy(vc[static_cast<size_t>(oc)]) ? pa + oa * static_cast<int64_t>(es) : pb + ob * static_cast<int64_t>(es);
      std::memcpy(py + i * static_cast<int64_t>(es), src, es);
      for (size_t d = out.size(); d-- > 0;) {
        oc += sc[d];
        oa += sa[d];
        ob += sb[d];
        if (++idx[d] < out[d]) break;
        oc -= sc[d] * out[d];
        oa -= sa[d] * out[d];
        ob -= sb[d] * out[d];
        idx[d] = 0;
      }
    }
  };
  switch (DTypeSize(a.dtype())) {
    case 2: select(uint16_t{}); break;
    case 4: select(uint32_t{}); break;
    default: select(uint64_t{}); break;
  }
  return y;
}

StatusOr<Tensor> ExpandKernel(const Tensor& x, std::span<const int64_t> shape) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes("expand", x.shape(), shape));
  if (!std::equal(out.begin(), out.end(), shape.begin(), shape.end())) {
    return InvalidArgumentError("expand: shape " + ShapeString(x.shape()) + " does not broadcast to " +
                                ShapeString(shape));
  }
  Tensor y = Tensor::Zeros(x.dtype(), out);
  const int64_t es = DTypeSize(x.dtype());
  const std::vector<int64_t> zeros(out.size(), 0);
  ForEachBroadcast(out, BroadcastStrides(x.shape(), out), zeros, [&](int64_t i, int64_t ox, int64_t) {
    std::memcpy(y.raw() + i * es, x.raw() + ox * es, static_cast<size_t>(es));
  });
  return y;
}

StatusOr<Tensor> EmbeddingGradKernel(const Tensor& grad, const Tensor& ids, int64_t rows, int64_t row_offset,
                                     int64_t global_rows) {
  MF_RETURN_IF_ERROR(CheckIds("embedding_grad", ids));
  MF_RETURN_IF_ERROR(CheckFloat("embedding_grad", grad.dtype()));
  MF_RETURN_IF_ERROR(EmbeddingGradRule(grad.shape(), ids.shape(), rows).status());
  const int64_t d = grad.shape().back();
  const int64_t v = global_rows >= 0 ? global_rows : rows;
  const std::vector<double> g = Doubles(grad);
  std::vector<double> out(static_cast<size_t>(rows * d), 0.0);
  for (int64_t i = 0; i < ids.NumElements(); ++i) {
    const int64_t id = IdAt(ids, i);
    if (id < 0 || id >= v) {
      return InvalidArgumentError("embedding_grad: id " + std::to_string(id) + " at " + std::to_string(i) +
                                  " outside [0, " + std::to_string(v) + ")");
    }
    const int64_t local = id - row_offset;
    if (local < 0 || local >= rows) continue;
    for (int64_t j = 0; j < d; ++j) out[static_cast<size_t>(local * d + j)] += g[static_cast<size_t>(i * d + j)];
  }
  return FromDoubles(grad.dtype(), {rows, d}, out);
}

StatusOr<Tensor> SliceGradKernel(const Tensor& grad, std::span<const int64_t> input_shape, int dim, int64_t start,
                                 int64_t end, int64_t step) {
  MF_RETURN_IF_ERROR(SliceGradRule(grad.shape(), input_shape, dim, start, end, step).status());
  MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(input_shape, dim, start, end, step));
  std::vector<int64_t> shape(input_shape.begin(), input_shape.end());
  Tensor y = Tensor::Zeros(grad.dtype(), shape);
  int64_t outer = 1, inner = DTypeSize(grad.dtype());
  for (int i = 0; i < s.dim; ++i) outer *= shape[i];
  for (size_t i = static_cast<size_t>(s.dim) + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t n = shape[s.dim];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < s.size; ++j) {
      std::memcpy(y.raw() + (o * n + s.start + j * s.step) * inner, grad.raw() + (o * s.size + j) * inner,
                  static_cast<size_t>(inner));
    }
  }
  return y;
}

namespace {

StatusOr<Tensor> CrossEntropyGradImpl(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                                      LossReduction reduction, int64_t mean_count, const VocabShard* vocab) {
  MF_RETURN_IF_ERROR(CheckFloat("cross_entropy_grad", logits.dtype()));
  MF_RETURN_IF_ERROR(CheckIds("cross_entropy_grad", targets));
  MF_RETURN_IF_ERROR(CrossEntropyGradRule(logits.shape(), targets.shape(), grad.shape(), reduction).status());
  const int64_t c = logits.shape().back();
  const int64_t offset = vocab != nullptr ? vocab->class_offset : 0;
  const int64_t classes = vocab != nullptr ? vocab->num_classes : c;
  const int64_t rows = targets.NumElements();
  const std::vector<double> x = Doubles(logits), g = Doubles(grad);
  std::vector<double> out(x.size(), 0.0);
  const double div = reduction == LossReduction::kMean ? static_cast<double>(mean_count >= 0 ? mean_count : rows) : 1.0;
  // Row max and row sum of exp(x - max), over this rank's classes, then over the vocab group.
  std::vector<double> mx(static_cast<size_t>(rows), -std::numeric_limits<double>::infinity());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = IdAt(targets, r);
    if (t < 0 || t >= classes) {
      return InvalidArgumentError("cross_entropy_grad: target " + std::to_string(t) + " at " + std::to_string(r) +
                                  " outside [0, " + std::to_string(classes) + ")");
    }
    mx[static_cast<size_t>(r)] = ew::CeRowMax<double>(x.data(), r * c, c);
  }
  if (vocab != nullptr) MF_RETURN_IF_ERROR(vocab->all_reduce(mx, ReduceOp::kMax));
  std::vector<double> sum(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double& m = mx[static_cast<size_t>(r)];
    m = ew::FiniteOrZero(m);
    sum[static_cast<size_t>(r)] = ew::CeRowSumExp<double>(x.data(), r * c, c, m);
  }
  if (vocab != nullptr) MF_RETURN_IF_ERROR(vocab->all_reduce(sum, ReduceOp::kSum));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = IdAt(targets, r);
    const double* row = x.data() + r * c;
    const double m = mx[static_cast<size_t>(r)], s = sum[static_cast<size_t>(r)];
    const double gr = (reduction == LossReduction::kNone ? g[static_cast<size_t>(r)] : g[0]) / div;
    for (int64_t j = 0; j < c; ++j) {
      out[static_cast<size_t>(r * c + j)] = ew::CeGradValue(row[j], m, s, offset + j == t, gr);
    }
  }
  return FromDoubles(logits.dtype(), logits.shape(), out);
}

}  // namespace

StatusOr<Tensor> CrossEntropyGradKernel(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                                        LossReduction reduction, int64_t mean_count) {
  return CrossEntropyGradImpl(logits, targets, grad, reduction, mean_count, nullptr);
}

StatusOr<Tensor> CrossEntropyGradKernel(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                                        LossReduction reduction, int64_t mean_count, const VocabShard& vocab) {
  if (!vocab.all_reduce) return InvalidArgumentError("cross_entropy_grad: vocab shard without all_reduce");
  return CrossEntropyGradImpl(logits, targets, grad, reduction, mean_count, &vocab);
}

}  // namespace meshflow
