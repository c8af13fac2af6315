#include "ops/kernels.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/shape_util.h"

namespace meshflow::ops {
namespace {

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
  if (t == DType::kF32 || t == DType::kF64 || t == DType::kBF16) return Status::Ok();
  return UnimplementedError(std::string(op) + ": dtype " + std::string(DTypeName(t)) +
                            " not supported (f32, f64, bf16 only)");
}

Status CheckSameDType(std::string_view op, const Tensor& a, const Tensor& b) {
  MF_RETURN_IF_ERROR(CheckFloat(op, a.dtype()));
  if (a.dtype() != b.dtype()) {
    return InvalidArgumentError(std::string(op) + ": dtypes differ: " + std::string(DTypeName(a.dtype())) +
                                " vs " + std::string(DTypeName(b.dtype())));
  }
  return Status::Ok();
}


// Element strides of `s` (row-major, right-aligned against `out`), 0 on broadcast dims.
std::vector<int64_t> BroadcastStrides(std::span<const int64_t> s, std::span<const int64_t> out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t stride = 1;
  const size_t lead = out.size() - s.size();
  for (size_t i = s.size(); i-- > 0;) {
    st[lead + i] = s[i] == 1 ? 0 : stride;
    stride *= s[i];
  }
  return st;
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
Tensor MatmulT(const Tensor& a, const Tensor& b, const std::vector<int64_t>& batch) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t m = a.shape()[a.rank() - 2], k = a.shape()[a.rank() - 1], n = b.shape()[b.rank() - 1];
  std::vector<int64_t> out_shape = batch;
  out_shape.insert(out_shape.end(), {m, n});
  Tensor c = Tensor::Zeros(DTypeOf<T>::value, out_shape);
  if (m == 0 || n == 0 || k == 0) return c;
  const std::span<const int64_t> ab(a.shape().data(), a.shape().size() - 2);
  const std::span<const int64_t> bb(b.shape().data(), b.shape().size() - 2);
  const std::vector<int64_t> sa = BroadcastStrides(ab, batch), sb = BroadcastStrides(bb, batch);
  const T* pa = a.data<T>().data();
  const T* pb = b.data<T>().data();
  T* pc = c.data<T>().data();
  const bool small = m * k * n <= 4096;
  auto gemm = [&](int64_t i, int64_t oa, int64_t ob) {
    Eigen::Map<const Mat> A(pa + oa * m * k, m, k);
    Eigen::Map<const Mat> B(pb + ob * k * n, k, n);
    Eigen::Map<Mat> C(pc + i * m * n, m, n);
    if (small) {
      C.noalias() = A.lazyProduct(B);  // coefficient-wise: no GEMM blocking setup for tiny shapes
    } else {
      C.noalias() = A * B;
    }
  };
  if (batch.empty()) {
    gemm(0, 0, 0);
  } else {
    ForEachBroadcast(batch, sa, sb, gemm);
  }
  return c;
}

template <typename T>
T ApplyBinary(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::kAdd: return x + y;
    case BinaryOp::kSub: return x - y;
    case BinaryOp::kMul: return x * y;
    case BinaryOp::kDiv: return x / y;
  }
  return x;
}

template <typename T>
Tensor BinaryT(BinaryOp op, const Tensor& a, const Tensor& b, const std::vector<int64_t>& out_shape) {
  Tensor c = Tensor::Zeros(DTypeOf<T>::value, out_shape);
  const auto pa = a.data<T>();
  const auto pb = b.data<T>();
  auto pc = c.data<T>();
  ForEachBroadcast(out_shape, BroadcastStrides(a.shape(), out_shape), BroadcastStrides(b.shape(), out_shape),
                   [&](int64_t i, int64_t oa, int64_t ob) { pc[i] = ApplyBinary(op, pa[oa], pb[ob]); });
  return c;
}

template <typename T>
Tensor UnaryT(UnaryOp op, const Tensor& x, double alpha) {
  Tensor y = Tensor::Zeros(DTypeOf<T>::value, x.shape());
  const auto px = x.data<T>();
  auto py = y.data<T>();
  const T a = static_cast<T>(alpha);
  for (size_t i = 0; i < px.size(); ++i) {
    const T v = px[i];
    switch (op) {
      case UnaryOp::kNeg: py[i] = -v; break;
      case UnaryOp::kScale: py[i] = a * v; break;
      case UnaryOp::kRelu: py[i] = v > T(0) ? v : T(0); break;
      case UnaryOp::kExp: py[i] = std::exp(v); break;
      case UnaryOp::kGelu: {
        const T c = static_cast<T>(0.7978845608028654);  // sqrt(2/pi)
        py[i] = T(0.5) * v * (T(1) + std::tanh(c * (v + T(0.044715) * v * v * v)));
        break;
      }
    }
  }
  return y;
}

template <typename T>
Tensor ReduceT(ReduceKind kind, const Tensor& x, const std::vector<int>& dims, bool keepdim, int64_t mean_count) {
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
  const double init = kind == ReduceKind::kMax   ? -std::numeric_limits<double>::infinity()
                      : kind == ReduceKind::kMin ? std::numeric_limits<double>::infinity()
                                                 : 0.0;
  std::vector<double> acc(static_cast<size_t>(n_out), init);
  const auto px = x.data<T>();
  const std::vector<int64_t> zeros(static_cast<size_t>(rank), 0);
  ForEachBroadcast(x.shape(), ost, zeros, [&](int64_t i, int64_t o, int64_t) {
    const double v = static_cast<double>(px[i]);
    double& a = acc[o];
    if (kind == ReduceKind::kMax) {
      a = std::max(a, v);
    } else if (kind == ReduceKind::kMin) {
      a = std::min(a, v);
    } else {
      a += v;
    }
  });
  if (kind == ReduceKind::kMean) {
    int64_t count = 1;
    for (int d : dims) count *= x.shape()[d];
    const double div = static_cast<double>(mean_count >= 0 ? mean_count : count);
    for (double& a : acc) a /= div;
  }
  Tensor y = Tensor::Zeros(DTypeOf<T>::value, out_shape);
  auto py = y.data<T>();
  for (int64_t i = 0; i < n_out; ++i) py[i] = static_cast<T>(acc[i]);
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
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, px[base + j * inner]);
      if (!std::isfinite(mx)) mx = T(0);  // all -inf (or +inf present): avoid inf - inf
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(px[base + j * inner] - mx));
      const double lse = std::log(sum);
      for (int64_t j = 0; j < n; ++j) {
        const double z = static_cast<double>(px[base + j * inner] - mx);
        py[base + j * inner] = static_cast<T>(log ? z - lse : std::exp(z - lse));
      }
    }
  }
  return y;
}

}  // namespace

StatusOr<Tensor> MatmulKernel(const Tensor& a, const Tensor& b) {
  MF_RETURN_IF_ERROR(CheckSameDType("matmul", a, b));
  if (a.rank() < 2 || b.rank() < 2) {
    return InvalidArgumentError("matmul: operands need rank >= 2, got shapes " + ShapeString(a.shape()) + " and " +
                                ShapeString(b.shape()));
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
    default: return ToBF16(MatmulT<float>(ToF32(a), ToF32(b), batch));
  }
}

StatusOr<Tensor> BinaryKernel(BinaryOp op, const Tensor& a, const Tensor& b) {
  MF_RETURN_IF_ERROR(CheckSameDType(BinaryOpName(op), a, b));
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(BinaryOpName(op), a.shape(), b.shape()));
  switch (a.dtype()) {
    case DType::kF32: return BinaryT<float>(op, a, b, out);
    case DType::kF64: return BinaryT<double>(op, a, b, out);
    default: return ToBF16(BinaryT<float>(op, ToF32(a), ToF32(b), out));
  }
}

StatusOr<Tensor> UnaryKernel(UnaryOp op, const Tensor& x, double alpha) {
  MF_RETURN_IF_ERROR(CheckFloat(UnaryOpName(op), x.dtype()));
  switch (x.dtype()) {
    case DType::kF32: return UnaryT<float>(op, x, alpha);
    case DType::kF64: return UnaryT<double>(op, x, alpha);
    default: return ToBF16(UnaryT<float>(op, ToF32(x), alpha));
  }
}

StatusOr<Tensor> ReduceKernel(ReduceKind kind, const Tensor& x, std::span<const int> dims, bool keepdim,
                              int64_t mean_count) {
  MF_RETURN_IF_ERROR(CheckFloat(ReduceKindName(kind), x.dtype()));
  MF_ASSIGN_OR_RETURN(std::vector<int> rd, NormalizeReduceDims(x.shape(), dims));
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

}  // namespace meshflow::ops
