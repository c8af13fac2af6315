#include "meshflow/runtime/eager.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <tuple>

#include "meshflow/base/strings.h"
#include "meshflow/ops/device_op_kernels.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/planner/cost_model.h"

namespace meshflow {
namespace {

// Redistribute + kernel + wrap, without validating that inputs match the choice.
StatusOr<DTensor> RunChosen(const OpSpec& op, const StrategyChoice& choice, std::span<const DTensor* const> inputs,
                            RankContext& ctx) {
  if (!(ctx.mesh() == choice.result.mesh())) {
    return InvalidArgumentError(op.ToString() + ": operands on " + choice.result.mesh().ToString() +
                                " but ctx on " + ctx.mesh().ToString());
  }
  // Redistribute inputs that are not in place; others are used without a copy.
  const size_t n = inputs.size();
  std::vector<Tensor> moved;
  moved.reserve(n);  // stable addresses
  std::vector<const Tensor*> locals(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    if (choice.plans[i]) {
      // A redistribution started ahead (FSDP prefetch) is taken instead of running the plan.
      if (std::optional<StatusOr<DTensor>> pre = ctx.prefetches().Take(*inputs[i], choice.plans[i]->to)) {
        if (!pre->ok()) return pre->status();
        moved.push_back(std::move((*pre)->mutable_local()));
      } else {
        moved.push_back(inputs[i]->local());
        MF_RETURN_IF_ERROR(ExecutePlan(*choice.plans[i], ctx, moved.back()));
      }
      locals[i] = &moved.back();
    } else {
      locals[i] = &inputs[i]->local();
    }
  }
  const int rank = inputs[0]->rank();
  MF_ASSIGN_OR_RETURN(DeviceOpKernels * kernels, DeviceOpKernelsFor(ctx.device()));
  KernelContext kctx;
  kctx.mean_count = choice.mean_count;
  if (op.get<EmbeddingParams>() != nullptr) {
    const Layout& table = choice.operand_layouts[0];
    kctx.global_rows = table.global_shape()[0];
    MF_ASSIGN_OR_RETURN(Box box, table.LocalBox(rank));
    kctx.row_offset = box.offset[0];
  }
  const auto* embedding_grad = op.get<EmbeddingGradParams>();
  if (op.get<ReshapeParams>() != nullptr || op.get<ExpandParams>() != nullptr || op.get<SliceGradParams>() != nullptr ||
      embedding_grad != nullptr) {
    MF_ASSIGN_OR_RETURN(Box box, choice.result.LocalBox(rank));
    if (embedding_grad != nullptr) {
      kctx.row_offset = box.offset[0];
      kctx.global_rows = embedding_grad->num_rows;
    }
    kctx.out_shape = std::move(box.shape);
  }
  if (const auto* sp = op.get<SliceParams>()) {
    const Layout& in = choice.operand_layouts[0];
    MF_ASSIGN_OR_RETURN(SliceRange s, NormalizeSlice(in.global_shape(), sp->dim, sp->start, sp->end, sp->step));
    MF_ASSIGN_OR_RETURN(Box box, in.LocalBox(rank));
    const Interval a = box.dim(s.dim);
    if (a.size() != in.global_shape()[s.dim]) {  // sharded: select this rank's part
      const Interval sel = SliceResultRange(s, a.begin, a.end);
      kctx.slice_local = {sel.size() > 0 ? s.start + sel.begin * s.step - a.begin : 0, sel.size()};
    }
  }
  const auto* ce = op.get<CrossEntropyParams>();
  const auto* ce_grad = op.get<CrossEntropyGradParams>();
  if (ce != nullptr || ce_grad != nullptr) {
    // Vocab-parallel when the logits' class dim is sharded: reduce row statistics over those dims
    // (forward: the Partial(sum) loss terms; backward: this rank's classes of the gradient).
    const Layout& logits = choice.operand_layouts[0];
    const int class_dim = logits.tensor_rank() - 1;
    std::vector<int> dims;
    for (int m = 0; m < logits.mesh().ndim(); ++m) {
      if (IsShard(logits.placement(m), class_dim)) dims.push_back(m);
    }
    if (!dims.empty()) {
      MF_ASSIGN_OR_RETURN(Box box, logits.LocalBox(rank));
      // The group first, on every rank of the world (a first use splits the world communicator),
      // in the communication stream's order like every collective of the rank.
      Communicator* group = nullptr;
      MF_RETURN_IF_ERROR(ctx.RunCollective(
          [&]() -> Status {
            MF_ASSIGN_OR_RETURN(group, ctx.Group(dims));
            return Status::Ok();
          },
          "group"));
      DeviceVocabShard vocab;
      vocab.class_offset = box.offset[class_dim];
      vocab.num_classes = logits.global_shape()[class_dim];
      vocab.owner = box.offset[class_dim] == 0;
      RankContext* c = &ctx;
      vocab.all_reduce = [c, group](void* rows, int64_t count, DType dtype, ReduceOp rop) {
        // Row statistics in the kernel's device memory, reduced in the communication stream's order.
        return c->RunCollective(
            [&]() -> Status { return group->AllReduce(rows, rows, count, dtype, rop, c->comm_stream()); },
            "vocab all_reduce");
      };
      MF_ASSIGN_OR_RETURN(Tensor out, kernels->RunVocabParallel(op, locals, kctx, vocab, ctx.compute_stream_ptr()));
      return DTensor::FromLocal(std::move(out), choice.result, rank);
    }
  }
  MF_ASSIGN_OR_RETURN(Tensor out, kernels->Run(op, locals, kctx, ctx.compute_stream_ptr()));
  return DTensor::FromLocal(std::move(out), choice.result, rank);
}

}  // namespace

StatusOr<DTensor> RunStrategy(const OpSpec& op, const StrategyChoice& choice, std::span<const DTensor* const> inputs,
                              RankContext& ctx) {
  MF_RETURN_IF_ERROR(CheckOperands(op, inputs));
  if (choice.operand_layouts.size() != inputs.size() || choice.plans.size() != inputs.size()) {
    return InvalidArgumentError(op.ToString() + ": choice has " + std::to_string(choice.operand_layouts.size()) +
                                " operand layouts, got " + std::to_string(inputs.size()) + " inputs");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Layout& want = choice.plans[i] ? choice.plans[i]->from : choice.operand_layouts[i];
    if (!(inputs[i]->layout() == want)) {
      return InvalidArgumentError(op.ToString() + ": input " + std::to_string(i) + " has layout " +
                                  inputs[i]->layout().ToString() + " but the choice was made for " +
                                  want.ToString());
    }
  }
  return RunChosen(op, choice, inputs, ctx);
}

StatusOr<DTensor> RunOp(const OpSpec& op, std::span<const DTensor* const> inputs, RankContext& ctx,
                        const Strategy* forced) {
  if (forced != nullptr) {
    MF_ASSIGN_OR_RETURN(StrategyChoice c, EvaluateStrategy(op, inputs, *forced));
    return RunChosen(op, c, inputs, ctx);
  }
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> choice, ChooseStrategy(op, inputs));
  return RunChosen(op, *choice, inputs, ctx);
}

namespace {
StatusOr<DTensor> Run1(const OpSpec& op, const DTensor& x, RankContext& ctx) {
  const DTensor* in[1] = {&x};
  return RunOp(op, in, ctx);
}
StatusOr<DTensor> Run2(const OpSpec& op, const DTensor& a, const DTensor& b, RankContext& ctx) {
  const DTensor* in[2] = {&a, &b};
  return RunOp(op, in, ctx);
}
// An element-wise op's spec is built once per op (a function-local static per instantiation).
template <UnaryOp kUnary>
StatusOr<DTensor> RunUnary(const DTensor& x, RankContext& ctx) {
  static const OpSpec kOp = OpSpec::Unary(kUnary);
  return Run1(kOp, x, ctx);
}
template <BinaryOp kBinary>
StatusOr<DTensor> RunBinary(const DTensor& a, const DTensor& b, RankContext& ctx) {
  static const OpSpec kOp = OpSpec::Binary(kBinary);
  return Run2(kOp, a, b, ctx);
}
}  // namespace

StatusOr<DTensor> Matmul(const DTensor& a, const DTensor& b, RankContext& ctx) {
  static const OpSpec kOp = OpSpec::Matmul();
  return Run2(kOp, a, b, ctx);
}
StatusOr<DTensor> Add(const DTensor& a, const DTensor& b, RankContext& ctx) {
  return RunBinary<BinaryOp::kAdd>(a, b, ctx);
}
StatusOr<DTensor> Sub(const DTensor& a, const DTensor& b, RankContext& ctx) {
  return RunBinary<BinaryOp::kSub>(a, b, ctx);
}
StatusOr<DTensor> Mul(const DTensor& a, const DTensor& b, RankContext& ctx) {
  return RunBinary<BinaryOp::kMul>(a, b, ctx);
}
StatusOr<DTensor> Div(const DTensor& a, const DTensor& b, RankContext& ctx) {
  return RunBinary<BinaryOp::kDiv>(a, b, ctx);
}
StatusOr<DTensor> Neg(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kNeg>(x, ctx); }
StatusOr<DTensor> Scale(const DTensor& x, double alpha, RankContext& ctx) {
  return Run1(OpSpec::Unary(UnaryOp::kScale, alpha), x, ctx);
}
StatusOr<DTensor> Relu(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kRelu>(x, ctx); }
StatusOr<DTensor> Exp(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kExp>(x, ctx); }
StatusOr<DTensor> Gelu(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kGelu>(x, ctx); }
StatusOr<DTensor> Sum(const DTensor& x, std::vector<int> dims, bool keepdim, RankContext& ctx) {
  return Run1(OpSpec::Reduce(ReduceKind::kSum, std::move(dims), keepdim), x, ctx);
}
StatusOr<DTensor> Mean(const DTensor& x, std::vector<int> dims, bool keepdim, RankContext& ctx) {
  return Run1(OpSpec::Reduce(ReduceKind::kMean, std::move(dims), keepdim), x, ctx);
}
StatusOr<DTensor> Max(const DTensor& x, std::vector<int> dims, bool keepdim, RankContext& ctx) {
  return Run1(OpSpec::Reduce(ReduceKind::kMax, std::move(dims), keepdim), x, ctx);
}
StatusOr<DTensor> Min(const DTensor& x, std::vector<int> dims, bool keepdim, RankContext& ctx) {
  return Run1(OpSpec::Reduce(ReduceKind::kMin, std::move(dims), keepdim), x, ctx);
}
StatusOr<DTensor> Softmax(const DTensor& x, int dim, RankContext& ctx) {
  return Run1(OpSpec::Softmax(dim, false), x, ctx);
}
StatusOr<DTensor> LogSoftmax(const DTensor& x, int dim, RankContext& ctx) {
  return Run1(OpSpec::Softmax(dim, true), x, ctx);
}
StatusOr<DTensor> Permute(const DTensor& x, std::vector<int> perm, RankContext& ctx) {
  return Run1(OpSpec::Permute(std::move(perm)), x, ctx);
}
StatusOr<DTensor> Transpose(const DTensor& x, int dim0, int dim1, RankContext& ctx) {
  return Run1(OpSpec::Transpose(dim0, dim1), x, ctx);
}
StatusOr<DTensor> Reshape(const DTensor& x, std::vector<int64_t> shape, RankContext& ctx) {
  return Run1(OpSpec::Reshape(std::move(shape)), x, ctx);
}
StatusOr<DTensor> LayerNorm(const DTensor& x, int normalized_ndim, const DTensor* weight, const DTensor* bias,
                            double eps, RankContext& ctx) {
  const DTensor* in[3] = {&x, nullptr, nullptr};
  size_t n = 1;
  if (weight != nullptr) in[n++] = weight;
  if (bias != nullptr) in[n++] = bias;
  return RunOp(OpSpec::LayerNorm(normalized_ndim, weight != nullptr, bias != nullptr, eps),
               std::span<const DTensor* const>(in, n), ctx);
}
StatusOr<DTensor> RmsNorm(const DTensor& x, int normalized_ndim, const DTensor* weight, double eps,
                          RankContext& ctx) {
  const DTensor* in[2] = {&x, weight};
  return RunOp(OpSpec::RmsNorm(normalized_ndim, weight != nullptr, eps),
               std::span<const DTensor* const>(in, weight != nullptr ? 2 : 1), ctx);
}
StatusOr<DTensor> Embedding(const DTensor& table, const DTensor& ids, RankContext& ctx) {
  static const OpSpec kOp = OpSpec::Embedding();
  return Run2(kOp, table, ids, ctx);
}
StatusOr<DTensor> Concat(std::span<const DTensor* const> inputs, int dim, RankContext& ctx) {
  return RunOp(OpSpec::Concat(dim, static_cast<int>(inputs.size())), inputs, ctx);
}
StatusOr<DTensor> Slice(const DTensor& x, int dim, int64_t start, int64_t end, int64_t step, RankContext& ctx) {
  return Run1(OpSpec::Slice(dim, start, end, step), x, ctx);
}
StatusOr<DTensor> CrossEntropy(const DTensor& logits, const DTensor& targets, LossReduction reduction,
                               RankContext& ctx) {
  return Run2(OpSpec::CrossEntropy(reduction), logits, targets, ctx);
}
StatusOr<DTensor> Tanh(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kTanh>(x, ctx); }
StatusOr<DTensor> Sigmoid(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kSigmoid>(x, ctx); }
StatusOr<DTensor> Silu(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kSilu>(x, ctx); }
StatusOr<DTensor> Sqrt(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kSqrt>(x, ctx); }
StatusOr<DTensor> Rsqrt(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kRsqrt>(x, ctx); }
StatusOr<DTensor> Log(const DTensor& x, RankContext& ctx) { return RunUnary<UnaryOp::kLog>(x, ctx); }
StatusOr<DTensor> Pow(const DTensor& x, double exponent, RankContext& ctx) {
  return Run1(OpSpec::Unary(UnaryOp::kPow, exponent), x, ctx);
}
StatusOr<DTensor> AddScalar(const DTensor& x, double value, RankContext& ctx) {
  return Run1(OpSpec::Unary(UnaryOp::kAddScalar, value), x, ctx);
}
StatusOr<DTensor> Compare(CompareOp op, const DTensor& a, const DTensor& b, RankContext& ctx) {
  return Run2(OpSpec::Compare(op), a, b, ctx);
}
StatusOr<DTensor> Where(const DTensor& cond, const DTensor& a, const DTensor& b, RankContext& ctx) {
  static const OpSpec kOp = OpSpec::Where();
  const DTensor* in[3] = {&cond, &a, &b};
  return RunOp(kOp, in, ctx);
}
StatusOr<DTensor> Expand(const DTensor& x, std::vector<int64_t> shape, RankContext& ctx) {
  return Run1(OpSpec::Expand(std::move(shape)), x, ctx);
}


}  // namespace meshflow
