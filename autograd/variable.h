// Reverse-mode automatic differentiation over sharded DTensors (eager).
//
// A Variable is a shared handle to a node of a dynamic graph: a DTensor value, whether it needs
// a gradient, and (for op results) the op and its input Variables. Ops on Variables
// (autograd/functions.h, or Apply below) run the eager sharded op (runtime/eager.h: the planner picks
// the layouts and collectives) and record the node. Backward walks the graph from a scalar loss in
// reverse topological order; each op's vector-Jacobian product (autograd/vjp.h) is itself written
// with eager sharded ops, so gradients of sharded values are computed sharded, and a gradient's
// layout is whatever its VJP's ops produced (often Partial(sum) for a weight used by a sharded
// batch: the reduction is deferred to whoever consumes it, e.g. an optimizer redistributing it to
// the parameter's state layout). Gradients accumulate into leaves (Variable::grad) across Backward
// calls until ZeroGrad.
//
// Every rank builds the same graph with its part of the same DTensors (the ops are collective),
// and calls Backward at the same point.
//
//   Variable w = Variable::Leaf(w_dtensor, /*requires_grad=*/true);
//   Variable x = Variable::Leaf(x_dtensor, /*requires_grad=*/false);
//   MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(x, w, ctx));
//   MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(h, {}, false, ctx));
//   MF_RETURN_IF_ERROR(Backward(loss, ctx));
//   const DTensor& dw = *w.grad();  // same global values as the single-rank gradient
//
// Errors: Backward of a non-scalar loss without a seed, or a seed whose shape or dtype differs
// from the loss (INVALID_ARGUMENT); Backward through a graph an earlier Backward released
// (FAILED_PRECONDITION; pass retain_graph to keep it); a leaf with requires_grad and an integer
// dtype (INVALID_ARGUMENT); VJPs the library does not have (UNIMPLEMENTED, naming the op: matmul
// with a rank-1 operand, double backward through a gradient op).
#ifndef MESHFLOW_AUTOGRAD_VARIABLE_H_
#define MESHFLOW_AUTOGRAD_VARIABLE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/runtime/eager.h"

namespace meshflow {

class Variable {
 public:
  Variable() = default;  // undefined (defined() == false)

  // A leaf. Errors: requires_grad on an integer dtype.
  static StatusOr<Variable> Leaf(DTensor value, bool requires_grad);

  bool defined() const { return node_ != nullptr; }
  const DTensor& value() const;
  // The value of a leaf, for in-place updates between steps (an optimizer's ParamSpec::param):
  // nullptr for op results (their values are inputs of recorded backward computations).
  DTensor* mutable_leaf_value();
  bool requires_grad() const;
  bool is_leaf() const;
  // The accumulated gradient of a leaf with requires_grad (nullopt before the first Backward
  // that reaches it, and after ZeroGrad). Op results keep no gradient.
  const std::optional<DTensor>& grad() const;
  void ZeroGrad();
  // Replaces a leaf's gradient (e.g. by its reduced form: optim/grad_reducer.h). Errors: not a leaf
  // with requires_grad, another global shape or mesh than the value's (INVALID_ARGUMENT).
  Status SetGrad(DTensor grad);
  // Moves a leaf's gradient out (nullopt when it has none, or is not a leaf): grad() is empty after.
  std::optional<DTensor> TakeGrad();
  // The op that produced this value (nullopt for leaves and redistributions).
  const std::optional<OpSpec>& op() const;

  // Frees an op result's value until Backward needs it, which calls `rematerialize` for it then
  // (FSDP's reshard after forward: the gathered parameter is gathered again in backward, ideally
  // prefetched). value() of a released Variable aborts. Errors: a leaf or a released value
  // (FAILED_PRECONDITION), an empty function (INVALID_ARGUMENT).
  Status ReleaseValue(std::function<StatusOr<DTensor>()> rematerialize);
  bool value_released() const;

  // Backward hooks (collective code may run in them: every rank's Backward fires them in the same
  // order). A grad-ready hook of a leaf with requires_grad runs in Backward once the leaf's
  // gradient of that Backward is complete (accumulated into grad()), as torch's
  // register_post_accumulate_grad_hook: gradient bucketing starts its reductions there. A
  // pre-backward hook of an op result runs when Backward reaches the value, before its VJP: FSDP
  // starts gathering the previous block's parameters there. A hook's error ends Backward with it.
  // Errors: an undefined Variable, a grad-ready hook on a value that is not a leaf with
  // requires_grad, a pre-backward hook on a leaf (INVALID_ARGUMENT).
  Status AddGradReadyHook(std::function<Status()> hook);
  Status AddPreBackwardHook(std::function<Status()> hook);
  void ClearHooks();

  // Identity of the underlying node (two handles of one node compare equal).
  friend bool operator==(const Variable& a, const Variable& b) { return a.node_ == b.node_; }

 private:
  struct Node;
  friend StatusOr<Variable> Apply(const OpSpec& op, std::span<const Variable> inputs, RankContext& ctx);
  friend StatusOr<Variable> RedistributeVariable(const Variable& x, const Layout& target, RankContext& ctx);
  friend struct BackwardAccess;
  std::shared_ptr<Node> node_;
};

// Collective: runs `op` on the inputs' values (RunOp) and records the node when any input
// requires a gradient and the op is differentiable (comparisons are not). Errors: an undefined
// input; those of RunOp.
StatusOr<Variable> Apply(const OpSpec& op, std::span<const Variable> inputs, RankContext& ctx);

// Collective: x redistributed to `target` (Redistribute, runtime/redistribute.h; a matching
// prefetch in ctx.prefetches() is taken instead of running the plan), recorded for Backward. Its
// gradient passes through unchanged (the same global values, in whatever layout it has: whoever
// consumes the input's gradient redistributes it). autograd::Redistribute is the same.
StatusOr<Variable> RedistributeVariable(const Variable& x, const Layout& target, RankContext& ctx);

struct BackwardOptions {
  // The gradient of the loss (its shape and dtype; any layout). nullptr: 1 for a scalar loss.
  const DTensor* seed = nullptr;
  // Keep the graph so that Backward can run through it again (otherwise it is released).
  bool retain_graph = false;
};

// Collective: accumulates d(loss)/d(leaf) into every reachable leaf with requires_grad.
// A loss that does not require a gradient is OK and does nothing.
Status Backward(const Variable& loss, RankContext& ctx, const BackwardOptions& options = {});

}  // namespace meshflow

#endif  // MESHFLOW_AUTOGRAD_VARIABLE_H_
