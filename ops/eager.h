// Eager sharded ops: every rank calls the op with its part of the same DTensors.
//
// Dispatch of one op:
//   1. the op's ShardingRule (ops/sharding_rule.h) is built from the global shapes;
//   2. EnumerateStrategies lists every strategy; each is scored by the modelled time of
//      redistributing every input into the layout it needs (the planner's optimal plans,
//      collectives/dtensor_api.h PlanFor, i.e. the process-wide PlanCache);
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
//   MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(DTensor y, ops::Matmul(x, w, comms));      // x [..,m,k], w [k,n]
//   MF_ASSIGN_OR_RETURN(DTensor p, ops::Softmax(y, /*dim=*/-1, comms));
//   MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(p, comms));
//
// Errors (INVALID_ARGUMENT unless noted): inputs on different meshes, or a mesh other than the
// comms'; dtypes that differ; non-float dtypes (UNIMPLEMENTED); the rule's shape errors; no
// strategy the planner can reach (e.g. Partial(avg) inputs of a rule that only passes sum are
// fine - they are reduced first - but planner errors surface when every strategy fails).
#ifndef MESHFLOW_OPS_EAGER_H_
#define MESHFLOW_OPS_EAGER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "collectives/dtensor_api.h"
#include "collectives/mesh_comms.h"
#include "dtensor/dtensor.h"
#include "ops/sharding_rule.h"
#include "planner/plan.h"

namespace meshflow::ops {

// One op with its static parameters.
struct OpSpec {
  enum class Kind { kMatmul, kBinary, kUnary, kReduce, kSoftmax };
  Kind kind = Kind::kMatmul;
  BinaryOp binary = BinaryOp::kAdd;    // kBinary
  UnaryOp unary = UnaryOp::kNeg;       // kUnary
  double alpha = 1.0;                  // kUnary kScale (does not affect the strategy)
  ReduceKind reduce = ReduceKind::kSum;  // kReduce
  std::vector<int> dims;               // kReduce (empty: all dims)
  bool keepdim = false;                // kReduce
  int dim = -1;                        // kSoftmax
  bool log = false;                    // kSoftmax: log-softmax

  static OpSpec Matmul() { return OpSpec{}; }
  static OpSpec Binary(BinaryOp op);
  static OpSpec Unary(UnaryOp op, double alpha = 1.0);
  static OpSpec Reduce(ReduceKind kind, std::vector<int> dims, bool keepdim);
  static OpSpec Softmax(int dim, bool log);

  int num_operands() const { return kind == Kind::kMatmul || kind == Kind::kBinary ? 2 : 1; }
  std::string ToString() const;  // "matmul", "add", "scale(2)", "sum(dims=[0],keepdim)", ...
  friend bool operator==(const OpSpec&, const OpSpec&) = default;
};

// The op's rule for the given global operand shapes. Errors: wrong operand count; rule errors.
StatusOr<ShardingRule> RuleFor(const OpSpec& op, std::span<const std::vector<int64_t>* const> shapes);

// A strategy made concrete for given inputs: the layouts it needs, the plans to get there and
// the result layout.
struct StrategyChoice {
  Strategy strategy;
  std::vector<Layout> operand_layouts;                // required input layouts
  std::vector<std::shared_ptr<const Plan>> plans;     // per input; nullptr when already in place
  Layout result;
  double modelled_us = 0;                             // sum of the plans' modelled times
  int64_t mean_count = -1;                            // kMean: global count of reduced elements
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
    DType dtype;
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

// Makes `strategy` concrete for inputs in `input_layouts` (plans from PlanFor). Errors: layout or
// planner errors (e.g. Partial(avg) -> Partial(sum)).
StatusOr<StrategyChoice> EvaluateStrategy(const OpSpec& op, const ShardingRule& rule, const Strategy& strategy,
                                          std::span<const Layout* const> input_layouts, DType dtype);

// The cheapest strategy for these inputs (cached in `cache`, default: DefaultDispatchCache()).
StatusOr<std::shared_ptr<const StrategyChoice>> ChooseStrategy(const OpSpec& op,
                                                               std::span<const DTensor* const> inputs,
                                                               DispatchCache* cache = nullptr);

// Collective: runs `op`. With `forced`, that strategy is used instead of the cheapest (tests).
StatusOr<DTensor> RunOp(const OpSpec& op, std::span<const DTensor* const> inputs, MeshComms& comms,
                        const Strategy* forced = nullptr);

// ---- The public ops (all collective). ----
StatusOr<DTensor> Matmul(const DTensor& a, const DTensor& b, MeshComms& comms);
StatusOr<DTensor> Add(const DTensor& a, const DTensor& b, MeshComms& comms);
StatusOr<DTensor> Sub(const DTensor& a, const DTensor& b, MeshComms& comms);
StatusOr<DTensor> Mul(const DTensor& a, const DTensor& b, MeshComms& comms);
StatusOr<DTensor> Div(const DTensor& a, const DTensor& b, MeshComms& comms);
StatusOr<DTensor> Neg(const DTensor& x, MeshComms& comms);
StatusOr<DTensor> Scale(const DTensor& x, double alpha, MeshComms& comms);
StatusOr<DTensor> Relu(const DTensor& x, MeshComms& comms);
StatusOr<DTensor> Exp(const DTensor& x, MeshComms& comms);
StatusOr<DTensor> Gelu(const DTensor& x, MeshComms& comms);
StatusOr<DTensor> Sum(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms);
StatusOr<DTensor> Mean(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms);
StatusOr<DTensor> Max(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms);
StatusOr<DTensor> Min(const DTensor& x, std::vector<int> dims, bool keepdim, MeshComms& comms);
StatusOr<DTensor> Softmax(const DTensor& x, int dim, MeshComms& comms);
StatusOr<DTensor> LogSoftmax(const DTensor& x, int dim, MeshComms& comms);

// The local kernel of `op` on local operands (also the single-rank reference in tests).
StatusOr<Tensor> RunKernel(const OpSpec& op, std::span<const Tensor* const> operands, int64_t mean_count = -1);

}  // namespace meshflow::ops

#endif  // MESHFLOW_OPS_EAGER_H_
