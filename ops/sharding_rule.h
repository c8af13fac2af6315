// ShardingRule: an op's sharding behaviour as einsum-like factors (Shardy style), and the one
// generic strategy enumerator every op shares.
//
// A factor is one index of the op's einsum: it has a size and a kind, and every operand / result
// dim names the factor it carries (or kNoFactor for a size-1 broadcast dim, which is never
// sharded). Matmul [m,k] x [k,n] -> [m,n] is
//
//   factors  {m: 5 pass-through, k: 7 contracting, n: 3 pass-through}
//   operands {{m, k}, {k, n}}      result {m, n}
//
// Factor kinds:
//   kPassThrough      batch / free dims: sharded the same way on every operand and the result
//   kContracting      summed products (matmul k): sharded on every operand holding it -> the
//                     result is Partial(sum) on that mesh dim
//   kReduction        reduced by `reduce_op` (sum/mean: kSum, max, min): sharded -> the result
//                     is Partial(reduce_op)
//   kNeedReplication  must not be sharded (softmax along its dim)
//
// Partial pass-through: `partial_rules` lists, for linear ops, which per-operand Partial (or
// Replicate) placements on one mesh dim give a Partial result on that mesh dim without
// communication: add/sub {P(sum), P(sum)} -> P(sum); mul {P(sum), R} and {R, P(sum)} -> P(sum);
// div {P(sum), R} -> P(sum) (linear in the numerator only); matmul as mul; neg/scale/sum/mean
// {P(sum)} -> P(sum); max {P(max)} -> P(max); min {P(min)} -> P(min). Non-linear ops (exp, relu,
// softmax) have none, so Partial inputs must be reduced first.
//
// Data movement (permute, reshape, concat, slice) and embedding pass every Partial op through
// ({P(op),..} -> P(op) for sum, avg, max, min); their rules, the norms' and cross-entropy's live in
// rules_shape.cc. Reshape and slice strategies that keep a Shard are exact only on some meshes:
// EvaluateStrategy / CheckStrategyOnMesh (runtime/eager.h) decide.
//
// Strategies (EnumerateStrategies): every assignment of each mesh dim to one of
//   Replicate | one shardable factor (not kNeedReplication, size >= 1) | one partial rule;
// for each, the operands' required placements and the result's placements follow mechanically.
// Assignments whose result mixes Partial ops (not a valid Layout) are dropped. Several mesh dims
// may shard the same factor (default shard order, mesh-dim order), consistently on all operands.
//
// Example:
//   MF_ASSIGN_OR_RETURN(ShardingRule rule, MatmulRule(std::vector<int64_t>{5, 7}, std::vector<int64_t>{7, 3}));
//   std::vector<Strategy> s = EnumerateStrategies(rule, /*mesh_ndim=*/1);
//   // 6 strategies (ToString): {R} x {R} -> R; S(m): {S(0)} x {R} -> S(0);
//   //   S(k): {S(1)} x {S(0)} -> P(sum); S(n): {R} x {S(1)} -> S(1);
//   //   {P(sum)} x {R} -> P(sum); {R} x {P(sum)} -> P(sum)
#ifndef MESHFLOW_OPS_SHARDING_RULE_H_
#define MESHFLOW_OPS_SHARDING_RULE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/ops/op_kinds.h"

namespace meshflow {

enum class FactorKind { kPassThrough, kContracting, kReduction, kNeedReplication };

std::string_view FactorKindName(FactorKind kind);  // "pass_through", "contracting", ...

struct Factor {
  std::string name;  // for printing ("m", "k", "b0", "d1", ...)
  int64_t size = 0;
  FactorKind kind = FactorKind::kPassThrough;
  ReduceOp reduce_op = ReduceOp::kSum;  // the result's Partial op when sharded (kContracting: kSum)
  friend bool operator==(const Factor&, const Factor&) = default;
};

// One way a mesh dim may be Partial through the op: operand i must be Partial(operands[i]) on
// that mesh dim (nullopt: Replicate), and the result is Partial(result).
struct PartialRule {
  std::vector<std::optional<ReduceOp>> operands;
  ReduceOp result = ReduceOp::kSum;
  friend bool operator==(const PartialRule&, const PartialRule&) = default;
};

inline constexpr int kNoFactor = -1;

struct ShardingRule {
  std::string op;  // "matmul", "add", "sum", ...
  std::vector<Factor> factors;
  std::vector<std::vector<int>> operand_dims;  // [operand][dim] -> factor index or kNoFactor
  std::vector<int> result_dims;                // [dim] -> factor index or kNoFactor
  std::vector<int64_t> result_shape;
  std::vector<PartialRule> partial_rules;

  int num_operands() const { return static_cast<int>(operand_dims.size()); }
  // "matmul: [m,k],[k,n] -> [m,n] {m=5 pass_through, k=7 contracting(sum), n=3 pass_through}"
  std::string ToString() const;
  friend bool operator==(const ShardingRule&, const ShardingRule&) = default;
};

// What one mesh dim does in a strategy.
struct MeshDimAssignment {
  enum class Kind { kReplicate, kFactor, kPartial };
  Kind kind = Kind::kReplicate;
  int index = -1;  // factor index (kFactor) or partial rule index (kPartial)
  friend bool operator==(const MeshDimAssignment&, const MeshDimAssignment&) = default;
};

struct Strategy {
  std::vector<MeshDimAssignment> assignment;  // one per mesh dim
  std::vector<Placements> operands;           // required placements per operand
  Placements result;
  // "{S(0),R} x {R,S(1)} -> S(0),S(1)"
  std::string ToString() const;
  friend bool operator==(const Strategy&, const Strategy&) = default;
};

// The strategy an assignment implies, or nullopt when its result would mix Partial ops.
// Precondition: assignment indices are valid for the rule.
std::optional<Strategy> StrategyFor(const ShardingRule& rule, std::span<const MeshDimAssignment> assignment);

// Every valid strategy of the rule on a mesh of `mesh_ndim` dims, in a fixed order (mesh dim 0
// slowest; per mesh dim: Replicate, factors in order, partial rules in order). The first one is
// always all-Replicate.
std::vector<Strategy> EnumerateStrategies(const ShardingRule& rule, int mesh_ndim);

// The points of the op's iteration space that one rank computes under `s` on a mesh of shape
// `mesh_shape`: the product over factors of the factor's size divided by the sizes of the mesh
// dims that shard it, rounded up (the largest torch.chunk piece: ceil(ceil(s/a)/b) = ceil(s/ab)).
// Replicate and Partial mesh dims divide nothing (every rank works on its whole local data).
// Matmul [5,7] x [7,3] is 5 * 7 * 3 = 105 points replicated, 5 * 4 * 3 = 60 with k sharded over
// 2 ranks. A double, so that huge iteration spaces do not overflow. The propagation pass's
// compute term (PropagationOptions::compute_gflops). Precondition: s is a strategy of `rule` on a
// mesh of mesh_shape.size() dims.
double LocalWorkPoints(const ShardingRule& rule, const Strategy& s, std::span<const int64_t> mesh_shape);

// ---- RuleBuilder: how every rule of this header is built. ----

// "This operand / the result has no dim carrying the factor" in RuleBuilder::AddFactor.
inline constexpr int kNoDim = -1;

// Builds one op's ShardingRule a factor at a time (Shardy's OpShardingRuleBuilder::addFactor):
// constructed with the op's name, its operands' ranks and its result shape; each AddFactor adds a
// factor (numbered in the order added) with its name, size and kind, and names the dim that carries
// it in every operand and in the result (kNoDim: none). Dims that no factor names carry kNoFactor
// (size-1 broadcast dims). Build() returns the rule, or the first misuse: an operand_dims list whose
// length is not the number of operands, a dim out of range for its rank, or a dim named by two
// factors (each error names the factor and the bad dim).
//
// Example (matmul [5,7] x [7,3] -> [5,3]: the rule MatmulRule returns):
//   MF_ASSIGN_OR_RETURN(ShardingRule rule,
//                       RuleBuilder("matmul", {2, 2}, {5, 3})
//                           .AddFactor("m", 5, FactorKind::kPassThrough, {0, kNoDim}, 0)
//                           .AddFactor("k", 7, FactorKind::kContracting, {1, 0}, kNoDim)
//                           .AddFactor("n", 3, FactorKind::kPassThrough, {kNoDim, 1}, 1)
//                           .AddPartialRule({{ReduceOp::kSum, std::nullopt}, ReduceOp::kSum})
//                           .AddPartialRule({{std::nullopt, ReduceOp::kSum}, ReduceOp::kSum})
//                           .Build());
//   // rule == *MatmulRule(std::vector<int64_t>{5, 7}, std::vector<int64_t>{7, 3})
class RuleBuilder {
 public:
  RuleBuilder(std::string op, std::vector<int> operand_ranks, std::vector<int64_t> result_shape);

  // Adds a factor carried by operand o's dim operand_dims[o] (kNoDim: not by operand o) and by the
  // result's dim result_dim (kNoDim: not by the result). `reduce_op`: the result's Partial op when
  // a kContracting / kReduction factor is sharded.
  RuleBuilder& AddFactor(std::string name, int64_t size, FactorKind kind, std::vector<int> operand_dims,
                         int result_dim, ReduceOp reduce_op = ReduceOp::kSum);

  // Numpy broadcasting: one pass-through factor "<prefix><i>" of size out[i] per dim i of `out`
  // (result dim i), carried by dim j of operand o when operands[o] (operand o's leading dims,
  // right-aligned against `out`) has the same size there (a size-1 stretched dim carries none).
  // Operands past operands.size() carry none of these factors.
  RuleBuilder& AddBroadcastFactors(std::string_view prefix, std::span<const int64_t> out,
                                   std::span<const std::span<const int64_t>> operands);

  RuleBuilder& AddPartialRule(PartialRule rule);
  // {P(op), ..., P(op)} -> P(op) for sum, avg, max, min: right for ops that only move / select
  // elements (each output element is one input element, or a fixed zero).
  RuleBuilder& AddSelectPartialRules();

  StatusOr<ShardingRule> Build() const;

 private:
  ShardingRule rule_;
  Status error_ = Status::Ok();  // the first misuse
};

// ---- Rules of the supported ops. Errors name the op, the shapes and the bad dims. ----

// Batched matmul with numpy broadcasting of the batch dims: a [..., m, k] x b [..., k, n].
// Covers matmul, bmm and linear (x [..., m, k] x w [k, n]). Numpy rank-1 semantics: a [k] is
// [1, k] and b [k] is [k, 1] with that dim removed from the result (no m / n factor). Errors:
// rank 0, k mismatch, batch dims that do not broadcast.
StatusOr<ShardingRule> MatmulRule(std::span<const int64_t> a, std::span<const int64_t> b);

std::string_view BinaryOpName(BinaryOp op);  // "add", "sub", "mul", "div"
// Pointwise with numpy broadcasting (right-aligned; size-1 dims stretch, mapped to kNoFactor).
// Errors: shapes that do not broadcast.
StatusOr<ShardingRule> BinaryRule(BinaryOp op, std::span<const int64_t> a, std::span<const int64_t> b);

// Pointwise unary ops. `alpha` (OpSpec) is the factor of kScale, the exponent of kPow and the
// addend of kAddScalar. kStep is 1 where x > 0, else 0 (relu's derivative); the *Deriv ops are the
// derivatives of gelu (tanh form), silu, tanh and sigmoid at x (used by the VJPs, ops/op_spec.h).
// "neg", "scale", "relu", "exp", "gelu", "tanh", "sigmoid", "silu", "sqrt", "rsqrt", "pow",
// "add_scalar", "log", "step", "gelu_deriv", "silu_deriv", "tanh_deriv", "sigmoid_deriv", "fill"
std::string_view UnaryOpName(UnaryOp op);
bool IsLinear(UnaryOp op);                 // neg, scale
// Whether `alpha` is a parameter of the op (scale, pow, add_scalar, fill): printed by OpSpec::ToString.
bool HasAlpha(UnaryOp op);
ShardingRule UnaryRule(UnaryOp op, std::span<const int64_t> x);

// Element-wise comparison with numpy broadcasting: 1 where it holds, else 0, in the operands'
// dtype (so masks multiply like any tensor). Rule: BinaryRule's factors without partial rules.
std::string_view CompareOpName(CompareOp op);  // "eq", "ne", "lt", "le", "gt", "ge"
StatusOr<ShardingRule> CompareRule(CompareOp op, std::span<const int64_t> a, std::span<const int64_t> b);

// where(cond, a, b): a where cond != 0, else b; all three broadcast (numpy). One pass-through
// factor per result dim; partial rules {R, P(sum), P(sum)} -> P(sum) (linear in a and b for a
// fixed cond). Errors: shapes that do not broadcast.
StatusOr<ShardingRule> WhereRule(std::span<const int64_t> cond, std::span<const int64_t> a,
                                 std::span<const int64_t> b);

// Broadcast x to `shape` (numpy rules: x right-aligned, its size-1 dims stretch). One
// pass-through factor per result dim (a stretched or new dim is carried by the result only: a
// Shard of it makes each rank expand into its own chunk). Partial rules {P(op)} -> P(op) for sum,
// avg, max, min. Errors: x does not broadcast to shape.
StatusOr<ShardingRule> ExpandRule(std::span<const int64_t> x, std::span<const int64_t> shape);

std::string_view ReduceKindName(ReduceKind kind);  // "sum", "mean", "max", "min"
// Reduction over `dims` (negative dims count from the end; empty = all dims). The result keeps
// size-1 dims (kNoFactor) when keepdim. Errors: a dim out of range or repeated; max/min over a
// zero-size dim.
StatusOr<ShardingRule> ReduceRule(ReduceKind kind, std::span<const int64_t> x, std::span<const int> dims,
                                  bool keepdim);
// Normalized, sorted reduce dims (shared with the kernels). Errors as ReduceRule.
StatusOr<std::vector<int>> NormalizeReduceDims(std::span<const int64_t> x, std::span<const int> dims);

// Softmax / log-softmax along `dim` (negative counts from the end): that factor is
// kNeedReplication. Errors: dim out of range.
StatusOr<ShardingRule> SoftmaxRule(bool log, std::span<const int64_t> x, int dim);

// ---- Data movement, normalization, embedding and loss rules (rules_shape.cc). ----
// Data-movement ops (permute, reshape, concat, slice) and embedding pass every Partial op through
// (partial rules {P(op),..} -> P(op) for sum, avg, max, min): they only select / move elements.

// Permute: result dim i is input dim perm[i] (negative entries count from the end). Factors are
// the input dims, all pass-through. Errors: perm not a permutation of the input's dims.
StatusOr<ShardingRule> PermuteRule(std::span<const int64_t> x, std::span<const int> perm);
// The permutation swapping dims d0 and d1 of a rank-`rank` tensor. Errors: a dim out of range.
StatusOr<std::vector<int>> TransposePerm(int rank, int d0, int d1);

// The result shape of reshaping `x` to `shape` (one -1 is inferred). Errors: more than one -1,
// another negative size, element counts that differ.
StatusOr<std::vector<int64_t>> ResolveReshape(std::span<const int64_t> x, std::span<const int64_t> shape);

// One group of a reshape: the input dims and result dims (size-1 dims excluded) whose sizes have
// the same product and that no smaller split separates. [6,4] -> [2,3,4]: {in [0], out [0,1]},
// {in [1], out [2]}.
struct ReshapeGroup {
  std::vector<int> in_dims;
  std::vector<int> out_dims;
  friend bool operator==(const ReshapeGroup&, const ReshapeGroup&) = default;
};
// Precondition: equal element counts (ResolveReshape). Empty when the tensor has no elements.
std::vector<ReshapeGroup> ReshapeGroups(std::span<const int64_t> x, std::span<const int64_t> out);

// Reshape / view (factor decomposition). Per group: a 1:1 group is one pass-through factor; a
// split / merge group ties its major input dim and major result dim to one pass-through factor
// "g<i>" (size: the input dim's) and makes every other dim of the group a kNeedReplication factor.
// Size-1 dims carry kNoFactor. A tensor with no elements: every dim is kNeedReplication.
// Whether a Shard of a tied factor is exact depends on the mesh: under torch.chunk, every rank's
// input rows [lo, hi) of the major input dim (times the rest of the group) must be the same flat
// range as its result rows of the major result dim. E.g. [4,3] -> [12] on 2 ranks: rows [0,2) x 3
// = [0,6) = result [0,6): exact; [3,4] -> [12] on 2 ranks: [0,2) x 4 = [0,8) but the result
// holds [0,6): not exact. EvaluateStrategy (runtime/eager.h) rejects the inexact ones
// (ReshapeShardingIsExact), so the input is redistributed first.
StatusOr<ShardingRule> ReshapeRule(std::span<const int64_t> x, std::span<const int64_t> shape);

std::string_view NormKindName(NormKind kind);  // "layer_norm", "rms_norm"
// Normalization over the trailing `normalized_ndim` dims of x: those factors are
// kNeedReplication, leading dims pass through. Optional weight / bias operands (in that order)
// have the normalized dims' shape and carry the same factors. No partial rules. Errors:
// normalized_ndim outside [1, rank], weight / bias shapes that differ from the normalized dims.
StatusOr<ShardingRule> NormRule(NormKind kind, std::span<const int64_t> x, int normalized_ndim,
                                const std::vector<int64_t>* weight, const std::vector<int64_t>* bias);

// Embedding: table [V, D], ids [...] -> [..., D]. Factors: v (contracting(sum): a row-sharded
// table gives a Partial(sum) result: each rank looks up the ids in its row range, zeros
// elsewhere), d (pass-through: column sharding), one pass-through factor per ids dim. Partial
// rules {P(op), R} -> P(op). Errors: table rank != 2.
StatusOr<ShardingRule> EmbeddingRule(std::span<const int64_t> table, std::span<const int64_t> ids);

// Concat along `dim` (negative counts from the end) of N >= 1 operands of equal rank whose other
// dims agree: those pass through; the concat dim is kNeedReplication (one factor per operand and
// one for the result). Partial rules {P(op), ..., P(op)} -> P(op). Errors: no operands, ranks or
// sizes that differ, dim out of range, rank 0.
StatusOr<ShardingRule> ConcatRule(std::span<const std::vector<int64_t>* const> shapes, int dim);

// A normalized slice: start in [0, n], step >= 1, `size` elements start, start + step, ...
struct SliceRange {
  int dim = 0;
  int64_t start = 0;
  int64_t step = 1;
  int64_t size = 0;
  friend bool operator==(const SliceRange&, const SliceRange&) = default;
};
// Python semantics: negative start / end count from the end, both clamped to [0, n]. Errors: dim
// out of range, step < 1.
StatusOr<SliceRange> NormalizeSlice(std::span<const int64_t> x, int dim, int64_t start, int64_t end, int64_t step);
// The result indices [first, last) whose source index start + j * step lies in [lo, hi).
Interval SliceResultRange(const SliceRange& s, int64_t lo, int64_t hi);
// Slice of x along `dim`: every dim is pass-through, the sliced dim's factor (size: the input's)
// tying the input dim to the result dim. Partial rules {P(op)} -> P(op). A Shard of the sliced
// dim is exact only when every rank's selected elements are exactly its torch.chunk of the result
// (x[8] [0:8:2] on 2 ranks: {0,2} and {4,6} -> result [0,2) and [2,4): kept; [1:8] on 2 ranks:
// [1,4) but the result chunk is [0,4): not); EvaluateStrategy / CheckStrategyOnMesh reject the
// others. Errors: as NormalizeSlice.
StatusOr<ShardingRule> SliceRule(std::span<const int64_t> x, int dim, int64_t start, int64_t end, int64_t step);

std::string_view LossReductionName(LossReduction r);  // "mean", "sum", "none"
// Cross-entropy of logits [..., C] against integer targets [...] (the logits' leading dims):
// leading factors are pass-through for kNone and reduction(sum) for kMean / kSum (a sharded batch
// gives Partial(sum); the mean divides by the global count). The class factor c is
// contracting(sum): vocab-parallel, logits sharded on C give a Partial(sum) result (the eager
// kernel all-reduces the row max and the sum of exps over the ranks sharing the rows; the rank
// holding class 0 adds logsumexp, each rank subtracts its local target logit). No partial rules.
// Errors: logits rank 0, targets shape != logits.shape[:-1].
StatusOr<ShardingRule> CrossEntropyRule(std::span<const int64_t> logits, std::span<const int64_t> targets,
                                        LossReduction reduction);

// ---- Rules of the gradient ops (used by the VJPs in ops/op_spec.cc; rules_grad.cc). ----

// The gradient of an embedding table: grad [i..., D], ids [i...] -> [V, D], each ids position
// adding its grad row into row ids[...] (index-add). Factors: one contracting(sum) factor per ids
// dim (a sharded batch gives a Partial(sum) table gradient), d pass-through, v pass-through on the
// result only (a row-sharded result makes each rank add only the ids in its row range). Partial
// rules {P(sum), R} -> P(sum). Errors: grad shape != ids shape + [D], num_rows < 0.
StatusOr<ShardingRule> EmbeddingGradRule(std::span<const int64_t> grad, std::span<const int64_t> ids,
                                         int64_t num_rows);

// The gradient of a slice: grad (the slice's result shape) -> zeros of `input` shape with grad
// placed at the sliced positions. Every dim but the sliced one passes through; the sliced dim is
// need-replication on both sides. Partial rules {P(op)} -> P(op). Errors: as NormalizeSlice, or a
// grad shape that is not the slice's result shape.
StatusOr<ShardingRule> SliceGradRule(std::span<const int64_t> grad, std::span<const int64_t> input, int dim,
                                     int64_t start, int64_t end, int64_t step);

// The gradient of cross-entropy w.r.t. the logits: (logits [b..., C], targets [b...], g) ->
// [b..., C] = (softmax(logits) - onehot(targets)) * g (/ count for kMean). g is [] for kMean / kSum
// and [b...] for kNone. Leading factors and c pass-through (c sharded: vocab-parallel, the
// eager runtime reduces each row's max and sum of exponentials over the class shards,
// CrossEntropyGradKernel with a VocabShard). Partial rules {R, R, P(sum)} -> P(sum) (linear in
// g). Errors: as CrossEntropyRule, g's shape.
StatusOr<ShardingRule> CrossEntropyGradRule(std::span<const int64_t> logits, std::span<const int64_t> targets,
                                            std::span<const int64_t> grad, LossReduction reduction);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_SHARDING_RULE_H_
