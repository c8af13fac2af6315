// The backward (VJP) of every op, one section per op in the order of op_spec.cc, written with
// ops emitted on a GradBuilder (ops/op_spec.h).
#include <string>
#include <utility>

#include "meshflow/ops/op_spec.h"
#include "meshflow/ops/shape_util.h"

namespace meshflow {
namespace {

using Grads = std::vector<std::optional<int>>;
using Ins = std::span<const int>;

int NormDim(int d, int rank) { return d < 0 ? d + rank : d; }

// Short names for the ops a VJP emits.
struct E {
  GradBuilder& b;
  StatusOr<int> Op(const OpSpec& op, std::initializer_list<int> in) {
    return b.Emit(op, std::span<const int>(in.begin(), in.size()));
  }
  StatusOr<int> Add(int x, int y) { return Op(OpSpec::Binary(BinaryOp::kAdd), {x, y}); }
  StatusOr<int> Sub(int x, int y) { return Op(OpSpec::Binary(BinaryOp::kSub), {x, y}); }
  StatusOr<int> Mul(int x, int y) { return Op(OpSpec::Binary(BinaryOp::kMul), {x, y}); }
  StatusOr<int> Div(int x, int y) { return Op(OpSpec::Binary(BinaryOp::kDiv), {x, y}); }
  StatusOr<int> Un(UnaryOp u, int x, double alpha = 1.0) { return Op(OpSpec::Unary(u, alpha), {x}); }
  StatusOr<int> Sum(int x, std::vector<int> dims, bool keep) {
    return Op(OpSpec::Reduce(ReduceKind::kSum, std::move(dims), keep), {x});
  }
  StatusOr<int> Mean(int x, std::vector<int> dims, bool keep) {
    return Op(OpSpec::Reduce(ReduceKind::kMean, std::move(dims), keep), {x});
  }
  StatusOr<int> Reshape(int x, std::vector<int64_t> shape) { return Op(OpSpec::Reshape(std::move(shape)), {x}); }
  StatusOr<int> Expand(int x, std::vector<int64_t> shape) { return Op(OpSpec::Expand(std::move(shape)), {x}); }
  std::vector<int64_t> Shape(int v) const { return b.Shape(v); }
};

Status NoDoubleBackward(const OpSpec& op) {
  return UnimplementedError("no gradient for " + op.ToString() +
                            " (it is itself a gradient op: double backward is not supported)");
}

StatusOr<Grads> One(StatusOr<int> r) {
  MF_RETURN_IF_ERROR(r.status());
  return Grads{*r};
}

// x's shape with the reduced dims set to 1.
std::vector<int64_t> KeepShape(const std::vector<int64_t>& x, const std::vector<int>& dims) {
  std::vector<int64_t> s = x;
  for (int d : dims) s[static_cast<size_t>(d)] = 1;
  return s;
}

// ---- matmul: da = g b^T, db = a^T g (summed over broadcast batch dims) ----
StatusOr<Grads> Backward(const OpSpec& op, const MatmulParams&, E e, Ins in, int, int g) {
  const std::vector<int64_t> sa = e.Shape(in[0]);
  const std::vector<int64_t> sb = e.Shape(in[1]);
  if (sa.size() < 2 || sb.size() < 2) {
    return UnimplementedError(op.ToString() + " backward with a rank-1 operand (shapes " + ShapeString(sa) + " and " +
                              ShapeString(sb) + ") is not supported: reshape it to [1, k] / [k, 1] first");
  }
  MF_ASSIGN_OR_RETURN(int bt, e.Op(OpSpec::Transpose(-2, -1), {in[1]}));
  MF_ASSIGN_OR_RETURN(int ga_full, e.Op(OpSpec::Matmul(), {g, bt}));
  MF_ASSIGN_OR_RETURN(int ga, SumTo(e.b, ga_full, sa));
  MF_ASSIGN_OR_RETURN(int at, e.Op(OpSpec::Transpose(-2, -1), {in[0]}));
  MF_ASSIGN_OR_RETURN(int gb_full, e.Op(OpSpec::Matmul(), {at, g}));
  MF_ASSIGN_OR_RETURN(int gb, SumTo(e.b, gb_full, sb));
  return Grads{ga, gb};
}

// ---- binary pointwise ----
StatusOr<Grads> Backward(const OpSpec&, const BinaryParams& p, E e, Ins in, int y, int g) {
  const std::vector<int64_t> sa = e.Shape(in[0]);
  const std::vector<int64_t> sb = e.Shape(in[1]);
  switch (p.op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub: {
      MF_ASSIGN_OR_RETURN(int ga, SumTo(e.b, g, sa));
      MF_ASSIGN_OR_RETURN(int gb, SumTo(e.b, g, sb));
      if (p.op == BinaryOp::kSub) {
        MF_ASSIGN_OR_RETURN(gb, e.Un(UnaryOp::kNeg, gb));
      }
      return Grads{ga, gb};
    }
    case BinaryOp::kMul: {
      MF_ASSIGN_OR_RETURN(int gab, e.Mul(g, in[1]));
      MF_ASSIGN_OR_RETURN(int gba, e.Mul(g, in[0]));
      MF_ASSIGN_OR_RETURN(int ga, SumTo(e.b, gab, sa));
      MF_ASSIGN_OR_RETURN(int gb, SumTo(e.b, gba, sb));
      return Grads{ga, gb};
    }
    case BinaryOp::kDiv: {  // d/da = 1/b, d/db = -a/b^2 = -y/b
      MF_ASSIGN_OR_RETURN(int gdb, e.Div(g, in[1]));
      MF_ASSIGN_OR_RETURN(int gyb, e.Mul(gdb, y));
      MF_ASSIGN_OR_RETURN(int ngyb, e.Un(UnaryOp::kNeg, gyb));
      MF_ASSIGN_OR_RETURN(int ga, SumTo(e.b, gdb, sa));
      MF_ASSIGN_OR_RETURN(int gb, SumTo(e.b, ngyb, sb));
      return Grads{ga, gb};
    }
  }
  return InternalError("unknown binary op");
}

// ---- unary pointwise ----
StatusOr<Grads> Backward(const OpSpec& op, const UnaryParams& p, E e, Ins in, int y, int g) {
  const int x = in[0];
  auto times = [&](StatusOr<int> d) -> StatusOr<Grads> {
    MF_RETURN_IF_ERROR(d.status());
    return One(e.Mul(g, *d));
  };
  switch (p.op) {
    case UnaryOp::kNeg: return One(e.Un(UnaryOp::kNeg, g));
    case UnaryOp::kScale: return One(e.Un(UnaryOp::kScale, g, p.alpha));
    case UnaryOp::kAddScalar: return Grads{g};
    case UnaryOp::kRelu: return times(e.Un(UnaryOp::kStep, x));
    case UnaryOp::kExp: return times(y);
    case UnaryOp::kGelu: return times(e.Un(UnaryOp::kGeluDeriv, x));
    case UnaryOp::kTanh: return times(e.Un(UnaryOp::kTanhDeriv, x));
    case UnaryOp::kSigmoid: return times(e.Un(UnaryOp::kSigmoidDeriv, x));
    case UnaryOp::kSilu: return times(e.Un(UnaryOp::kSiluDeriv, x));
    case UnaryOp::kSqrt: {  // 0.5 / sqrt(x)
      MF_ASSIGN_OR_RETURN(int q, e.Div(g, y));
      return One(e.Un(UnaryOp::kScale, q, 0.5));
    }
    case UnaryOp::kRsqrt: {  // -0.5 x^-1.5 = -0.5 y^3
      MF_ASSIGN_OR_RETURN(int y3, e.Un(UnaryOp::kPow, y, 3.0));
      return times(e.Un(UnaryOp::kScale, y3, -0.5));
    }
    case UnaryOp::kPow: {  // p x^(p-1)
      MF_ASSIGN_OR_RETURN(int xp, e.Un(UnaryOp::kPow, x, p.alpha - 1.0));
      return times(e.Un(UnaryOp::kScale, xp, p.alpha));
    }
    case UnaryOp::kLog: return One(e.Div(g, x));
    case UnaryOp::kStep: return Grads{std::nullopt};  // zero almost everywhere
    case UnaryOp::kGeluDeriv:
    case UnaryOp::kSiluDeriv:
    case UnaryOp::kTanhDeriv:
    case UnaryOp::kSigmoidDeriv:
    case UnaryOp::kFill: return NoDoubleBackward(op);
  }
  return InternalError("unknown unary op");
}

// ---- compare: no gradient ----
StatusOr<Grads> Backward(const OpSpec&, const CompareParams&, E, Ins, int, int) { return Grads(2); }

// ---- where(cond, a, b) ----
StatusOr<Grads> Backward(const OpSpec&, const WhereParams&, E e, Ins in, int, int g) {
  MF_ASSIGN_OR_RETURN(int zero, e.Un(UnaryOp::kFill, g, 0.0));
  MF_ASSIGN_OR_RETURN(int wa, e.Op(OpSpec::Where(), {in[0], g, zero}));
  MF_ASSIGN_OR_RETURN(int wb, e.Op(OpSpec::Where(), {in[0], zero, g}));
  MF_ASSIGN_OR_RETURN(int ga, SumTo(e.b, wa, e.Shape(in[1])));
  MF_ASSIGN_OR_RETURN(int gb, SumTo(e.b, wb, e.Shape(in[2])));
  return Grads{std::nullopt, ga, gb};
}

// ---- expand ----
StatusOr<Grads> Backward(const OpSpec&, const ExpandParams&, E e, Ins in, int, int g) {
  return One(SumTo(e.b, g, e.Shape(in[0])));
}

// ---- reductions (max / min split the gradient equally between tied extrema) ----
StatusOr<Grads> Backward(const OpSpec&, const ReduceParams& p, E e, Ins in, int y, int g) {
  const int x = in[0];
  const std::vector<int64_t> sx = e.Shape(x);
  MF_ASSIGN_OR_RETURN(std::vector<int> dims, NormalizeReduceDims(sx, p.dims));
  const std::vector<int64_t> keep = KeepShape(sx, dims);
  int gk = g;
  if (!p.keepdim) {
    MF_ASSIGN_OR_RETURN(gk, e.Reshape(g, keep));
  }
  switch (p.kind) {
    case ReduceKind::kSum: return One(e.Expand(gk, sx));
    case ReduceKind::kMean: {
      int64_t count = 1;
      for (int d : dims) count *= sx[static_cast<size_t>(d)];
      MF_ASSIGN_OR_RETURN(int ex, e.Expand(gk, sx));
      return One(e.Un(UnaryOp::kScale, ex, count > 0 ? 1.0 / static_cast<double>(count) : 0.0));
    }
    case ReduceKind::kMax:
    case ReduceKind::kMin: {
      int yk = y;
      if (!p.keepdim) {
        MF_ASSIGN_OR_RETURN(yk, e.Reshape(y, keep));
      }
      MF_ASSIGN_OR_RETURN(int mask, e.Op(OpSpec::Compare(CompareOp::kEq), {x, yk}));
      MF_ASSIGN_OR_RETURN(int count, e.Sum(mask, dims, true));
      MF_ASSIGN_OR_RETURN(int share, e.Div(gk, count));
      return One(e.Mul(mask, share));
    }
  }
  return InternalError("unknown reduce kind");
}

// ---- softmax: y (g - sum(g y)); log-softmax: g - exp(y) sum(g) ----
StatusOr<Grads> Backward(const OpSpec&, const SoftmaxParams& p, E e, Ins, int y, int g) {
  if (p.log) {
    MF_ASSIGN_OR_RETURN(int s, e.Sum(g, {p.dim}, true));
    MF_ASSIGN_OR_RETURN(int pr, e.Un(UnaryOp::kExp, y));
    MF_ASSIGN_OR_RETURN(int ps, e.Mul(pr, s));
    return One(e.Sub(g, ps));
  }
  MF_ASSIGN_OR_RETURN(int gy, e.Mul(g, y));
  MF_ASSIGN_OR_RETURN(int s, e.Sum(gy, {p.dim}, true));
  MF_ASSIGN_OR_RETURN(int d, e.Sub(g, s));
  return One(e.Mul(y, d));
}

// ---- permute: the inverse permutation ----
StatusOr<Grads> Backward(const OpSpec&, const PermuteParams& p, E e, Ins, int, int g) {
  const int rank = static_cast<int>(p.perm.size());
  std::vector<int> inv(p.perm.size());
  for (int i = 0; i < rank; ++i) inv[static_cast<size_t>(NormDim(p.perm[static_cast<size_t>(i)], rank))] = i;
  return One(e.Op(OpSpec::Permute(inv), {g}));
}

// ---- transpose: itself ----
StatusOr<Grads> Backward(const OpSpec&, const TransposeParams& p, E e, Ins, int, int g) {
  return One(e.Op(OpSpec::Transpose(p.dim0, p.dim1), {g}));
}

// ---- reshape: back ----
StatusOr<Grads> Backward(const OpSpec&, const ReshapeParams&, E e, Ins in, int, int g) {
  return One(e.Reshape(g, e.Shape(in[0])));
}

// ---- layer / RMS norm, recomputed from x: xhat = (x - mean) rstd (layer) or x rstd (rms),
// rstd = 1 / sqrt(var + eps) (biased var; rms: mean(x^2)); y = xhat w + b.
// gx = rstd (gxhat - [mean(gxhat)] - xhat mean(gxhat xhat)), gxhat = g w. ----
StatusOr<Grads> Backward(const OpSpec&, const NormParams& p, E e, Ins in, int, int g) {
  const int x = in[0];
  const int rank = static_cast<int>(e.Shape(x).size());
  std::vector<int> dims;
  for (int d = rank - p.normalized_ndim; d < rank; ++d) dims.push_back(d);
  const bool layer = p.kind == NormKind::kLayerNorm;
  int xc = x;
  if (layer) {
    MF_ASSIGN_OR_RETURN(int mu, e.Mean(x, dims, true));
    MF_ASSIGN_OR_RETURN(xc, e.Sub(x, mu));
  }
  MF_ASSIGN_OR_RETURN(int sq, e.Mul(xc, xc));
  MF_ASSIGN_OR_RETURN(int var, e.Mean(sq, dims, true));
  MF_ASSIGN_OR_RETURN(int ve, e.Un(UnaryOp::kAddScalar, var, p.eps));
  MF_ASSIGN_OR_RETURN(int rstd, e.Un(UnaryOp::kRsqrt, ve));
  MF_ASSIGN_OR_RETURN(int xhat, e.Mul(xc, rstd));
  Grads out(in.size());
  int gxhat = g;
  if (p.has_weight) {
    MF_ASSIGN_OR_RETURN(gxhat, e.Mul(g, in[1]));
    MF_ASSIGN_OR_RETURN(int gw_full, e.Mul(g, xhat));
    MF_ASSIGN_OR_RETURN(int gw, SumTo(e.b, gw_full, e.Shape(in[1])));
    out[1] = gw;
  }
  if (p.has_bias) {
    const size_t bi = p.has_weight ? 2 : 1;
    MF_ASSIGN_OR_RETURN(int gb, SumTo(e.b, g, e.Shape(in[bi])));
    out[bi] = gb;
  }
  MF_ASSIGN_OR_RETURN(int gx_xhat, e.Mul(gxhat, xhat));
  MF_ASSIGN_OR_RETURN(int m2, e.Mean(gx_xhat, dims, true));
  MF_ASSIGN_OR_RETURN(int t2, e.Mul(xhat, m2));
  MF_ASSIGN_OR_RETURN(int inner, e.Sub(gxhat, t2));
  if (layer) {
    MF_ASSIGN_OR_RETURN(int m1, e.Mean(gxhat, dims, true));
    MF_ASSIGN_OR_RETURN(inner, e.Sub(inner, m1));
  }
  MF_ASSIGN_OR_RETURN(int gx, e.Mul(inner, rstd));
  out[0] = gx;
  return out;
}

// ---- embedding: index-add of g into the table's rows ----
StatusOr<Grads> Backward(const OpSpec&, const EmbeddingParams&, E e, Ins in, int, int g) {
  MF_ASSIGN_OR_RETURN(int r, e.Op(OpSpec::EmbeddingGrad(e.Shape(in[0])[0]), {g, in[1]}));
  return Grads{r, std::nullopt};
}

// ---- concat: slices of g ----
StatusOr<Grads> Backward(const OpSpec&, const ConcatParams& p, E e, Ins in, int y, int g) {
  const int d = NormDim(p.dim, static_cast<int>(e.Shape(y).size()));
  Grads out;
  int64_t off = 0;
  for (int x : in) {
    const int64_t n = e.Shape(x)[static_cast<size_t>(d)];
    MF_ASSIGN_OR_RETURN(int r, e.Op(OpSpec::Slice(d, off, off + n, 1), {g}));
    out.push_back(r);
    off += n;
  }
  return out;
}

// ---- slice: g placed back into zeros of the input shape ----
StatusOr<Grads> Backward(const OpSpec&, const SliceParams& p, E e, Ins in, int, int g) {
  return One(e.Op(OpSpec::SliceGrad(e.Shape(in[0]), p.dim, p.start, p.end, p.step), {g}));
}

// ---- cross-entropy: (softmax(logits) - onehot(targets)) g ----
StatusOr<Grads> Backward(const OpSpec&, const CrossEntropyParams& p, E e, Ins in, int, int g) {
  MF_ASSIGN_OR_RETURN(int r, e.Op(OpSpec::CrossEntropyGrad(p.reduction), {in[0], in[1], g}));
  return Grads{r, std::nullopt};
}

// ---- the gradient ops: no double backward ----
StatusOr<Grads> Backward(const OpSpec& op, const EmbeddingGradParams&, E, Ins, int, int) {
  return NoDoubleBackward(op);
}
StatusOr<Grads> Backward(const OpSpec& op, const SliceGradParams&, E, Ins, int, int) { return NoDoubleBackward(op); }
StatusOr<Grads> Backward(const OpSpec& op, const CrossEntropyGradParams&, E, Ins, int, int) {
  return NoDoubleBackward(op);
}

}  // namespace

StatusOr<int> SumTo(GradBuilder& b, int x, std::vector<int64_t> shape) {
  const std::vector<int64_t> sx = b.Shape(x);
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
  E e{b};
  if (dims.empty()) return e.Reshape(x, shape);
  MF_ASSIGN_OR_RETURN(int s, e.Sum(x, dims, true));
  if (b.Shape(s) == shape) return s;
  return e.Reshape(s, shape);
}

bool IsDifferentiable(const OpSpec& op) { return op.get<CompareParams>() == nullptr; }

StatusOr<std::vector<std::optional<int>>> Vjp(const OpSpec& op, GradBuilder& b, std::span<const int> inputs,
                                              int output, int grad) {
  if (static_cast<int>(inputs.size()) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + " backward: expected " + std::to_string(op.num_operands()) +
                                " inputs, got " + std::to_string(inputs.size()));
  }
  if (b.Shape(grad) != b.Shape(output)) {
    return InvalidArgumentError(op.ToString() + " backward: gradient shape " + ShapeString(b.Shape(grad)) +
                                " differs from the output's " + ShapeString(b.Shape(output)));
  }
  return std::visit([&](const auto& p) { return Backward(op, p, E{b}, inputs, output, grad); }, op.params);
}

}  // namespace meshflow
