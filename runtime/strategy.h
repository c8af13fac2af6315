// The strategy choice of the eager runtime: which layouts an op's operands and result take on a
// mesh (a Strategy of the op's ShardingRule), the planner's plans to get the operands there, and
// a thread-safe memo of that choice. No communication happens here (runtime/eager.h runs the choice);
// the propagation pass (compiler/propagation.h) uses the same checks over a whole graph.
//
//   MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseStrategy(OpSpec::Matmul(), inputs));
//   // c->operand_layouts, c->plans (nullptr where already in place), c->result
#ifndef MESHFLOW_RUNTIME_STRATEGY_H_
#define MESHFLOW_RUNTIME_STRATEGY_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/ops/sharding_rule.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

// A strategy made concrete for given inputs: the layouts it needs, the plans to get there and
// the result layout.
struct StrategyChoice {
  Strategy strategy;
  std::vector<Layout> operand_layouts;                // required input layouts
  std::vector<std::shared_ptr<const Plan>> plans;     // per input; nullptr when already in place
  Layout result;
  double modelled_us = 0;                             // sum of the plans' modelled times
  int64_t mean_count = -1;  // kMean / kCrossEntropy(mean): global count of reduced elements
};

// Thread-safe memo of StrategyChoice per (op without alpha, input layouts, dtype).
class DispatchCache {
 public:
  DispatchCache() = default;
  DispatchCache(const DispatchCache&) = delete;
  DispatchCache& operator=(const DispatchCache&) = delete;

  std::shared_ptr<const StrategyChoice> Find(const OpSpec& op, std::span<const DTensor* const> inputs) const;
  void Insert(const OpSpec& op, std::span<const DTensor* const> inputs, std::shared_ptr<const StrategyChoice> c);

  int64_t hits() const;
  int64_t misses() const;
  size_t size() const;
  void Clear();

 private:
  struct Entry {
    OpSpec op;
    std::vector<Layout> layouts;
    std::vector<DType> dtypes;  // per input (embedding / cross-entropy mix float and integer)
    std::shared_ptr<const StrategyChoice> choice;
  };
  static uint64_t Hash(const OpSpec& op, std::span<const DTensor* const> inputs);
  static bool Matches(const Entry& e, const OpSpec& op, std::span<const DTensor* const> inputs);

  mutable std::mutex mu_;
  std::unordered_multimap<uint64_t, Entry> entries_;
  mutable int64_t hits_ = 0;
  mutable int64_t misses_ = 0;
};

// The process-wide cache used by the ops below.
DispatchCache& DefaultDispatchCache();

// Makes `strategy` concrete for inputs in `input_layouts` (plans from PlanFor; `dtype` is every
// input's dtype, or one per input). Errors: a strategy that is not StrategyFor(rule, its
// assignment) on this mesh's ndim (INVALID_ARGUMENT); layout or planner errors (e.g. Partial(avg) ->
// Partial(sum)); FAILED_PRECONDITION when the strategy is not exact on this mesh (see
// CheckStrategyOnMesh: reshape and slice keeping a Shard whose chunks do not line up).
// Every strategy it accepts computes the op exactly (RunStrategy).
StatusOr<StrategyChoice> EvaluateStrategy(const OpSpec& op, const ShardingRule& rule, const Strategy& strategy,
                                          std::span<const Layout* const> input_layouts, DType dtype);
StatusOr<StrategyChoice> EvaluateStrategy(const OpSpec& op, const ShardingRule& rule, const Strategy& strategy,
                                          std::span<const Layout* const> input_layouts,
                                          std::span<const DType> dtypes);

// The mesh-dependent part of EvaluateStrategy's validity check, for callers that enumerate
// strategies without concrete input layouts (e.g. a propagation pass): OK, or FAILED_PRECONDITION
// when `strategy` is not exact on `mesh` (reshape: a kept Shard whose torch.chunk boundaries do
// not line up between the input and the result, see ReshapeRule; slice: a kept Shard of the
// sliced dim whose selected elements are not the result's chunks, see SliceRule). Other ops: OK.
Status CheckStrategyOnMesh(const OpSpec& op, const ShardingRule& rule, const Strategy& strategy,
                           const DeviceMesh& mesh);

// The cheapest strategy for these inputs (cached in `cache`, default: DefaultDispatchCache()).
StatusOr<std::shared_ptr<const StrategyChoice>> ChooseStrategy(const OpSpec& op,
                                                               std::span<const DTensor* const> inputs,
                                                               DispatchCache* cache = nullptr);

// OK when `inputs` can be the operands of `op`: the operand count, no null, the dtype contract
// (CheckOperandDTypes), one mesh. Errors name the op and the bad operand.
Status CheckOperands(const OpSpec& op, std::span<const DTensor* const> inputs);

// EvaluateStrategy for concrete inputs (CheckOperands, RuleFor, then the above).
StatusOr<StrategyChoice> EvaluateStrategy(const OpSpec& op, std::span<const DTensor* const> inputs,
                                          const Strategy& strategy);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_STRATEGY_H_
