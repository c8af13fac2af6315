// Eager sharded ops: every rank calls the op with its part of the same DTensors.
//
// The ops are defined in ops/op_spec.h (parameters, rule, dtype contract, kernel); the strategy
// choice and its cache in runtime/strategy.h; this file runs them. Dispatch of one op:
//   1. the op's ShardingRule (ops/sharding_rule.h) is built from the global shapes;
//   2. EnumerateStrategies lists every strategy; each is scored by the modelled time of
//      redistributing every input into the layout it needs (the planner's optimal plans,
//      planner/planner.h PlanFor, i.e. the process-wide PlanCache);
//   3. the cheapest wins; ties go to the strategy whose result has the most Shard mesh dims,
//      then the fewest Partial mesh dims, then enumeration order;
//   4. inputs are redistributed (ExecutePlan with the cached plans), the local kernel
//      (ops/kernels.h) runs on the local shards, and the result wraps the rule's output layout.
// Steps 1-3 run once per (op, params, input layouts, dtype): the choice, the plans and the
// output layout are memoized in a thread-safe DispatchCache, so steady-state dispatch is one hash
// lookup (see bench/ops_bench.cc).
//
// Numerics on uneven shards: kernels run on local shapes; Mean is a sum divided by the global
// count of reduced elements (never an average of local means), so a Partial(sum) of local
// results is the global mean. Max/min of an empty local shard is -inf/+inf (Partial identity).
//
//   MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(DTensor y, Matmul(x, w, ctx));      // x [..,m,k], w [k,n]
//   MF_ASSIGN_OR_RETURN(DTensor p, Softmax(y, /*dim=*/-1, ctx));
//   MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(p, ctx));
//
// Errors (INVALID_ARGUMENT unless noted): inputs on different meshes, or a mesh other than the
// context's; dtypes that differ where they must match; integer operands where the op needs a float
// (UNIMPLEMENTED: matmul, div, scale, exp/relu/gelu, mean, softmax, norms, cross-entropy
// logits) and float operands where it needs an integer (ids, targets); the rule's shape errors; no
// strategy the planner can reach (e.g. Partial(avg) inputs of a rule that only passes sum are
// fine - they are reduced first - but planner errors surface when every strategy fails).
#ifndef MESHFLOW_RUNTIME_EAGER_H_
#define MESHFLOW_RUNTIME_EAGER_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/ops/sharding_rule.h"
#include "meshflow/runtime/strategy.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

// Collective: runs `op` with an already chosen strategy: redistributes every input that is not
// in choice.operand_layouts (choice.plans), runs the local kernel with the per-rank context
// (mean count, embedding row offset, local result shape) and wraps the result in choice.result.
// Errors: operand count, or inputs whose layouts are not the ones the choice was made for;
// meshes differing from the context's; executor / kernel errors.
StatusOr<DTensor> RunStrategy(const OpSpec& op, const StrategyChoice& choice, std::span<const DTensor* const> inputs,
                              RankContext& ctx);

// Collective: runs `op`. With `forced`, that strategy is used instead of the cheapest (tests).
StatusOr<DTensor> RunOp(const OpSpec& op, std::span<const DTensor* const> inputs, RankContext& ctx,
                        const Strategy* forced = nullptr);

// ---- The public ops (all collective). ----
StatusOr<DTensor> Matmul(const DTensor& a, const DTensor& b, RankContext& ctx);
StatusOr<DTensor> Add(const DTensor& a, const DTensor& b, RankContext& ctx);
StatusOr<DTensor> Sub(const DTensor& a, const DTensor& b, RankContext& ctx);
StatusOr<DTensor> Mul(const DTensor& a, const DTensor& b, RankContext& ctx);
StatusOr<DTensor> Div(const DTensor& a, const DTensor& b, RankContext& ctx);
StatusOr<DTensor> Neg(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Scale(const DTensor& x, double alpha, RankContext& ctx);
StatusOr<DTensor> Relu(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Exp(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Gelu(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Sum(const DTensor& x, std::vector<int> dims, bool keepdim, RankContext& ctx);
StatusOr<DTensor> Mean(const DTensor& x, std::vector<int> dims, bool keepdim, RankContext& ctx);
StatusOr<DTensor> Max(const DTensor& x, std::vector<int> dims, bool keepdim, RankContext& ctx);
StatusOr<DTensor> Min(const DTensor& x, std::vector<int> dims, bool keepdim, RankContext& ctx);
StatusOr<DTensor> Softmax(const DTensor& x, int dim, RankContext& ctx);
StatusOr<DTensor> LogSoftmax(const DTensor& x, int dim, RankContext& ctx);
StatusOr<DTensor> Permute(const DTensor& x, std::vector<int> perm, RankContext& ctx);
StatusOr<DTensor> Transpose(const DTensor& x, int dim0, int dim1, RankContext& ctx);
// `shape` may hold one -1 (inferred). A kept Shard must be exact under torch.chunk on both
// shapes; otherwise the input is redistributed first (see ReshapeRule).
StatusOr<DTensor> Reshape(const DTensor& x, std::vector<int64_t> shape, RankContext& ctx);
// Over the trailing `normalized_ndim` dims; weight / bias (nullptr: none) have those dims' shape.
StatusOr<DTensor> LayerNorm(const DTensor& x, int normalized_ndim, const DTensor* weight, const DTensor* bias,
                            double eps, RankContext& ctx);
StatusOr<DTensor> RmsNorm(const DTensor& x, int normalized_ndim, const DTensor* weight, double eps,
                          RankContext& ctx);
// table [V, D] (any dtype), ids [...] (i32/i64, each in [0, V)) -> [..., D].
StatusOr<DTensor> Embedding(const DTensor& table, const DTensor& ids, RankContext& ctx);
StatusOr<DTensor> Concat(std::span<const DTensor* const> inputs, int dim, RankContext& ctx);
StatusOr<DTensor> Slice(const DTensor& x, int dim, int64_t start, int64_t end, int64_t step, RankContext& ctx);
// logits [..., C] (float), targets [...] (i32/i64, each in [0, C)) -> loss: [] (mean, sum) or
// [...] (none).
StatusOr<DTensor> CrossEntropy(const DTensor& logits, const DTensor& targets, LossReduction reduction,
                               RankContext& ctx);

// Pointwise ops of the training path (float operands).
StatusOr<DTensor> Tanh(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Sigmoid(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Silu(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Sqrt(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Rsqrt(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Log(const DTensor& x, RankContext& ctx);
StatusOr<DTensor> Pow(const DTensor& x, double exponent, RankContext& ctx);
StatusOr<DTensor> AddScalar(const DTensor& x, double value, RankContext& ctx);
// 1 where `a op b` holds, else 0, in the operands' dtype (numpy broadcasting).
StatusOr<DTensor> Compare(CompareOp op, const DTensor& a, const DTensor& b, RankContext& ctx);
// a where cond != 0, else b (all three broadcast).
StatusOr<DTensor> Where(const DTensor& cond, const DTensor& a, const DTensor& b, RankContext& ctx);
// x broadcast to the global `shape` (numpy rules).
StatusOr<DTensor> Expand(const DTensor& x, std::vector<int64_t> shape, RankContext& ctx);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_EAGER_H_
