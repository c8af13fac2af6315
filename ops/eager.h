// Eager sharded ops: every rank calls the op with its part of the same DTensors.
//
// Dispatch of one op:
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
//   MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(DTensor y, Matmul(x, w, comms));      // x [..,m,k], w [k,n]
//   MF_ASSIGN_OR_RETURN(DTensor p, Softmax(y, /*dim=*/-1, comms));
//   MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(p, comms));
//
// Errors (INVALID_ARGUMENT unless noted): inputs on different meshes, or a mesh other than the
// comms'; dtypes that differ where they must match; integer operands where the op needs a float
// (UNIMPLEMENTED: matmul, div, scale, exp/relu/gelu, mean, softmax, norms, cross-entropy
// logits) and float operands where it needs an integer (ids, targets); the rule's shape errors; no
// strategy the planner can reach (e.g. Partial(avg) inputs of a rule that only passes sum are
// fine - they are reduced first - but planner errors surface when every strategy fails).
#ifndef MESHFLOW_OPS_EAGER_H_
#define MESHFLOW_OPS_EAGER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/dtensor_api.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/ops/sharding_rule.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

// One op with its static parameters. Fields not used by `kind` keep their defaults (so that
// operator== and the dispatch cache compare only what matters).
struct OpSpec {
  enum class Kind {
    kMatmul, kBinary, kUnary, kReduce, kSoftmax,
    kPermute,       // perm
    kTranspose,     // dim, dim1 (swap two dims; negative count from the end)
    kReshape,       // shape (at most one -1)
    kNorm,          // norm, normalized_ndim, has_weight, has_bias, eps
    kEmbedding,     // operands: table [V, D], ids [...] (i32/i64)
    kConcat,        // dim, num_inputs (>= 1)
    kSlice,         // dim, start, end, step (python semantics, step >= 1)
    kCrossEntropy,  // operands: logits [..., C], targets [...] (i32/i64); reduction
  };
  Kind kind = Kind::kMatmul;
  BinaryOp binary = BinaryOp::kAdd;    // kBinary
  UnaryOp unary = UnaryOp::kNeg;       // kUnary
  double alpha = 1.0;                  // kUnary kScale (does not affect the strategy)
  ReduceKind reduce = ReduceKind::kSum;  // kReduce
  std::vector<int> dims;               // kReduce (empty: all dims)
  bool keepdim = false;                // kReduce
  int dim = -1;                        // kSoftmax, kTranspose (first dim), kConcat, kSlice
  bool log = false;                    // kSoftmax: log-softmax
  std::vector<int> perm;               // kPermute: result dim i is input dim perm[i]
  int dim1 = -1;                       // kTranspose (second dim)
  std::vector<int64_t> shape;          // kReshape: the global result shape (one -1 allowed)
  NormKind norm = NormKind::kLayerNorm;  // kNorm
  int normalized_ndim = 1;             // kNorm: how many trailing dims are normalized
  bool has_weight = false;             // kNorm: operand 1 is the weight [normalized dims]
  bool has_bias = false;               // kNorm: next operand is the bias [normalized dims]
  double eps = 1e-5;                   // kNorm
  int num_inputs = 2;                  // kConcat
  int64_t start = 0;                   // kSlice
  int64_t end = INT64_MAX;             // kSlice (clamped like python)
  int64_t step = 1;                    // kSlice
  LossReduction reduction = LossReduction::kMean;  // kCrossEntropy

  static OpSpec Matmul() { return OpSpec{}; }
  static OpSpec Binary(BinaryOp op);
  static OpSpec Unary(UnaryOp op, double alpha = 1.0);
  static OpSpec Reduce(ReduceKind kind, std::vector<int> dims, bool keepdim);
  static OpSpec Softmax(int dim, bool log);
  static OpSpec Permute(std::vector<int> perm);
  static OpSpec Transpose(int dim0, int dim1);
  static OpSpec Reshape(std::vector<int64_t> shape);
  static OpSpec Norm(NormKind norm, int normalized_ndim, bool has_weight, bool has_bias, double eps = 1e-5);
  static OpSpec LayerNorm(int normalized_ndim, bool has_weight, bool has_bias, double eps = 1e-5) {
    return Norm(NormKind::kLayerNorm, normalized_ndim, has_weight, has_bias, eps);
  }
  static OpSpec RmsNorm(int normalized_ndim, bool has_weight, double eps = 1e-5) {
    return Norm(NormKind::kRmsNorm, normalized_ndim, has_weight, false, eps);
  }
  static OpSpec Embedding();
  static OpSpec Concat(int dim, int num_inputs);
  static OpSpec Slice(int dim, int64_t start, int64_t end, int64_t step = 1);
  static OpSpec CrossEntropy(LossReduction reduction);

  int num_operands() const;
  // "matmul", "add", "scale(2)", "sum(dims=[0],keepdim)", "permute([1,0])", "reshape([6,-1])",
  // "layer_norm(ndim=1,weight,bias,eps=1e-05)", "embedding", "concat(dim=0,n=3)",
  // "slice(dim=1,1:5:2)", "cross_entropy(mean)", ...
  std::string ToString() const;
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

// Collective: runs `op` with an already chosen strategy: redistributes every input that is not
// in choice.operand_layouts (choice.plans), runs the local kernel with the per-rank context
// (mean count, embedding row offset, local result shape) and wraps the result in choice.result.
// Errors: operand count, or inputs whose layouts are not the ones the choice was made for;
// meshes differing from the comms'; executor / kernel errors.
StatusOr<DTensor> RunStrategy(const OpSpec& op, const StrategyChoice& choice, std::span<const DTensor* const> inputs,
                              MeshComms& comms);

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
StatusOr<DTensor> Permute(const DTensor& x, std::vector<int> perm, MeshComms& comms);
StatusOr<DTensor> Transpose(const DTensor& x, int dim0, int dim1, MeshComms& comms);
// `shape` may hold one -1 (inferred). A kept Shard must be exact under torch.chunk on both
// shapes; otherwise the input is redistributed first (see ReshapeRule).
StatusOr<DTensor> Reshape(const DTensor& x, std::vector<int64_t> shape, MeshComms& comms);
// Over the trailing `normalized_ndim` dims; weight / bias (nullptr: none) have those dims' shape.
StatusOr<DTensor> LayerNorm(const DTensor& x, int normalized_ndim, const DTensor* weight, const DTensor* bias,
                            double eps, MeshComms& comms);
StatusOr<DTensor> RmsNorm(const DTensor& x, int normalized_ndim, const DTensor* weight, double eps,
                          MeshComms& comms);
// table [V, D] (any dtype), ids [...] (i32/i64, each in [0, V)) -> [..., D].
StatusOr<DTensor> Embedding(const DTensor& table, const DTensor& ids, MeshComms& comms);
StatusOr<DTensor> Concat(std::span<const DTensor* const> inputs, int dim, MeshComms& comms);
StatusOr<DTensor> Slice(const DTensor& x, int dim, int64_t start, int64_t end, int64_t step, MeshComms& comms);
// logits [..., C] (float), targets [...] (i32/i64, each in [0, C)) -> loss: [] (mean, sum) or
// [...] (none).
StatusOr<DTensor> CrossEntropy(const DTensor& logits, const DTensor& targets, LossReduction reduction,
                               MeshComms& comms);

// Per-rank facts a local kernel needs beyond its operands.
struct KernelContext {
  int64_t mean_count = -1;   // kMean / kCrossEntropy(mean): global count (-1: local count)
  int64_t row_offset = 0;    // kEmbedding: global index of the local table's first row
  int64_t global_rows = -1;  // kEmbedding: V (-1: the local table's row count); ids outside error
  // kReshape: the local result shape (nullopt: the op's global shape, i.e. single rank).
  std::optional<std::vector<int64_t>> out_shape;
  // kSlice on a sharded dim: the local slice as (start, size) in local indices (nullopt: the op's).
  std::optional<std::pair<int64_t, int64_t>> slice_local;
};

// The local kernel of `op` on local operands (also the single-rank reference in tests). Runs a
// sharded choice's local step only together with its KernelContext, and never a vocab-parallel
// cross-entropy (logits sharded on C: needs collectives, RunStrategy does it).
StatusOr<Tensor> RunKernel(const OpSpec& op, std::span<const Tensor* const> operands, int64_t mean_count = -1);
StatusOr<Tensor> RunKernel(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_EAGER_H_
