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
// Strategies (EnumerateStrategies): every assignment of each mesh dim to one of
//   Replicate | one shardable factor (not kNeedReplication, size >= 1) | one partial rule;
// for each, the operands' required placements and the result's placements follow mechanically.
// Assignments whose result mixes Partial ops (not a valid Layout) are dropped. Several mesh dims
// may shard the same factor (default shard order, mesh-dim order), consistently on all operands.
//
// Example:
//   MF_ASSIGN_OR_RETURN(ShardingRule rule, MatmulRule({5, 7}, {7, 3}));
//   std::vector<Strategy> s = EnumerateStrategies(rule, /*mesh_ndim=*/1);
//   // 6 strategies: R; S(m): {S(0),R}->S(0); S(k): {S(1),S(0)}->P(sum); S(n): {R,S(1)}->S(1);
//   //               {P,R}->P; {R,P}->P
#ifndef MESHFLOW_OPS_SHARDING_RULE_H_
#define MESHFLOW_OPS_SHARDING_RULE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "dtensor/placement.h"

namespace meshflow::ops {

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

// ---- Rules of the supported ops. Errors name the op, the shapes and the bad dims. ----

// Batched matmul with numpy broadcasting of the batch dims: a [..., m, k] x b [..., k, n].
// Covers matmul, bmm and linear (x [..., m, k] x w [k, n]). Errors: rank < 2, k mismatch,
// batch dims that do not broadcast.
StatusOr<ShardingRule> MatmulRule(std::span<const int64_t> a, std::span<const int64_t> b);

enum class BinaryOp { kAdd, kSub, kMul, kDiv };
std::string_view BinaryOpName(BinaryOp op);  // "add", "sub", "mul", "div"
// Pointwise with numpy broadcasting (right-aligned; size-1 dims stretch, mapped to kNoFactor).
// Errors: shapes that do not broadcast.
StatusOr<ShardingRule> BinaryRule(BinaryOp op, std::span<const int64_t> a, std::span<const int64_t> b);

enum class UnaryOp { kNeg, kScale, kRelu, kExp, kGelu };
std::string_view UnaryOpName(UnaryOp op);  // "neg", "scale", "relu", "exp", "gelu"
bool IsLinear(UnaryOp op);                 // neg, scale
ShardingRule UnaryRule(UnaryOp op, std::span<const int64_t> x);

enum class ReduceKind { kSum, kMean, kMax, kMin };
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

}  // namespace meshflow::ops

#endif  // MESHFLOW_OPS_SHARDING_RULE_H_
