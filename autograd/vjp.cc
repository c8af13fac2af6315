#include "meshflow/autograd/vjp.h"

#include <string>
#include <utility>

#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {
namespace {

using Grads = std::vector<std::optional<DTensor>>;

StatusOr<DTensor> Run(const OpSpec& op, std::initializer_list<const DTensor*> in, MeshComms& comms) {
  return RunOp(op, std::span<const DTensor* const>(in.begin(), in.size()), comms);
}

Status NoDoubleBackward(const OpSpec& op) {
  return UnimplementedError("no gradient for " + op.ToString() +
                            " (it is itself a gradient op: double backward is not supported)");
}

int NormDim(int d, int rank) { return d < 0 ? d + rank : d; }

// x's shape with the reduced dims set to 1.
std::vector<int64_t> KeepShape(const std::vector<int64_t>& x, const std::vector<int>& dims) {
  std::vector<int64_t> s = x;
  for (int d : dims) s[static_cast<size_t>(d)] = 1;
  return s;
}

StatusOr<Grads> UnaryVjp(const OpSpec& op, const UnaryParams& p, const DTensor& x, const DTensor& y, const DTensor& g, MeshComms& c) {
  auto times = [&](StatusOr<DTensor> d) -> StatusOr<Grads> {
    MF_RETURN_IF_ERROR(d.status());
    MF_ASSIGN_OR_RETURN(DTensor r, Mul(g, *d, c));
    return Grads{std::move(r)};
  };
  switch (p.op) {
    case UnaryOp::kNeg: {
      MF_ASSIGN_OR_RETURN(DTensor r, Neg(g, c));
      return Grads{std::move(r)};
    }
    case UnaryOp::kScale: {
      MF_ASSIGN_OR_RETURN(DTensor r, Scale(g, p.alpha, c));
      return Grads{std::move(r)};
    }
    case UnaryOp::kAddScalar: return Grads{g};
    case UnaryOp::kRelu: return times(Run(OpSpec::Unary(UnaryOp::kStep), {&x}, c));
    case UnaryOp::kExp: return times(y);
    case UnaryOp::kGelu: return times(Run(OpSpec::Unary(UnaryOp::kGeluDeriv), {&x}, c));
    case UnaryOp::kTanh: return times(Run(OpSpec::Unary(UnaryOp::kTanhDeriv), {&x}, c));
    case UnaryOp::kSigmoid: return times(Run(OpSpec::Unary(UnaryOp::kSigmoidDeriv), {&x}, c));
    case UnaryOp::kSilu: return times(Run(OpSpec::Unary(UnaryOp::kSiluDeriv), {&x}, c));
    case UnaryOp::kSqrt: {  // 0.5 / sqrt(x)
      MF_ASSIGN_OR_RETURN(DTensor q, Div(g, y, c));
      MF_ASSIGN_OR_RETURN(DTensor r, Scale(q, 0.5, c));
      return Grads{std::move(r)};
    }
    case UnaryOp::kRsqrt: {  // -0.5 x^-1.5 = -0.5 y^3
      MF_ASSIGN_OR_RETURN(DTensor y3, Pow(y, 3.0, c));
      MF_ASSIGN_OR_RETURN(DTensor d, Scale(y3, -0.5, c));
      return times(d);
    }
    case UnaryOp::kPow: {  // p x^(p-1)
      MF_ASSIGN_OR_RETURN(DTensor xp, Pow(x, p.alpha - 1.0, c));
      MF_ASSIGN_OR_RETURN(DTensor d, Scale(xp, p.alpha, c));
      return times(d);
    }
    case UnaryOp::kLog: {
      MF_ASSIGN_OR_RETURN(DTensor r, Div(g, x, c));
      return Grads{std::move(r)};
    }
    case UnaryOp::kStep: return Grads{std::nullopt};  // zero almost everywhere
    case UnaryOp::kGeluDeriv:
    case UnaryOp::kSiluDeriv:
    case UnaryOp::kTanhDeriv:
    case UnaryOp::kSigmoidDeriv: return NoDoubleBackward(op);
  }
  return InternalError("unknown unary op");
}

StatusOr<Grads> BinaryVjp(const BinaryParams& p, const DTensor& a, const DTensor& b, const DTensor& y, const DTensor& g,
                          MeshComms& c) {
  const std::vector<int64_t>& sa = a.global_shape();
  const std::vector<int64_t>& sb = b.global_shape();
  switch (p.op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub: {
      MF_ASSIGN_OR_RETURN(DTensor ga, SumTo(g, sa, c));
      MF_ASSIGN_OR_RETURN(DTensor gb, SumTo(g, sb, c));
      if (p.op == BinaryOp::kSub) {
    MF_ASSIGN_OR_RETURN(gb, Neg(gb, c));
  }
      return Grads{std::move(ga), std::move(gb)};
    }
    case BinaryOp::kMul: {
      MF_ASSIGN_OR_RETURN(DTensor gab, Mul(g, b, c));
      MF_ASSIGN_OR_RETURN(DTensor gba, Mul(g, a, c));
      MF_ASSIGN_OR_RETURN(DTensor ga, SumTo(gab, sa, c));
      MF_ASSIGN_OR_RETURN(DTensor gb, SumTo(gba, sb, c));
      return Grads{std::move(ga), std::move(gb)};
    }
    case BinaryOp::kDiv: {  // d/da = 1/b, d/db = -a/b^2 = -y/b
      MF_ASSIGN_OR_RETURN(DTensor gdb, Div(g, b, c));
      MF_ASSIGN_OR_RETURN(DTensor gyb, Mul(gdb, y, c));
      MF_ASSIGN_OR_RETURN(DTensor ngyb, Neg(gyb, c));
      MF_ASSIGN_OR_RETURN(DTensor ga, SumTo(gdb, sa, c));
      MF_ASSIGN_OR_RETURN(DTensor gb, SumTo(ngyb, sb, c));
      return Grads{std::move(ga), std::move(gb)};
    }
  }
  return InternalError("unknown binary op");
}

StatusOr<Grads> ReduceVjp(const ReduceParams& p, const DTensor& x, const DTensor& y, const DTensor& g, MeshComms& c) {
  const std::vector<int64_t>& sx = x.global_shape();
  MF_ASSIGN_OR_RETURN(std::vector<int> dims, NormalizeReduceDims(sx, p.dims));
  const std::vector<int64_t> keep = KeepShape(sx, dims);
  DTensor gk = g;
  if (!p.keepdim) {
    MF_ASSIGN_OR_RETURN(gk, Reshape(g, keep, c));
  }
  switch (p.kind) {
    case ReduceKind::kSum: {
      MF_ASSIGN_OR_RETURN(DTensor r, Expand(gk, sx, c));
      return Grads{std::move(r)};
    }
    case ReduceKind::kMean: {
      int64_t count = 1;
      for (int d : dims) count *= sx[static_cast<size_t>(d)];
      MF_ASSIGN_OR_RETURN(DTensor e, Expand(gk, sx, c));
      MF_ASSIGN_OR_RETURN(DTensor r, Scale(e, count > 0 ? 1.0 / static_cast<double>(count) : 0.0, c));
      return Grads{std::move(r)};
    }
    case ReduceKind::kMax:
    case ReduceKind::kMin: {  // split equally between the tied extrema
      DTensor yk = y;
      if (!p.keepdim) {
    MF_ASSIGN_OR_RETURN(yk, Reshape(y, keep, c));
  }
      MF_ASSIGN_OR_RETURN(DTensor mask, Compare(CompareOp::kEq, x, yk, c));
      MF_ASSIGN_OR_RETURN(DTensor count, Sum(mask, dims, true, c));
      MF_ASSIGN_OR_RETURN(DTensor share, Div(gk, count, c));
      MF_ASSIGN_OR_RETURN(DTensor r, Mul(mask, share, c));
      return Grads{std::move(r)};
    }
  }
  return InternalError("unknown reduce kind");
}

StatusOr<Grads> SoftmaxVjp(const SoftmaxParams& p, const DTensor& y, const DTensor& g, MeshComms& c) {
  const std::vector<int> dim = {p.dim};
  if (p.log) {  // g - exp(y) * sum(g)
    MF_ASSIGN_OR_RETURN(DTensor s, Sum(g, dim, true, c));
    MF_ASSIGN_OR_RETURN(DTensor p, Exp(y, c));
    MF_ASSIGN_OR_RETURN(DTensor ps, Mul(p, s, c));
    MF_ASSIGN_OR_RETURN(DTensor r, Sub(g, ps, c));
    return Grads{std::move(r)};
  }
  // y * (g - sum(g * y))
  MF_ASSIGN_OR_RETURN(DTensor gy, Mul(g, y, c));
  MF_ASSIGN_OR_RETURN(DTensor s, Sum(gy, dim, true, c));
  MF_ASSIGN_OR_RETURN(DTensor d, Sub(g, s, c));
  MF_ASSIGN_OR_RETURN(DTensor r, Mul(y, d, c));
  return Grads{std::move(r)};
}

// Layer norm: xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased var); RMS norm:
// xhat = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps). y = xhat * w + b.
StatusOr<Grads> NormVjp(const NormParams& p, std::span<const DTensor* const> in, const DTensor& g, MeshComms& c) {
  const DTensor& x = *in[0];
  const int rank = static_cast<int>(x.global_shape().size());
  std::vector<int> dims;
  for (int d = rank - p.normalized_ndim; d < rank; ++d) dims.push_back(d);
  const bool layer = p.kind == NormKind::kLayerNorm;
  DTensor xc = x;
  if (layer) {
    MF_ASSIGN_OR_RETURN(DTensor mu, Mean(x, dims, true, c));
    MF_ASSIGN_OR_RETURN(xc, Sub(x, mu, c));
  }
  MF_ASSIGN_OR_RETURN(DTensor sq, Mul(xc, xc, c));
  MF_ASSIGN_OR_RETURN(DTensor var, Mean(sq, dims, true, c));
  MF_ASSIGN_OR_RETURN(DTensor ve, AddScalar(var, p.eps, c));
  MF_ASSIGN_OR_RETURN(DTensor rstd, Rsqrt(ve, c));
  MF_ASSIGN_OR_RETURN(DTensor xhat, Mul(xc, rstd, c));
  Grads out(in.size());
  DTensor gxhat = g;
  if (p.has_weight) {
    const DTensor& w = *in[1];
    MF_ASSIGN_OR_RETURN(gxhat, Mul(g, w, c));
    MF_ASSIGN_OR_RETURN(DTensor gw_full, Mul(g, xhat, c));
    MF_ASSIGN_OR_RETURN(DTensor gw, SumTo(gw_full, w.global_shape(), c));
    out[1] = std::move(gw);
  }
  if (p.has_bias) {
    const size_t bi = p.has_weight ? 2 : 1;
    MF_ASSIGN_OR_RETURN(DTensor gb, SumTo(g, in[bi]->global_shape(), c));
    out[bi] = std::move(gb);
  }
  // gx = rstd * (gxhat - [mean(gxhat)] - xhat * mean(gxhat * xhat))
  MF_ASSIGN_OR_RETURN(DTensor gx_xhat, Mul(gxhat, xhat, c));
  MF_ASSIGN_OR_RETURN(DTensor m2, Mean(gx_xhat, dims, true, c));
  MF_ASSIGN_OR_RETURN(DTensor t2, Mul(xhat, m2, c));
  MF_ASSIGN_OR_RETURN(DTensor inner, Sub(gxhat, t2, c));
  if (layer) {
    MF_ASSIGN_OR_RETURN(DTensor m1, Mean(gxhat, dims, true, c));
    MF_ASSIGN_OR_RETURN(inner, Sub(inner, m1, c));
  }
  MF_ASSIGN_OR_RETURN(DTensor gx, Mul(inner, rstd, c));
  out[0] = std::move(gx);
  return out;
}

StatusOr<Grads> MatmulVjp(const OpSpec& op, const DTensor& a, const DTensor& b, const DTensor& g, MeshComms& c) {
  if (a.global_shape().size() < 2 || b.global_shape().size() < 2) {
    return UnimplementedError(op.ToString() + " backward with a rank-1 operand (shapes " +
                              ShapeString(a.global_shape()) + " and " + ShapeString(b.global_shape()) +
                              ") is not supported: reshape it to [1, k] / [k, 1] first");
  }
  MF_ASSIGN_OR_RETURN(DTensor bt, Transpose(b, -2, -1, c));
  MF_ASSIGN_OR_RETURN(DTensor ga_full, Matmul(g, bt, c));
  MF_ASSIGN_OR_RETURN(DTensor ga, SumTo(ga_full, a.global_shape(), c));
  MF_ASSIGN_OR_RETURN(DTensor at, Transpose(a, -2, -1, c));
  MF_ASSIGN_OR_RETURN(DTensor gb_full, Matmul(at, g, c));
  MF_ASSIGN_OR_RETURN(DTensor gb, SumTo(gb_full, b.global_shape(), c));
  return Grads{std::move(ga), std::move(gb)};
}

}  // namespace

StatusOr<DTensor> ScalarLike(const DTensor& like, double value) {
  const DeviceMesh& mesh = like.layout().mesh();
  MF_ASSIGN_OR_RETURN(Layout layout, Layout::Create({}, mesh, Placements(static_cast<size_t>(mesh.ndim()), Replicate{})));
  Tensor t = Tensor::Zeros(like.dtype(), {});
  t.SetFromDouble(0, value);
  return DTensor::FromLocal(std::move(t), std::move(layout), like.rank());
}

StatusOr<DTensor> SumTo(const DTensor& x, const std::vector<int64_t>& shape, MeshComms& comms) {
  const std::vector<int64_t>& sx = x.global_shape();
  if (sx == shape) return x;
  if (shape.size() > sx.size()) {
    return InvalidArgumentError("sum_to: shape " + ShapeString(shape) + " has more dims than " + ShapeString(sx));
  }
  const size_t lead = sx.size() - shape.size();
  std::vector<int> dims;
  for (size_t d = 0; d < sx.size(); ++d) {
    if (d < lead) {
      dims.push_back(static_cast<int>(d));
    } else if (shape[d - lead] == 1 && sx[d] != 1) {
      dims.push_back(static_cast<int>(d));
    } else if (shape[d - lead] != sx[d]) {
      return InvalidArgumentError("sum_to: " + ShapeString(sx) + " does not broadcast from " + ShapeString(shape));
    }
  }
  if (dims.empty()) return Reshape(x, shape, comms);
  MF_ASSIGN_OR_RETURN(DTensor s, Sum(x, dims, true, comms));
  if (s.global_shape() == shape) return s;
  return Reshape(s, shape, comms);
}

bool IsDifferentiable(const OpSpec& op) { return op.get<CompareParams>() == nullptr; }

StatusOr<std::vector<std::optional<DTensor>>> Vjp(const OpSpec& op, std::span<const DTensor* const> in,
                                                  const DTensor& y, const DTensor& g, MeshComms& c) {
  if (static_cast<int>(in.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + " backward: expected " + std::to_string(op.num_operands()) +
                                " inputs, got " + std::to_string(in.size()));
  }
  if (g.global_shape() != y.global_shape()) {
    return InvalidArgumentError(op.ToString() + " backward: gradient shape " + ShapeString(g.global_shape()) +
                                " differs from the output's " + ShapeString(y.global_shape()));
  }
  const auto one = [](StatusOr<DTensor> r) -> StatusOr<Grads> {
    MF_RETURN_IF_ERROR(r.status());
    return Grads{std::move(*r)};
  };
  if (op.get<MatmulParams>()) return MatmulVjp(op, *in[0], *in[1], g, c);
  if (const auto* p = op.get<BinaryParams>()) return BinaryVjp(*p, *in[0], *in[1], y, g, c);
  if (const auto* p = op.get<UnaryParams>()) return UnaryVjp(op, *p, *in[0], y, g, c);
  if (const auto* p = op.get<ReduceParams>()) return ReduceVjp(*p, *in[0], y, g, c);
  if (const auto* p = op.get<SoftmaxParams>()) return SoftmaxVjp(*p, y, g, c);
  if (const auto* p = op.get<PermuteParams>()) {
    const int rank = static_cast<int>(p->perm.size());
    std::vector<int> inv(p->perm.size());
    for (int i = 0; i < rank; ++i) inv[static_cast<size_t>(NormDim(p->perm[static_cast<size_t>(i)], rank))] = i;
    return one(Permute(g, inv, c));
  }
  if (const auto* p = op.get<TransposeParams>()) return one(Transpose(g, p->dim0, p->dim1, c));
  if (op.get<ReshapeParams>()) return one(Reshape(g, in[0]->global_shape(), c));
  if (const auto* p = op.get<NormParams>()) return NormVjp(*p, in, g, c);
  if (op.get<EmbeddingParams>()) {
    MF_ASSIGN_OR_RETURN(DTensor r, Run(OpSpec::EmbeddingGrad(in[0]->global_shape()[0]), {&g, in[1]}, c));
    return Grads{std::move(r), std::nullopt};
  }
  if (const auto* p = op.get<ConcatParams>()) {
    const int d = NormDim(p->dim, static_cast<int>(y.global_shape().size()));
    Grads out;
    int64_t off = 0;
    for (const DTensor* x : in) {
      const int64_t n = x->global_shape()[static_cast<size_t>(d)];
      MF_ASSIGN_OR_RETURN(DTensor r, Slice(g, d, off, off + n, 1, c));
      out.push_back(std::move(r));
      off += n;
    }
    return out;
  }
  if (const auto* p = op.get<SliceParams>()) {
    return one(Run(OpSpec::SliceGrad(in[0]->global_shape(), p->dim, p->start, p->end, p->step), {&g}, c));
  }
  if (const auto* p = op.get<CrossEntropyParams>()) {
    MF_ASSIGN_OR_RETURN(DTensor r, Run(OpSpec::CrossEntropyGrad(p->reduction), {in[0], in[1], &g}, c));
    return Grads{std::move(r), std::nullopt};
  }
  if (op.get<CompareParams>()) return Grads(2);
  if (op.get<WhereParams>()) {
    MF_ASSIGN_OR_RETURN(DTensor zero, ScalarLike(g, 0.0));
    MF_ASSIGN_OR_RETURN(DTensor wa, Where(*in[0], g, zero, c));
    MF_ASSIGN_OR_RETURN(DTensor wb, Where(*in[0], zero, g, c));
    MF_ASSIGN_OR_RETURN(DTensor ga, SumTo(wa, in[1]->global_shape(), c));
    MF_ASSIGN_OR_RETURN(DTensor gb, SumTo(wb, in[2]->global_shape(), c));
    return Grads{std::nullopt, std::move(ga), std::move(gb)};
  }
  if (op.get<ExpandParams>()) return one(SumTo(g, in[0]->global_shape(), c));
  // embedding_grad, slice_grad, cross_entropy_grad
  return NoDoubleBackward(op);
}

}  // namespace meshflow
