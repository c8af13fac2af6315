#include "meshflow/ops/op_spec.h"

#include <cstdio>
#include <string_view>

#include "meshflow/base/hash.h"
#include "meshflow/base/strings.h"
#include "meshflow/ops/kernels.h"

namespace meshflow {
namespace {

// Every op is one section below with the same overloads:
//   Name(p)                         ToString
//   NumOperands(p)                  operand count
//   Rule(p, shapes)                 the sharding rule (shapes.size() == NumOperands(p))
//   DTypes(p, name, dtypes)         the dtype contract (name: ToString, for messages)
//   Kernel(p, x, ctx)               the CPU kernel on local operands
//   Hash(p, h)                      the strategy-relevant parameters (alpha excluded)

using Shapes = std::span<const std::vector<int64_t>* const>;
using Locals = std::span<const Tensor* const>;

Status NeedFloat(const std::string& op, DType t, std::string_view what) {
  if (IsFloatDType(t)) return Status::Ok();
  return UnimplementedError(op + ": " + std::string(what) + " dtype " + std::string(DTypeName(t)) +
                            " not supported (f32, f64, bf16 only)");
}
Status NeedInt(const std::string& op, DType t, std::string_view what) {
  if (IsIntDType(t)) return Status::Ok();
  return InvalidArgumentError(op + ": " + std::string(what) + " dtype " + std::string(DTypeName(t)) +
                              " must be i32 or i64");
}
// dtypes[from, to) must equal dtypes[from].
Status Agree(const std::string& op, std::span<const DType> dtypes, size_t from, size_t to) {
  for (size_t i = from + 1; i < to && i < dtypes.size(); ++i) {
    if (dtypes[i] != dtypes[from]) {
      return InvalidArgumentError(op + ": operand dtypes differ: " + std::string(DTypeName(dtypes[from])) + " vs " +
                                  std::string(DTypeName(dtypes[i])));
    }
  }
  return Status::Ok();
}
std::string SliceText(const SliceParams& p) {
  return std::to_string(p.start) + ":" + (p.end == INT64_MAX ? std::string() : std::to_string(p.end)) + ":" +
         std::to_string(p.step);
}
void MixInts(uint64_t& h, std::span<const int> v) {
  for (int d : v) HashMix(h, static_cast<uint64_t>(d));
}
void MixInts(uint64_t& h, std::span<const int64_t> v) {
  for (int64_t d : v) HashMix(h, static_cast<uint64_t>(d));
}

// ---- matmul: a [..., m, k] x b [..., k, n] ----
std::string Name(const MatmulParams&) { return "matmul"; }
int NumOperands(const MatmulParams&) { return 2; }
StatusOr<ShardingRule> Rule(const MatmulParams&, Shapes s) { return MatmulRule(*s[0], *s[1]); }
Status DTypes(const MatmulParams&, const std::string& n, std::span<const DType> t) {
  MF_RETURN_IF_ERROR(NeedFloat(n, t[0], "operand"));
  return Agree(n, t, 0, 2);
}
StatusOr<Tensor> Kernel(const MatmulParams&, Locals x, const KernelContext&) { return MatmulKernel(*x[0], *x[1]); }
void Hash(const MatmulParams&, uint64_t&) {}

// ---- binary pointwise (broadcasting) ----
std::string Name(const BinaryParams& p) { return std::string(BinaryOpName(p.op)); }
int NumOperands(const BinaryParams&) { return 2; }
StatusOr<ShardingRule> Rule(const BinaryParams& p, Shapes s) { return BinaryRule(p.op, *s[0], *s[1]); }
Status DTypes(const BinaryParams& p, const std::string& n, std::span<const DType> t) {
  if (p.op == BinaryOp::kDiv) MF_RETURN_IF_ERROR(NeedFloat(n, t[0], "operand"));
  return Agree(n, t, 0, 2);
}
StatusOr<Tensor> Kernel(const BinaryParams& p, Locals x, const KernelContext&) {
  return BinaryKernel(p.op, *x[0], *x[1]);
}
void Hash(const BinaryParams& p, uint64_t& h) { HashMix(h, static_cast<uint64_t>(p.op)); }

// ---- unary pointwise ----
std::string Name(const UnaryParams& p) {
  return std::string(UnaryOpName(p.op)) + (HasAlpha(p.op) ? "(" + std::to_string(p.alpha) + ")" : "");
}
int NumOperands(const UnaryParams&) { return 1; }
StatusOr<ShardingRule> Rule(const UnaryParams& p, Shapes s) { return UnaryRule(p.op, *s[0]); }
Status DTypes(const UnaryParams& p, const std::string& n, std::span<const DType> t) {
  if (p.op != UnaryOp::kNeg) MF_RETURN_IF_ERROR(NeedFloat(n, t[0], "operand"));
  return Status::Ok();
}
StatusOr<Tensor> Kernel(const UnaryParams& p, Locals x, const KernelContext&) {
  return UnaryKernel(p.op, *x[0], p.alpha);
}
void Hash(const UnaryParams& p, uint64_t& h) { HashMix(h, static_cast<uint64_t>(p.op)); }  // not alpha

// ---- compare (1 / 0 in the operands' dtype) ----
std::string Name(const CompareParams& p) { return std::string(CompareOpName(p.op)); }
int NumOperands(const CompareParams&) { return 2; }
StatusOr<ShardingRule> Rule(const CompareParams& p, Shapes s) { return CompareRule(p.op, *s[0], *s[1]); }
Status DTypes(const CompareParams&, const std::string& n, std::span<const DType> t) { return Agree(n, t, 0, 2); }
StatusOr<Tensor> Kernel(const CompareParams& p, Locals x, const KernelContext&) {
  return CompareKernel(p.op, *x[0], *x[1]);
}
void Hash(const CompareParams& p, uint64_t& h) { HashMix(h, static_cast<uint64_t>(p.op)); }

// ---- where(cond, a, b) ----
std::string Name(const WhereParams&) { return "where"; }
int NumOperands(const WhereParams&) { return 3; }
StatusOr<ShardingRule> Rule(const WhereParams&, Shapes s) { return WhereRule(*s[0], *s[1], *s[2]); }
Status DTypes(const WhereParams&, const std::string& n, std::span<const DType> t) {
  return Agree(n, t, 1, 3);  // cond: any dtype
}
StatusOr<Tensor> Kernel(const WhereParams&, Locals x, const KernelContext&) {
  return WhereKernel(*x[0], *x[1], *x[2]);
}
void Hash(const WhereParams&, uint64_t&) {}

// ---- expand (broadcast to a shape) ----
std::string Name(const ExpandParams& p) { return "expand(" + ListString(p.shape) + ")"; }
int NumOperands(const ExpandParams&) { return 1; }
StatusOr<ShardingRule> Rule(const ExpandParams& p, Shapes s) { return ExpandRule(*s[0], p.shape); }
Status DTypes(const ExpandParams&, const std::string&, std::span<const DType>) { return Status::Ok(); }
StatusOr<Tensor> Kernel(const ExpandParams& p, Locals x, const KernelContext& ctx) {
  return ExpandKernel(*x[0], ctx.out_shape ? *ctx.out_shape : p.shape);
}
void Hash(const ExpandParams& p, uint64_t& h) { MixInts(h, p.shape); }

// ---- reductions ----
std::string Name(const ReduceParams& p) {
  return std::string(ReduceKindName(p.kind)) + "(dims=" + ListString(p.dims) + (p.keepdim ? ",keepdim)" : ")");
}
int NumOperands(const ReduceParams&) { return 1; }
StatusOr<ShardingRule> Rule(const ReduceParams& p, Shapes s) { return ReduceRule(p.kind, *s[0], p.dims, p.keepdim); }
Status DTypes(const ReduceParams& p, const std::string& n, std::span<const DType> t) {
  if (p.kind == ReduceKind::kMean) MF_RETURN_IF_ERROR(NeedFloat(n, t[0], "operand"));
  return Status::Ok();
}
StatusOr<Tensor> Kernel(const ReduceParams& p, Locals x, const KernelContext& ctx) {
  return ReduceKernel(p.kind, *x[0], p.dims, p.keepdim, ctx.mean_count);
}
void Hash(const ReduceParams& p, uint64_t& h) {
  HashMix(h, static_cast<uint64_t>(p.kind) * 2 + static_cast<uint64_t>(p.keepdim));
  MixInts(h, p.dims);
}

// ---- softmax / log-softmax ----
std::string Name(const SoftmaxParams& p) {
  return std::string(p.log ? "log_softmax" : "softmax") + "(dim=" + std::to_string(p.dim) + ")";
}
int NumOperands(const SoftmaxParams&) { return 1; }
StatusOr<ShardingRule> Rule(const SoftmaxParams& p, Shapes s) { return SoftmaxRule(p.log, *s[0], p.dim); }
Status DTypes(const SoftmaxParams&, const std::string& n, std::span<const DType> t) {
  return NeedFloat(n, t[0], "operand");
}
StatusOr<Tensor> Kernel(const SoftmaxParams& p, Locals x, const KernelContext&) {
  return SoftmaxKernel(*x[0], p.dim, p.log);
}
void Hash(const SoftmaxParams& p, uint64_t& h) { HashMix(h, static_cast<uint64_t>(p.dim) * 2 + p.log); }

// ---- permute ----
std::string Name(const PermuteParams& p) { return "permute(" + ListString(p.perm) + ")"; }
int NumOperands(const PermuteParams&) { return 1; }
StatusOr<ShardingRule> Rule(const PermuteParams& p, Shapes s) { return PermuteRule(*s[0], p.perm); }
Status DTypes(const PermuteParams&, const std::string&, std::span<const DType>) { return Status::Ok(); }
StatusOr<Tensor> Kernel(const PermuteParams& p, Locals x, const KernelContext&) {
  return PermuteKernel(*x[0], p.perm);
}
void Hash(const PermuteParams& p, uint64_t& h) { MixInts(h, p.perm); }

// ---- transpose (swap two dims) ----
std::string Name(const TransposeParams& p) {
  return "transpose(" + std::to_string(p.dim0) + "," + std::to_string(p.dim1) + ")";
}
int NumOperands(const TransposeParams&) { return 1; }
StatusOr<ShardingRule> Rule(const TransposeParams& p, Shapes s) {
  MF_ASSIGN_OR_RETURN(std::vector<int> perm, TransposePerm(static_cast<int>(s[0]->size()), p.dim0, p.dim1));
  MF_ASSIGN_OR_RETURN(ShardingRule r, PermuteRule(*s[0], perm));
  r.op = "transpose";
  return r;
}
Status DTypes(const TransposeParams&, const std::string&, std::span<const DType>) { return Status::Ok(); }
StatusOr<Tensor> Kernel(const TransposeParams& p, Locals x, const KernelContext&) {
  MF_ASSIGN_OR_RETURN(std::vector<int> perm, TransposePerm(x[0]->rank(), p.dim0, p.dim1));
  return PermuteKernel(*x[0], perm);
}
void Hash(const TransposeParams& p, uint64_t& h) {
  HashMix(h, static_cast<uint64_t>(p.dim0));
  HashMix(h, static_cast<uint64_t>(p.dim1));
}

// ---- reshape ----
std::string Name(const ReshapeParams& p) { return "reshape(" + ListString(p.shape) + ")"; }
int NumOperands(const ReshapeParams&) { return 1; }
StatusOr<ShardingRule> Rule(const ReshapeParams& p, Shapes s) { return ReshapeRule(*s[0], p.shape); }
Status DTypes(const ReshapeParams&, const std::string&, std::span<const DType>) { return Status::Ok(); }
StatusOr<Tensor> Kernel(const ReshapeParams& p, Locals x, const KernelContext& ctx) {
  return ReshapeKernel(*x[0], ctx.out_shape ? *ctx.out_shape : p.shape);
}
void Hash(const ReshapeParams& p, uint64_t& h) { MixInts(h, p.shape); }

// ---- layer / RMS norm: x, [weight], [bias] ----
std::string Name(const NormParams& p) {
  char e[32];
  std::snprintf(e, sizeof(e), "%g", p.eps);
  return std::string(NormKindName(p.kind)) + "(ndim=" + std::to_string(p.normalized_ndim) +
         (p.has_weight ? ",weight" : "") + (p.has_bias ? ",bias" : "") + ",eps=" + e + ")";
}
int NumOperands(const NormParams& p) { return 1 + (p.has_weight ? 1 : 0) + (p.has_bias ? 1 : 0); }
StatusOr<ShardingRule> Rule(const NormParams& p, Shapes s) {
  return NormRule(p.kind, *s[0], p.normalized_ndim, p.has_weight ? s[1] : nullptr,
                  p.has_bias ? s[p.has_weight ? 2 : 1] : nullptr);
}
Status DTypes(const NormParams& p, const std::string& n, std::span<const DType> t) {
  MF_RETURN_IF_ERROR(NeedFloat(n, t[0], "operand"));
  return Agree(n, t, 0, t.size());
}
StatusOr<Tensor> Kernel(const NormParams& p, Locals x, const KernelContext&) {
  return NormKernel(p.kind, *x[0], p.normalized_ndim, p.has_weight ? x[1] : nullptr,
                    p.has_bias ? x[p.has_weight ? 2 : 1] : nullptr, p.eps);
}
void Hash(const NormParams& p, uint64_t& h) {
  HashMix(h, static_cast<uint64_t>(p.kind) * 8 + static_cast<uint64_t>(p.has_weight) * 2 +
                 static_cast<uint64_t>(p.has_bias));
  HashMix(h, static_cast<uint64_t>(p.normalized_ndim));
}

// ---- embedding: table [V, D], ids [...] ----
std::string Name(const EmbeddingParams&) { return "embedding"; }
int NumOperands(const EmbeddingParams&) { return 2; }
StatusOr<ShardingRule> Rule(const EmbeddingParams&, Shapes s) { return EmbeddingRule(*s[0], *s[1]); }
Status DTypes(const EmbeddingParams&, const std::string& n, std::span<const DType> t) {
  return NeedInt(n, t[1], "ids");
}
StatusOr<Tensor> Kernel(const EmbeddingParams&, Locals x, const KernelContext& ctx) {
  return EmbeddingKernel(*x[0], *x[1], ctx.row_offset, ctx.global_rows);
}
void Hash(const EmbeddingParams&, uint64_t&) {}

// ---- embedding_grad: grad [..., D], ids [...] -> [num_rows, D] ----
std::string Name(const EmbeddingGradParams& p) { return "embedding_grad(rows=" + std::to_string(p.num_rows) + ")"; }
int NumOperands(const EmbeddingGradParams&) { return 2; }
StatusOr<ShardingRule> Rule(const EmbeddingGradParams& p, Shapes s) {
  return EmbeddingGradRule(*s[0], *s[1], p.num_rows);
}
Status DTypes(const EmbeddingGradParams&, const std::string& n, std::span<const DType> t) {
  return NeedInt(n, t[1], "ids");
}
StatusOr<Tensor> Kernel(const EmbeddingGradParams& p, Locals x, const KernelContext& ctx) {
  const int64_t rows = ctx.out_shape ? (*ctx.out_shape)[0] : p.num_rows;
  return EmbeddingGradKernel(*x[0], *x[1], rows, ctx.row_offset, ctx.global_rows >= 0 ? ctx.global_rows : p.num_rows);
}
void Hash(const EmbeddingGradParams& p, uint64_t& h) { HashMix(h, static_cast<uint64_t>(p.num_rows)); }

// ---- concat ----
std::string Name(const ConcatParams& p) {
  return "concat(dim=" + std::to_string(p.dim) + ",n=" + std::to_string(p.num_inputs) + ")";
}
int NumOperands(const ConcatParams& p) { return p.num_inputs; }
StatusOr<ShardingRule> Rule(const ConcatParams& p, Shapes s) { return ConcatRule(s, p.dim); }
Status DTypes(const ConcatParams&, const std::string& n, std::span<const DType> t) { return Agree(n, t, 0, t.size()); }
StatusOr<Tensor> Kernel(const ConcatParams& p, Locals x, const KernelContext&) { return ConcatKernel(x, p.dim); }
void Hash(const ConcatParams& p, uint64_t& h) {
  HashMix(h, static_cast<uint64_t>(p.dim));
  HashMix(h, static_cast<uint64_t>(p.num_inputs));
}

// ---- slice (python semantics, step >= 1) ----
std::string Name(const SliceParams& p) { return "slice(dim=" + std::to_string(p.dim) + "," + SliceText(p) + ")"; }
int NumOperands(const SliceParams&) { return 1; }
StatusOr<ShardingRule> Rule(const SliceParams& p, Shapes s) { return SliceRule(*s[0], p.dim, p.start, p.end, p.step); }
Status DTypes(const SliceParams&, const std::string&, std::span<const DType>) { return Status::Ok(); }
StatusOr<Tensor> Kernel(const SliceParams& p, Locals x, const KernelContext& ctx) {
  if (ctx.slice_local) {
    const auto [start, size] = *ctx.slice_local;
    return SliceKernel(*x[0], p.dim, start, size > 0 ? start + (size - 1) * p.step + 1 : start, p.step);
  }
  return SliceKernel(*x[0], p.dim, p.start, p.end, p.step);
}
void Hash(const SliceParams& p, uint64_t& h) {
  HashMix(h, static_cast<uint64_t>(p.dim));
  HashMix(h, static_cast<uint64_t>(p.start));
  HashMix(h, static_cast<uint64_t>(p.end));
  HashMix(h, static_cast<uint64_t>(p.step));
}

// ---- slice_grad: grad of a slice -> zeros of the input shape with grad placed ----
std::string Name(const SliceGradParams& p) {
  return "slice_grad(" + ListString(p.input_shape) + ",dim=" + std::to_string(p.slice.dim) + "," + SliceText(p.slice) +
         ")";
}
int NumOperands(const SliceGradParams&) { return 1; }
StatusOr<ShardingRule> Rule(const SliceGradParams& p, Shapes s) {
  return SliceGradRule(*s[0], p.input_shape, p.slice.dim, p.slice.start, p.slice.end, p.slice.step);
}
Status DTypes(const SliceGradParams&, const std::string&, std::span<const DType>) { return Status::Ok(); }
StatusOr<Tensor> Kernel(const SliceGradParams& p, Locals x, const KernelContext& ctx) {
  return SliceGradKernel(*x[0], ctx.out_shape ? *ctx.out_shape : p.input_shape, p.slice.dim, p.slice.start,
                         p.slice.end, p.slice.step);
}
void Hash(const SliceGradParams& p, uint64_t& h) {
  Hash(p.slice, h);
  MixInts(h, p.input_shape);
}

// ---- cross_entropy: logits [..., C], targets [...] ----
std::string Name(const CrossEntropyParams& p) {
  return "cross_entropy(" + std::string(LossReductionName(p.reduction)) + ")";
}
int NumOperands(const CrossEntropyParams&) { return 2; }
StatusOr<ShardingRule> Rule(const CrossEntropyParams& p, Shapes s) {
  return CrossEntropyRule(*s[0], *s[1], p.reduction);
}
Status DTypes(const CrossEntropyParams&, const std::string& n, std::span<const DType> t) {
  MF_RETURN_IF_ERROR(NeedFloat(n, t[0], "logits"));
  return NeedInt(n, t[1], "targets");
}
StatusOr<Tensor> Kernel(const CrossEntropyParams& p, Locals x, const KernelContext& ctx) {
  return CrossEntropyKernel(*x[0], *x[1], p.reduction, ctx.mean_count);
}
void Hash(const CrossEntropyParams& p, uint64_t& h) { HashMix(h, static_cast<uint64_t>(p.reduction)); }

// ---- cross_entropy_grad: logits, targets, grad of the loss -> [..., C] ----
std::string Name(const CrossEntropyGradParams& p) {
  return "cross_entropy_grad(" + std::string(LossReductionName(p.reduction)) + ")";
}
int NumOperands(const CrossEntropyGradParams&) { return 3; }
StatusOr<ShardingRule> Rule(const CrossEntropyGradParams& p, Shapes s) {
  return CrossEntropyGradRule(*s[0], *s[1], *s[2], p.reduction);
}
Status DTypes(const CrossEntropyGradParams&, const std::string& n, std::span<const DType> t) {
  MF_RETURN_IF_ERROR(NeedFloat(n, t[0], "logits"));
  MF_RETURN_IF_ERROR(NeedInt(n, t[1], "targets"));
  if (t[2] != t[0]) {
    return InvalidArgumentError(n + ": grad dtype " + std::string(DTypeName(t[2])) + " differs from the logits' " +
                                std::string(DTypeName(t[0])));
  }
  return Status::Ok();
}
StatusOr<Tensor> Kernel(const CrossEntropyGradParams& p, Locals x, const KernelContext& ctx) {
  return CrossEntropyGradKernel(*x[0], *x[1], *x[2], p.reduction, ctx.mean_count);
}
void Hash(const CrossEntropyGradParams& p, uint64_t& h) { HashMix(h, static_cast<uint64_t>(p.reduction)); }

Status CheckCount(const OpSpec& op, size_t n) {
  if (const auto* c = op.get<ConcatParams>(); c != nullptr && c->num_inputs < 1) {
    return InvalidArgumentError(op.ToString() + ": num_inputs " + std::to_string(c->num_inputs) + " must be >= 1");
  }
  if (static_cast<int>(n) != op.num_operands()) {
    return InvalidArgumentError(op.ToString() + ": expected " + std::to_string(op.num_operands()) +
                                " operands, got " + std::to_string(n));
  }
  return Status::Ok();
}

}  // namespace

int OpSpec::num_operands() const {
  return std::visit([](const auto& p) { return NumOperands(p); }, params);
}

std::string OpSpec::ToString() const {
  return std::visit([](const auto& p) { return Name(p); }, params);
}

bool SameStructure(const OpSpec& a, const OpSpec& b) {
  if (a.params.index() != b.params.index()) return false;
  if (a.get<UnaryParams>() != nullptr) return a.get<UnaryParams>()->op == b.get<UnaryParams>()->op;
  return a.params == b.params;
}

uint64_t StructureHash(const OpSpec& op) {
  uint64_t h = static_cast<uint64_t>(op.params.index()) * 1000003u + 17;
  std::visit([&h](const auto& p) { Hash(p, h); }, op.params);
  return h;
}

StatusOr<ShardingRule> RuleFor(const OpSpec& op, Shapes shapes) {
  MF_RETURN_IF_ERROR(CheckCount(op, shapes.size()));
  return std::visit([&](const auto& p) { return Rule(p, shapes); }, op.params);
}

Status CheckOperandDTypes(const OpSpec& op, std::span<const DType> dtypes) {
  MF_RETURN_IF_ERROR(CheckCount(op, dtypes.size()));
  const std::string name = op.ToString();
  return std::visit([&](const auto& p) { return DTypes(p, name, dtypes); }, op.params);
}

StatusOr<Tensor> RunKernel(const OpSpec& op, Locals x, int64_t mean_count) {
  KernelContext ctx;
  ctx.mean_count = mean_count;
  return RunKernel(op, x, ctx);
}

StatusOr<Tensor> RunKernel(const OpSpec& op, Locals x, const KernelContext& ctx) {
  MF_RETURN_IF_ERROR(CheckCount(op, x.size()));
  return std::visit([&](const auto& p) { return Kernel(p, x, ctx); }, op.params);
}

}  // namespace meshflow
