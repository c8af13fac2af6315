#include "meshflow/ops/shared_kernels.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "meshflow/ops/kernels.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {
namespace {

namespace ew = elementwise;
using Locals = std::span<const Tensor* const>;

static_assert(static_cast<int>(ew::ElemType::kF32) == static_cast<int>(DType::kF32) &&
                  static_cast<int>(ew::ElemType::kF64) == static_cast<int>(DType::kF64) &&
                  static_cast<int>(ew::ElemType::kBF16) == static_cast<int>(DType::kBF16) &&
                  static_cast<int>(ew::ElemType::kI32) == static_cast<int>(DType::kI32) &&
                  static_cast<int>(ew::ElemType::kI64) == static_cast<int>(DType::kI64),
              "elementwise::ElemType mirrors DType");

ew::ElemType ElemOf(DType t) { return static_cast<ew::ElemType>(static_cast<int>(t)); }

// What one op's kernel needs besides its operands.
struct Env {
  KernelBackend& backend;
  const KernelContext& ctx;
  const DeviceVocabShard* vocab;  // null: not vocab-parallel
};

// ---- Checks (the CPU kernels' messages) ----

Status CheckFloat(std::string_view op, DType t) {
  if (IsFloatDType(t)) return Status::Ok();
  return UnimplementedError(std::string(op) + ": dtype " + std::string(DTypeName(t)) +
                            " not supported (f32, f64, bf16 only)");
}

Status CheckSameDType(std::string_view op, const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype()) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": dtypes differ: " + std::string(DTypeName(a.dtype())) + " vs " +
                              std::string(DTypeName(b.dtype())));
}

Status CheckSameFloat(std::string_view op, const Tensor& a, const Tensor& b) {
  MF_RETURN_IF_ERROR(CheckFloat(op, a.dtype()));
  return CheckSameDType(op, a, b);
}

Status CheckIds(std::string_view op, std::string_view what, const Tensor& ids) {
  if (IsIntDType(ids.dtype())) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + std::string(what) + " dtype " +
                              std::string(DTypeName(ids.dtype())) + " must be i32 or i64");
}

// ---- Shapes and index maps ----

int64_t Product(std::span<const int64_t> s) {
  int64_t p = 1;
  for (int64_t v : s) p *= v;
  return p;
}

// The iteration space `shape` with N operands' strides, size-1 dims dropped and dims merged
// where every operand is contiguous across them. Errors: more than kMaxDims dims remain.
template <int N>
StatusOr<ew::IndexMap<N>> MakeMap(std::string_view op, std::span<const int64_t> shape,
                                  const std::array<std::vector<int64_t>, N>& strides,
                                  const std::array<int64_t, N>& base = {}) {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (int o = 0; o < N && merge; ++o) merge = st.back()[o] == strides[o][d] * shape[d];
    std::array<int64_t, N> s;
    for (int o = 0; o < N; ++o) s[o] = strides[o][d];
    if (merge) {
      sizes.back() *= shape[d];
      st.back() = s;
    } else {
      sizes.push_back(shape[d]);
      st.push_back(s);
    }
  }
  if (sizes.size() > static_cast<size_t>(ew::kMaxDims)) {
    return UnimplementedError(std::string(op) + ": shape " + ShapeString(shape) + " needs " +
                              std::to_string(sizes.size()) + " non-contiguous dims; the device kernels take at most " +
                              std::to_string(ew::kMaxDims));
  }
  ew::IndexMap<N> m;
  m.ndim = static_cast<int>(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    m.shape[k] = sizes[k];
    for (int o = 0; o < N; ++o) m.stride[o][k] = st[k][o];
  }
  for (int o = 0; o < N; ++o) m.base[o] = base[o];
  return m;
}

template <class A>
Status Launch(KernelBackend& be, ew::Body body, const A& args, int64_t n) {
  if (n <= 0) return Status::Ok();
  return be.Run(body, &args, n);
}

// dst (shape `iter` walked with dst_strides from dst_base) = src (src_strides from src_base).
Status StridedCopy(KernelBackend& be, std::string_view op, const void* src, void* dst, int64_t elem_size,
                   std::span<const int64_t> iter, std::vector<int64_t> src_strides, std::vector<int64_t> dst_strides,
                   int64_t src_base = 0, int64_t dst_base = 0) {
  ew::CopyArgs a;
  a.elem_size = elem_size;
  a.src = src;
  a.dst = dst;
  MF_ASSIGN_OR_RETURN(a.map,
                      MakeMap<2>(op, iter, {std::move(src_strides), std::move(dst_strides)}, {src_base, dst_base}));
  return Launch(be, ew::Body::kCopy, a, Product(iter));
}

// The bits an embedding row gets for an id outside [0, V): a quiet NaN of the dtype (0: integers).
uint64_t PoisonBits(DType t) {
  switch (t) {
    case DType::kF32: return 0x7fc00000u;
    case DType::kF64: return 0x7ff8000000000000ull;
    case DType::kBF16: return 0x7fc0u;
    default: return 0;
  }
}

// ---- matmul ----

StatusOr<Tensor> Kernel(const MatmulParams&, Locals x, Env& env) {
  const Tensor &a = *x[0], &b = *x[1];
  MF_RETURN_IF_ERROR(CheckSameFloat("matmul", a, b));
  if (a.rank() < 1 || b.rank() < 1) {
    return InvalidArgumentError("matmul: operands need rank >= 1, got shapes " + ShapeString(a.shape()) + " and " +
                                ShapeString(b.shape()));
  }
  // numpy: [k] is a row (a) / column (b), then dropped. The bytes are the same.
  const std::vector<int64_t> as = a.rank() == 1 ? std::vector<int64_t>{1, a.shape()[0]} : a.shape();
  const std::vector<int64_t> bs = b.rank() == 1 ? std::vector<int64_t>{b.shape()[0], 1} : b.shape();
  if (as[as.size() - 1] != bs[bs.size() - 2]) {
    return InvalidArgumentError("matmul: contracting sizes differ: a " + ShapeString(as) + ", b " + ShapeString(bs));
  }
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> full,
                      BroadcastShapes("matmul batch dims", std::span<const int64_t>(as.data(), as.size() - 2),
                                      std::span<const int64_t>(bs.data(), bs.size() - 2)));
  full.insert(full.end(), {as[as.size() - 2], bs[bs.size() - 1]});
  std::vector<int64_t> shape = full;  // the same elements without the rank-1 operands' dims
  if (b.rank() == 1) shape.pop_back();
  if (a.rank() == 1) shape.erase(shape.end() - (b.rank() == 1 ? 1 : 2));
  MF_ASSIGN_OR_RETURN(Tensor c, env.backend.Allocate(a.dtype(), shape));
  if (a.dtype() != DType::kBF16) {
    MF_RETURN_IF_ERROR(env.backend.Matmul(a.raw(), as, b.raw(), bs, c.raw(), a.dtype()));
    return c;
  }
  // bf16: in f32, rounded once.
  std::array<Tensor, 3> f;
  const std::array<const std::vector<int64_t>*, 3> shapes = {&as, &bs, &full};
  for (int i = 0; i < 3; ++i) {
    MF_ASSIGN_OR_RETURN(f[i], env.backend.Allocate(DType::kF32, *shapes[i]));
  }
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kConvert, ew::ConvertArgs{false, a.raw(), f[0].raw()}, Product(as)));
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kConvert, ew::ConvertArgs{false, b.raw(), f[1].raw()}, Product(bs)));
  MF_RETURN_IF_ERROR(env.backend.Matmul(f[0].raw(), as, f[1].raw(), bs, f[2].raw(), DType::kF32));
  MF_RETURN_IF_ERROR(
      Launch(env.backend, ew::Body::kConvert, ew::ConvertArgs{true, f[2].raw(), c.raw()}, Product(full)));
  return c;
}

// ---- binary, unary, compare, where, expand ----

// Runs `body` (binary or compare; `args` has its op set) over a and b broadcast (numpy) into a new
// tensor of a's dtype.
StatusOr<Tensor> LaunchBroadcastPair(std::string_view name, ew::Body body, ew::BinaryArgs args, const Tensor& a,
                                     const Tensor& b, Env& env) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(name, a.shape(), b.shape()));
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(a.dtype(), out));
  args.type = ElemOf(a.dtype());
  args.a = a.raw();
  args.b = b.raw();
  args.out = y.raw();
  MF_ASSIGN_OR_RETURN(args.map,
                      MakeMap<2>(name, out, {BroadcastStrides(a.shape(), out), BroadcastStrides(b.shape(), out)}));
  MF_RETURN_IF_ERROR(Launch(env.backend, body, args, y.NumElements()));
  return y;
}

StatusOr<Tensor> Kernel(const BinaryParams& p, Locals x, Env& env) {
  const Tensor &a = *x[0], &b = *x[1];
  const std::string_view name = BinaryOpName(p.op);
  const bool integer = p.op != BinaryOp::kDiv && IsIntDType(a.dtype()) && a.dtype() == b.dtype();
  if (!integer) MF_RETURN_IF_ERROR(CheckSameFloat(name, a, b));
  ew::BinaryArgs args;
  args.op = p.op;
  return LaunchBroadcastPair(name, ew::Body::kBinary, args, a, b, env);
}

StatusOr<Tensor> Kernel(const UnaryParams& p, Locals x, Env& env) {
  const Tensor& v = *x[0];
  if (!(p.op == UnaryOp::kNeg && IsIntDType(v.dtype()))) MF_RETURN_IF_ERROR(CheckFloat(UnaryOpName(p.op), v.dtype()));
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(v.dtype(), v.shape()));
  const ew::UnaryArgs args{ElemOf(v.dtype()), p.op, p.alpha, v.raw(), y.raw()};
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kUnary, args, y.NumElements()));
  return y;
}

StatusOr<Tensor> Kernel(const CompareParams& p, Locals x, Env& env) {
  const Tensor &a = *x[0], &b = *x[1];
  const std::string_view name = CompareOpName(p.op);
  MF_RETURN_IF_ERROR(CheckSameDType(name, a, b));
  ew::BinaryArgs args;
  args.compare = p.op;
  return LaunchBroadcastPair(name, ew::Body::kCompare, args, a, b, env);
}

StatusOr<Tensor> Kernel(const WhereParams&, Locals x, Env& env) {
  const Tensor &cond = *x[0], &a = *x[1], &b = *x[2];
  if (a.dtype() != b.dtype()) {
    return InvalidArgumentError("where: dtypes of a and b differ: " + std::string(DTypeName(a.dtype())) + " vs " +
                                std::string(DTypeName(b.dtype())));
  }
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> ab, BroadcastShapes("where", a.shape(), b.shape()));
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes("where", cond.shape(), ab));
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(a.dtype(), out));
  ew::WhereArgs args;
  args.cond_type = ElemOf(cond.dtype());
  args.elem_size = DTypeSize(a.dtype());
  args.cond = cond.raw();
  args.a = a.raw();
  args.b = b.raw();
  args.out = y.raw();
  MF_ASSIGN_OR_RETURN(args.map, MakeMap<3>("where", out,
                                           {BroadcastStrides(cond.shape(), out), BroadcastStrides(a.shape(), out),
                                            BroadcastStrides(b.shape(), out)}));
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kWhere, args, y.NumElements()));
  return y;
}

StatusOr<Tensor> Kernel(const ExpandParams& p, Locals x, Env& env) {
  const Tensor& v = *x[0];
  const std::vector<int64_t>& shape = env.ctx.out_shape ? *env.ctx.out_shape : p.shape;
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes("expand", v.shape(), shape));
  if (out != shape) {
    return InvalidArgumentError("expand: shape " + ShapeString(v.shape()) + " does not broadcast to " +
                                ShapeString(shape));
  }
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(v.dtype(), out));
  MF_RETURN_IF_ERROR(StridedCopy(env.backend, "expand", v.raw(), y.raw(), DTypeSize(v.dtype()), out,
                                 BroadcastStrides(v.shape(), out), RowMajorStrides(out)));
  return y;
}

// ---- reductions and softmax ----

StatusOr<Tensor> Kernel(const ReduceParams& p, Locals x, Env& env) {
  const Tensor& v = *x[0];
  const std::string_view name = ReduceKindName(p.kind);
  MF_ASSIGN_OR_RETURN(std::vector<int> dims, NormalizeReduceDims(v.shape(), p.dims));
  const bool integer = p.kind != ReduceKind::kMean && IsIntDType(v.dtype());
  if (!integer) MF_RETURN_IF_ERROR(CheckFloat(name, v.dtype()));
  std::vector<bool> reduced(v.shape().size(), false);
  for (int d : dims) reduced[static_cast<size_t>(d)] = true;
  const std::vector<int64_t> strides = RowMajorStrides(v.shape());
  std::vector<int64_t> out_shape, kept_shape, kept_strides, red_shape, red_strides;
  for (size_t d = 0; d < v.shape().size(); ++d) {
    if (!reduced[d] || p.keepdim) out_shape.push_back(reduced[d] ? 1 : v.shape()[d]);
    (reduced[d] ? red_shape : kept_shape).push_back(v.shape()[d]);
    (reduced[d] ? red_strides : kept_strides).push_back(strides[d]);
  }
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(v.dtype(), out_shape));
  ew::ReduceArgs args;
  args.type = ElemOf(v.dtype());
  args.kind = p.kind;
  args.x = v.raw();
  args.out = y.raw();
  MF_ASSIGN_OR_RETURN(args.kept, MakeMap<1>(name, kept_shape, {kept_strides}));
  MF_ASSIGN_OR_RETURN(ew::IndexMap<1> red, MakeMap<1>(name, red_shape, {red_strides}));
  args.red_ndim = red.ndim;
  for (int k = 0; k < red.ndim; ++k) {
    args.red_shape[k] = red.shape[k];
    args.red_stride[k] = red.stride[0][k];
  }
  args.red_count = Product(red_shape);
  const int64_t mean_count = integer ? -1 : env.ctx.mean_count;
  args.mean_div = static_cast<double>(mean_count >= 0 ? mean_count : args.red_count);
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kReduce, args, y.NumElements()));
  return y;
}

StatusOr<Tensor> Kernel(const SoftmaxParams& p, Locals x, Env& env) {
  const Tensor& v = *x[0];
  const char* name = p.log ? "log_softmax" : "softmax";
  MF_RETURN_IF_ERROR(CheckFloat(name, v.dtype()));
  const int d = p.dim < 0 ? p.dim + v.rank() : p.dim;
  if (d < 0 || d >= v.rank()) {
    return InvalidArgumentError(std::string(name) + ": dim " + std::to_string(p.dim) + " out of range for shape " +
                                ShapeString(v.shape()));
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= v.shape()[i];
  for (int i = d + 1; i < v.rank(); ++i) inner *= v.shape()[i];
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(v.dtype(), v.shape()));
  MF_ASSIGN_OR_RETURN(Tensor stats, env.backend.Allocate(DType::kF64, {2 * outer * inner}));
  ew::SoftmaxArgs args;
  args.type = ElemOf(v.dtype());
  args.log_softmax = p.log;
  args.x = v.raw();
  args.y = y.raw();
  args.stats = reinterpret_cast<double*>(stats.raw());
  args.n = v.shape()[d];
  args.inner = inner;
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kSoftmaxStats, args, outer * inner));
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kSoftmaxApply, args, y.NumElements()));
  return y;
}

// ---- data movement ----

StatusOr<Tensor> PermuteOn(const Tensor& v, std::span<const int> perm, Env& env) {
  const int rank = v.rank();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool ok = static_cast<int>(perm.size()) == rank;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    const int d = perm[i] < 0 ? perm[i] + rank : perm[i];
    ok = d >= 0 && d < rank && !seen[static_cast<size_t>(d)];
    if (ok) seen[static_cast<size_t>(d)] = true;
  }
  if (!ok) return PermuteRule(v.shape(), perm).status();  // the rule's error message
  const std::vector<int64_t> in_strides = RowMajorStrides(v.shape());
  std::vector<int64_t> src_strides, out_shape;
  for (int p : perm) {
    const int d = p < 0 ? p + rank : p;
    src_strides.push_back(in_strides[static_cast<size_t>(d)]);
    out_shape.push_back(v.shape()[static_cast<size_t>(d)]);
  }
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(v.dtype(), out_shape));
  MF_RETURN_IF_ERROR(StridedCopy(env.backend, "permute", v.raw(), y.raw(), DTypeSize(v.dtype()), out_shape,
                                 std::move(src_strides), RowMajorStrides(out_shape)));
  return y;
}

StatusOr<Tensor> Kernel(const PermuteParams& p, Locals x, Env& env) { return PermuteOn(*x[0], p.perm, env); }

StatusOr<Tensor> Kernel(const TransposeParams& p, Locals x, Env& env) {
  MF_ASSIGN_OR_RETURN(std::vector<int> perm, TransposePerm(x[0]->rank(), p.dim0, p.dim1));
  return PermuteOn(*x[0], perm, env);
}

StatusOr<Tensor> Kernel(const ReshapeParams& p, Locals x, Env& env) {
  const Tensor& v = *x[0];
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> out,
                      ResolveReshape(v.shape(), env.ctx.out_shape ? *env.ctx.out_shape : p.shape));
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(v.dtype(), std::move(out)));
  if (v.NumBytes() > 0) MF_RETURN_IF_ERROR(env.backend.Copy(y.raw(), v.raw(), v.NumBytes()));
  return y;
}

StatusOr<Tensor> Kernel(const ConcatParams& p, Locals xs, Env& env) {
  if (xs.empty()) return InvalidArgumentError("concat: no operands");
  const int rank = xs[0]->rank();
  const int d = p.dim < 0 ? p.dim + rank : p.dim;
  bool ok = rank > 0 && d >= 0 && d < rank;
  std::vector<int64_t> out_shape = xs[0]->shape();
  if (ok) out_shape[static_cast<size_t>(d)] = 0;
  for (size_t i = 0; ok && i < xs.size(); ++i) {
    ok = xs[i]->rank() == rank;
    for (int j = 0; ok && j < rank; ++j) ok = j == d || xs[i]->shape()[j] == out_shape[j];
    if (ok) out_shape[static_cast<size_t>(d)] += xs[i]->shape()[d];
  }
  if (!ok) {  // the rule's error message
    std::vector<const std::vector<int64_t>*> shapes;
    for (const Tensor* x : xs) shapes.push_back(&x->shape());
    return ConcatRule(shapes, p.dim).status();
  }
  for (size_t i = 1; i < xs.size(); ++i) {
    if (xs[i]->dtype() != xs[0]->dtype()) {
      return InvalidArgumentError("concat: dtypes differ: " + std::string(DTypeName(xs[0]->dtype())) + " vs " +
                                  std::string(DTypeName(xs[i]->dtype())) + " (operand " + std::to_string(i) + ")");
    }
  }
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(xs[0]->dtype(), out_shape));
  const std::vector<int64_t> out_strides = RowMajorStrides(out_shape);
  int64_t offset = 0;
  for (const Tensor* x : xs) {
    MF_RETURN_IF_ERROR(StridedCopy(env.backend, "concat", x->raw(), y.raw(), DTypeSize(x->dtype()), x->shape(),
                                   RowMajorStrides(x->shape()), out_strides, 0, offset * out_strides[d]));
    offset += x->shape()[d];
  }
  return y;
}

StatusOr<Tensor> Kernel(const SliceParams& p, Locals x, Env& env) {
  const Tensor& v = *x[0];
  int64_t start = p.start, end = p.end;
  if (env.ctx.slice_local) {
    const auto [local_start, size] = *env.ctx.slice_local;
    start = local_start;
    end = size > 0 ? local_start + (size - 1) * p.step + 1 : local_start;
  }
  MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(v.shape(), p.dim, start, end, p.step));
  std::vector<int64_t> out_shape = v.shape();
  out_shape[static_cast<size_t>(s.dim)] = s.size;
  std::vector<int64_t> src_strides = RowMajorStrides(v.shape());
  const int64_t base = s.start * src_strides[static_cast<size_t>(s.dim)];
  src_strides[static_cast<size_t>(s.dim)] *= s.step;
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(v.dtype(), out_shape));
  MF_RETURN_IF_ERROR(StridedCopy(env.backend, "slice", v.raw(), y.raw(), DTypeSize(v.dtype()), out_shape,
                                 std::move(src_strides), RowMajorStrides(out_shape), base, 0));
  return y;
}

StatusOr<Tensor> Kernel(const SliceGradParams& p, Locals x, Env& env) {
  const Tensor& g = *x[0];
  const std::vector<int64_t>& shape = env.ctx.out_shape ? *env.ctx.out_shape : p.input_shape;
  const SliceParams& sp = p.slice;
  MF_RETURN_IF_ERROR(SliceGradRule(g.shape(), shape, sp.dim, sp.start, sp.end, sp.step).status());
  MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(shape, sp.dim, sp.start, sp.end, sp.step));
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(g.dtype(), shape));
  if (y.NumBytes() > 0) MF_RETURN_IF_ERROR(env.backend.Zero(y.raw(), y.NumBytes()));
  std::vector<int64_t> dst_strides = RowMajorStrides(shape);
  const int64_t base = s.start * dst_strides[static_cast<size_t>(s.dim)];
  dst_strides[static_cast<size_t>(s.dim)] *= s.step;
  MF_RETURN_IF_ERROR(StridedCopy(env.backend, "slice_grad", g.raw(), y.raw(), DTypeSize(g.dtype()), g.shape(),
                                 RowMajorStrides(g.shape()), std::move(dst_strides), 0, base));
  return y;
}

// ---- norms, embedding ----

StatusOr<Tensor> Kernel(const NormParams& p, Locals x, Env& env) {
  const Tensor& v = *x[0];
  const Tensor* weight = p.has_weight ? x[1] : nullptr;
  const Tensor* bias = p.has_bias ? x[p.has_weight ? 2 : 1] : nullptr;
  const std::string_view name = NormKindName(p.kind);
  MF_RETURN_IF_ERROR(CheckFloat(name, v.dtype()));
  for (const Tensor* t : {weight, bias}) {
    if (t != nullptr) MF_RETURN_IF_ERROR(CheckSameFloat(name, v, *t));
  }
  const int nd = p.normalized_ndim;
  bool ok = nd >= 1 && nd <= v.rank();
  for (const Tensor* t : {weight, bias}) {
    ok =
        ok && (t == nullptr || std::equal(t->shape().begin(), t->shape().end(), v.shape().end() - nd, v.shape().end()));
  }
  if (!ok) {  // the rule's error message
    return NormRule(p.kind, v.shape(), nd, weight ? &weight->shape() : nullptr, bias ? &bias->shape() : nullptr)
        .status();
  }
  const int64_t inner = Product(std::span<const int64_t>(v.shape()).last(static_cast<size_t>(nd)));
  const int64_t rows = inner == 0 ? 0 : v.NumElements() / inner;
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(v.dtype(), v.shape()));
  MF_ASSIGN_OR_RETURN(Tensor stats, env.backend.Allocate(DType::kF64, {2 * rows}));
  ew::NormArgs args;
  args.type = ElemOf(v.dtype());
  args.kind = p.kind;
  args.x = v.raw();
  args.w = weight ? weight->raw() : nullptr;
  args.b = bias ? bias->raw() : nullptr;
  args.y = y.raw();
  args.stats = reinterpret_cast<double*>(stats.raw());
  args.inner = inner;
  args.eps = p.eps;
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kNormStats, args, rows));
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kNormApply, args, rows * inner));
  return y;
}

StatusOr<Tensor> Kernel(const EmbeddingParams&, Locals x, Env& env) {
  const Tensor &table = *x[0], &ids = *x[1];
  if (table.rank() != 2) return EmbeddingRule(table.shape(), ids.shape()).status();
  MF_RETURN_IF_ERROR(CheckIds("embedding", "ids", ids));
  std::vector<int64_t> out_shape = ids.shape();
  out_shape.push_back(table.shape()[1]);
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(table.dtype(), out_shape));
  ew::EmbeddingArgs args;
  args.elem_size = DTypeSize(table.dtype());
  args.ids_type = ElemOf(ids.dtype());
  args.table = table.raw();
  args.ids = ids.raw();
  args.out = y.raw();
  args.d = table.shape()[1];
  args.rows = table.shape()[0];
  args.row_offset = env.ctx.row_offset;
  args.num_rows = env.ctx.global_rows >= 0 ? env.ctx.global_rows : args.rows;
  args.poison = PoisonBits(table.dtype());
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kEmbedding, args, y.NumElements()));
  return y;
}

StatusOr<Tensor> Kernel(const EmbeddingGradParams& p, Locals x, Env& env) {
  const Tensor &g = *x[0], &ids = *x[1];
  const int64_t rows = env.ctx.out_shape ? (*env.ctx.out_shape)[0] : p.num_rows;
  MF_RETURN_IF_ERROR(CheckIds("embedding_grad", "ids", ids));
  MF_RETURN_IF_ERROR(CheckFloat("embedding_grad", g.dtype()));
  MF_RETURN_IF_ERROR(EmbeddingGradRule(g.shape(), ids.shape(), rows).status());
  ew::EmbeddingGradArgs a;
  a.type = ElemOf(g.dtype());
  a.ids_type = ElemOf(ids.dtype());
  a.grad = g.raw();
  a.ids = ids.raw();
  a.n = ids.NumElements();
  a.d = g.shape().back();
  a.rows = rows;
  a.row_offset = env.ctx.row_offset;
  a.num_rows = env.ctx.global_rows >= 0 ? env.ctx.global_rows : p.num_rows;
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(g.dtype(), {rows, a.d}));
  a.out = y.raw();
  std::array<Tensor, 5> t;  // keys, positions, sorted keys, sorted positions, starts
  for (int i = 0; i < 5; ++i) {
    MF_ASSIGN_OR_RETURN(t[i], env.backend.Allocate(DType::kI64, {i < 4 ? a.n : rows + 1}));
  }
  a.keys = reinterpret_cast<int64_t*>(t[0].raw());
  a.positions = reinterpret_cast<int64_t*>(t[1].raw());
  a.sorted_keys = reinterpret_cast<const int64_t*>(t[2].raw());
  a.sorted_positions = reinterpret_cast<const int64_t*>(t[3].raw());
  a.starts = reinterpret_cast<int64_t*>(t[4].raw());
  int key_bits = 1;
  while (key_bits < 63 && (int64_t{1} << key_bits) <= rows) ++key_bits;
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kEmbeddingGradKeys, a, a.n));
  if (a.n > 0) {
    MF_RETURN_IF_ERROR(env.backend.SortPairs(a.keys, reinterpret_cast<int64_t*>(t[2].raw()), a.positions,
                                             reinterpret_cast<int64_t*>(t[3].raw()), a.n, key_bits));
  }
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kEmbeddingGradStarts, a, rows + 1));
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kEmbeddingGradSum, a, rows * a.d));
  return y;
}

// ---- cross-entropy and its gradient ----

// The row statistics of both: row max, [all-reduce max], row sum, [all-reduce sum]. The forward
// skips the all-reduces on zero rows, the gradient does not (the CPU kernels' behaviour).
Status CrossEntropyStats(ew::CrossEntropyArgs& a, bool reduce_empty, Env& env) {
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kCeRowMax, a, a.rows));
  const bool reduce = env.vocab != nullptr && (a.rows > 0 || reduce_empty);
  if (reduce) MF_RETURN_IF_ERROR(env.vocab->all_reduce(a.mx, a.rows, DType::kF64, ReduceOp::kMax));
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kCeRowSum, a, a.rows));
  if (reduce) MF_RETURN_IF_ERROR(env.vocab->all_reduce(a.sum, a.rows, DType::kF64, ReduceOp::kSum));
  return Status::Ok();
}

// Arguments and the max / sum / loss buffers (kept alive by `buffers`).
StatusOr<ew::CrossEntropyArgs> CrossEntropySetup(const Tensor& logits, const Tensor& targets, LossReduction reduction,
                                                 Env& env, std::array<Tensor, 3>& buffers) {
  ew::CrossEntropyArgs a;
  a.type = ElemOf(logits.dtype());
  a.ids_type = ElemOf(targets.dtype());
  a.reduction = reduction;
  a.owner = env.vocab == nullptr || env.vocab->owner;
  a.logits = logits.raw();
  a.targets = targets.raw();
  a.rows = targets.NumElements();
  a.c = logits.shape().back();
  a.class_offset = env.vocab != nullptr ? env.vocab->class_offset : 0;
  a.num_classes = env.vocab != nullptr ? env.vocab->num_classes : a.c;
  const int64_t count = env.ctx.mean_count >= 0 ? env.ctx.mean_count : a.rows;
  a.div = reduction == LossReduction::kMean ? static_cast<double>(count) : 1.0;
  for (Tensor& b : buffers) {
    MF_ASSIGN_OR_RETURN(b, env.backend.Allocate(DType::kF64, {a.rows}));
  }
  a.mx = reinterpret_cast<double*>(buffers[0].raw());
  a.sum = reinterpret_cast<double*>(buffers[1].raw());
  a.loss = reinterpret_cast<double*>(buffers[2].raw());
  return a;
}

StatusOr<Tensor> Kernel(const CrossEntropyParams& p, Locals x, Env& env) {
  const Tensor &logits = *x[0], &targets = *x[1];
  MF_RETURN_IF_ERROR(CheckFloat("cross_entropy", logits.dtype()));
  MF_RETURN_IF_ERROR(CheckIds("cross_entropy", "targets", targets));
  if (logits.rank() == 0 ||
      !std::equal(targets.shape().begin(), targets.shape().end(), logits.shape().begin(), logits.shape().end() - 1)) {
    return CrossEntropyRule(logits.shape(), targets.shape(), p.reduction).status();
  }
  std::array<Tensor, 3> buffers;
  MF_ASSIGN_OR_RETURN(ew::CrossEntropyArgs a, CrossEntropySetup(logits, targets, p.reduction, env, buffers));
  const bool none = p.reduction == LossReduction::kNone;
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(logits.dtype(), none ? targets.shape() : std::vector<int64_t>{}));
  a.out = y.raw();
  MF_RETURN_IF_ERROR(CrossEntropyStats(a, /*reduce_empty=*/false, env));
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kCeRowLoss, a, a.rows));
  if (!none) MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kCeTotal, a, 1));
  return y;
}

StatusOr<Tensor> Kernel(const CrossEntropyGradParams& p, Locals x, Env& env) {
  const Tensor &logits = *x[0], &targets = *x[1], &g = *x[2];
  MF_RETURN_IF_ERROR(CheckFloat("cross_entropy_grad", logits.dtype()));
  MF_RETURN_IF_ERROR(CheckIds("cross_entropy_grad", "ids", targets));
  MF_RETURN_IF_ERROR(CrossEntropyGradRule(logits.shape(), targets.shape(), g.shape(), p.reduction).status());
  std::array<Tensor, 3> buffers;
  MF_ASSIGN_OR_RETURN(ew::CrossEntropyArgs a, CrossEntropySetup(logits, targets, p.reduction, env, buffers));
  a.grad = g.raw();
  a.grad_type = ElemOf(g.dtype());
  MF_ASSIGN_OR_RETURN(Tensor y, env.backend.Allocate(logits.dtype(), logits.shape()));
  a.out = y.raw();
  MF_RETURN_IF_ERROR(CrossEntropyStats(a, /*reduce_empty=*/true, env));
  MF_RETURN_IF_ERROR(Launch(env.backend, ew::Body::kCeGrad, a, y.NumElements()));
  return y;
}

Status CheckCount(const OpSpec& op, size_t n) {
  if (const auto* c = op.get<ConcatParams>(); c != nullptr && c->num_inputs < 1) {
    return InvalidArgumentError(op.ToString() + ": num_inputs " + std::to_string(c->num_inputs) + " must be >= 1");
  }
  if (static_cast<int>(n) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) + " operands, got " +
                                std::to_string(n));
  }
  return Status::Ok();
}

}  // namespace

// ---- HostLoopBackend ----

namespace {
struct HostExec {
  template <class F, class A>
  void Run(const A& args, int64_t n) {
    const F f{};
    for (int64_t i = 0; i < n; ++i) f(args, i);
  }
};
}  // namespace

StatusOr<Tensor> HostLoopBackend::Allocate(DType dtype, std::vector<int64_t> shape) {
  for (int64_t s : shape) {
    if (s < 0) return InvalidArgumentError("allocate: negative size in shape " + ShapeString(shape));
  }
  return Tensor::Uninitialized(dtype, std::move(shape));
}

Status HostLoopBackend::Run(elementwise::Body body, const void* args, int64_t n) {
  HostExec exec;
  elementwise::DispatchBody(exec, body, args, n);
  return Status::Ok();
}

Status HostLoopBackend::Copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  return Status::Ok();
}

Status HostLoopBackend::Zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
  return Status::Ok();
}

Status HostLoopBackend::SortPairs(const int64_t* keys_in, int64_t* keys_out, const int64_t* values_in,
                                  int64_t* values_out, int64_t n, int) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys_in[a] < keys_in[b]; });
  for (int64_t i = 0; i < n; ++i) {
    keys_out[i] = keys_in[order[static_cast<size_t>(i)]];
    values_out[i] = values_in[order[static_cast<size_t>(i)]];
  }
  return Status::Ok();
}

Status HostLoopBackend::Matmul(const void* a, std::span<const int64_t> a_shape, const void* b,
                               std::span<const int64_t> b_shape, void* c, DType dtype) {
  Tensor ta = Tensor::Uninitialized(dtype, std::vector<int64_t>(a_shape.begin(), a_shape.end()));
  Tensor tb = Tensor::Uninitialized(dtype, std::vector<int64_t>(b_shape.begin(), b_shape.end()));
  MF_RETURN_IF_ERROR(Copy(ta.raw(), a, ta.NumBytes()));
  MF_RETURN_IF_ERROR(Copy(tb.raw(), b, tb.NumBytes()));
  MF_ASSIGN_OR_RETURN(Tensor tc, MatmulKernel(ta, tb));
  return Copy(c, tc.raw(), tc.NumBytes());
}

// ---- Entry points ----

StatusOr<Tensor> RunSharedKernel(const OpSpec& op, Locals operands, const KernelContext& ctx, KernelBackend& backend) {
  MF_RETURN_IF_ERROR(CheckCount(op, operands.size()));
  Env env{backend, ctx, nullptr};
  return std::visit([&](const auto& p) { return Kernel(p, operands, env); }, op.params);
}

StatusOr<Tensor> RunSharedVocabParallel(const OpSpec& op, Locals operands, const KernelContext& ctx,
                                        const DeviceVocabShard& vocab, KernelBackend& backend) {
  if (op.get<CrossEntropyParams>() == nullptr && op.get<CrossEntropyGradParams>() == nullptr) {
    return InvalidArgumentError("RunVocabParallel: " + op.ToString() + " is not cross_entropy(_grad)");
  }
  if (!vocab.all_reduce) return InvalidArgumentError(op.ToString() + ": vocab shard without all_reduce");
  MF_RETURN_IF_ERROR(CheckCount(op, operands.size()));
  Env env{backend, ctx, &vocab};
  return std::visit([&](const auto& p) { return Kernel(p, operands, env); }, op.params);
}

}  // namespace meshflow
