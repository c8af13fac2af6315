#include "meshflow/autograd/variable.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "meshflow/autograd/vjp.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {

struct Variable::Node {
  explicit Node(DTensor v) : value(std::move(v)) {}
  DTensor value;
  bool requires_grad = false;
  std::optional<OpSpec> op;       // nullopt: a leaf
  std::vector<Variable> inputs;   // op results: the op's operands (cleared when released)
  bool released = false;          // Backward ran through this node without retain_graph
  std::optional<DTensor> grad;    // leaves with requires_grad
  std::vector<std::function<Status()>> grad_ready_hooks;    // leaves with requires_grad
  std::vector<std::function<Status()>> pre_backward_hooks;  // op results
  bool redistribution = false;  // RedistributeVariable: the gradient passes through
  std::function<StatusOr<DTensor>()> rematerialize;  // set by ReleaseValue
  bool value_released = false;
  bool result() const { return op.has_value() || redistribution; }
};

namespace {

bool IsFloat(DType t) { return IsFloatDType(t); }

}  // namespace

StatusOr<Variable> Variable::Leaf(DTensor value, bool requires_grad) {
  if (requires_grad && !IsFloat(value.dtype())) {
    return InvalidArgumentError("a leaf of dtype " + std::string(DTypeName(value.dtype())) +
                                " cannot require a gradient (f32, f64, bf16 only)");
  }
  Variable v;
  v.node_ = std::make_shared<Node>(std::move(value));
  v.node_->requires_grad = requires_grad;
  return v;
}

const DTensor& Variable::value() const {
  if (node_->value_released) {
    std::fprintf(stderr, "meshflow: Variable::value() of a released value (ReleaseValue): Backward rematerializes it\n");
    std::abort();
  }
  return node_->value;
}
DTensor* Variable::mutable_leaf_value() { return node_ != nullptr && !node_->result() ? &node_->value : nullptr; }
bool Variable::requires_grad() const { return node_ != nullptr && node_->requires_grad; }
bool Variable::is_leaf() const { return node_ == nullptr || !node_->result(); }
const std::optional<DTensor>& Variable::grad() const {
  static const std::optional<DTensor> kNone;
  return node_ == nullptr ? kNone : node_->grad;
}
void Variable::ZeroGrad() {
  if (node_ != nullptr) node_->grad.reset();
}
Status Variable::SetGrad(DTensor grad) {
  if (node_ == nullptr || node_->result() || !node_->requires_grad) {
    return InvalidArgumentError("SetGrad: not a leaf that requires a gradient");
  }
  if (grad.global_shape() != node_->value.global_shape() || !(grad.layout().mesh() == node_->value.layout().mesh())) {
    return InvalidArgumentError("SetGrad: a gradient of shape " + ShapeString(grad.global_shape()) + " on " +
                                grad.layout().mesh().ToString() + " for a value of shape " +
                                ShapeString(node_->value.global_shape()) + " on " +
                                node_->value.layout().mesh().ToString());
  }
  node_->grad = std::move(grad);
  return Status::Ok();
}

std::optional<DTensor> Variable::TakeGrad() {
  if (node_ == nullptr || node_->result()) return std::nullopt;
  return std::exchange(node_->grad, std::nullopt);
}

Status Variable::AddGradReadyHook(std::function<Status()> hook) {
  if (node_ == nullptr || node_->result() || !node_->requires_grad) {
    return InvalidArgumentError("AddGradReadyHook: not a leaf that requires a gradient");
  }
  if (!hook) return InvalidArgumentError("AddGradReadyHook: an empty hook");
  node_->grad_ready_hooks.push_back(std::move(hook));
  return Status::Ok();
}

Status Variable::AddPreBackwardHook(std::function<Status()> hook) {
  if (node_ == nullptr || !node_->result()) {
    return InvalidArgumentError("AddPreBackwardHook: not the result of a recorded op");
  }
  if (!hook) return InvalidArgumentError("AddPreBackwardHook: an empty hook");
  node_->pre_backward_hooks.push_back(std::move(hook));
  return Status::Ok();
}

void Variable::ClearHooks() {
  if (node_ == nullptr) return;
  node_->grad_ready_hooks.clear();
  node_->pre_backward_hooks.clear();
}

Status Variable::ReleaseValue(std::function<StatusOr<DTensor>()> rematerialize) {
  if (node_ == nullptr || !node_->result()) return FailedPreconditionError("ReleaseValue of a leaf");
  if (node_->value_released) return FailedPreconditionError("ReleaseValue of a released value");
  if (!rematerialize) return InvalidArgumentError("ReleaseValue: an empty rematerialize function");
  node_->rematerialize = std::move(rematerialize);
  node_->value.mutable_local() = Tensor();  // frees the storage (the layout stays)
  node_->value_released = true;
  return Status::Ok();
}

bool Variable::value_released() const { return node_ != nullptr && node_->value_released; }

const std::optional<OpSpec>& Variable::op() const {
  static const std::optional<OpSpec> kNone;
  return node_ == nullptr ? kNone : node_->op;
}

StatusOr<Variable> Apply(const OpSpec& op, std::span<const Variable> inputs, RankContext& ctx) {
  std::vector<const DTensor*> values;
  bool needs = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      return InvalidArgumentError(op.ToString() + ": input " + std::to_string(i) + " is an undefined Variable");
    }
    values.push_back(&inputs[i].value());
    needs = needs || inputs[i].requires_grad();
  }
  MF_ASSIGN_OR_RETURN(DTensor out, RunOp(op, values, ctx));
  Variable v;
  v.node_ = std::make_shared<Variable::Node>(std::move(out));
  if (needs && IsDifferentiable(op) && IsFloat(v.node_->value.dtype())) {
    v.node_->requires_grad = true;
    v.node_->op = op;
    v.node_->inputs.assign(inputs.begin(), inputs.end());
  }
  return v;
}

StatusOr<Variable> RedistributeVariable(const Variable& x, const Layout& target, RankContext& ctx) {
  if (!x.defined()) return InvalidArgumentError("Redistribute of an undefined Variable");
  const DTensor& xv = x.value();
  std::optional<DTensor> out;
  if (std::optional<StatusOr<DTensor>> pre = ctx.prefetches().Take(xv, target)) {
    if (!pre->ok()) return pre->status();
    out = std::move(**pre);
  } else {
    MF_ASSIGN_OR_RETURN(DTensor r, Redistribute(xv, target, ctx));
    out = std::move(r);
  }
  Variable v;
  v.node_ = std::make_shared<Variable::Node>(std::move(*out));
  if (x.requires_grad()) {
    v.node_->requires_grad = true;
    v.node_->redistribution = true;
    v.node_->inputs = {x};
  }
  return v;
}

// Backward's pieces. A friend of Variable: reaches the graph's nodes.
struct BackwardAccess {
  using Node = Variable::Node;
  static Node* NodeOf(const Variable& v) { return v.node_.get(); }
};

namespace {

using Node = BackwardAccess::Node;

// The gradient Backward starts from: options.seed (same shape and dtype as the loss), else 1 for
// a scalar loss.
StatusOr<DTensor> BackwardSeed(const DTensor& lv, const BackwardOptions& options) {
  if (options.seed != nullptr) {
    if (options.seed->global_shape() != lv.global_shape() || options.seed->dtype() != lv.dtype()) {
      return InvalidArgumentError("Backward seed " + ShapeString(options.seed->global_shape()) + " " +
                                  std::string(DTypeName(options.seed->dtype())) + " differs from the loss " +
                                  ShapeString(lv.global_shape()) + " " + std::string(DTypeName(lv.dtype())));
    }
    return *options.seed;
  }
  if (!lv.global_shape().empty()) {
    return InvalidArgumentError("Backward of a non-scalar loss of shape " + ShapeString(lv.global_shape()) +
                                " needs a seed (BackwardOptions::seed)");
  }
  return ScalarLike(lv, 1.0);
}

// Topological order, inputs first (iterative DFS, post-order), over the nodes from `root` that
// require a gradient. Refuses a graph an earlier Backward released.
StatusOr<std::vector<Node*>> PostOrder(Node* root) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack = {{root, 0}};
  seen.insert(root);
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (n->released) {
      return FailedPreconditionError(
          "Backward through a graph an earlier Backward released (op " +
          (n->op ? n->op->ToString() : n->redistribution ? "redistribute" : "leaf") +
          "); pass BackwardOptions::retain_graph to run Backward twice");
    }
    if (next < n->inputs.size()) {
      Node* in = BackwardAccess::NodeOf(n->inputs[next++]);
      if (in->requires_grad && seen.insert(in).second) stack.push_back({in, 0});
      continue;
    }
    order.push_back(n);
    stack.pop_back();
  }
  return order;
}

// The reverse sweep of one Backward over `order` (PostOrder): the pending gradient of each node,
// the VJPs, the leaves' accumulated grads and hooks, and the released values (ReleaseValue) that
// come back right before a VJP needs them and go again after the last VJP that reads them.
class BackwardSweep {
 public:
  BackwardSweep(const std::vector<Node*>& order, RankContext& ctx) : order_(order), ctx_(ctx) {
    // The readers of each value: the consumers in `order`, the node itself when its VJP reads its output.
    for (Node* n : order_) {
      if (!n->result()) continue;
      for (const Variable& v : n->inputs) ++readers_[BackwardAccess::NodeOf(v)];
      ++readers_[n];
    }
  }

  Status Run(Node* root, DTensor seed) {
    grads_.emplace(root, std::move(seed));
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      Node* n = *it;
      auto g = grads_.find(n);
      if (g == grads_.end()) continue;  // no path carried a gradient here (e.g. step's zero)
      MF_RETURN_IF_ERROR(n->result() ? Propagate(n, g) : Accumulate(n, g));
    }
    return Status::Ok();
  }

 private:
  using Pending = std::unordered_map<Node*, DTensor>::iterator;

  // A leaf: its grad (+)= the pending gradient g (then dropped), now final; runs its grad-ready hooks.
  Status Accumulate(Node* n, Pending g) {
    if (n->grad) {
      MF_ASSIGN_OR_RETURN(DTensor sum, Add(*n->grad, g->second, ctx_));
      n->grad = std::move(sum);
    } else {
      n->grad = std::move(g->second);
    }
    grads_.erase(g);
    for (const auto& hook : n->grad_ready_hooks) MF_RETURN_IF_ERROR(hook());
    return Status::Ok();
  }

  // An op result (or redistribution): the VJP of the pending gradient g (then dropped), added to
  // its inputs' pending gradients.
  Status Propagate(Node* n, Pending g) {
    for (const auto& hook : n->pre_backward_hooks) MF_RETURN_IF_ERROR(hook());
    std::vector<std::optional<DTensor>> gin;
    if (n->redistribution) {
      gin.push_back(std::move(g->second));  // the same global values, in the gradient's layout
    } else {
      std::vector<const DTensor*> in;
      for (const Variable& v : n->inputs) {
        MF_RETURN_IF_ERROR(Materialize(BackwardAccess::NodeOf(v)));
        in.push_back(&BackwardAccess::NodeOf(v)->value);
      }
      MF_RETURN_IF_ERROR(Materialize(n));
      MF_ASSIGN_OR_RETURN(gin, Vjp(*n->op, in, n->value, g->second, ctx_));
    }
    grads_.erase(g);
    for (const Variable& v : n->inputs) DoneReading(BackwardAccess::NodeOf(v));
    DoneReading(n);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Node* m = BackwardAccess::NodeOf(n->inputs[i]);
      if (!m->requires_grad || !gin[i]) continue;
      auto [slot, fresh] = grads_.try_emplace(m, *gin[i]);
      if (!fresh) {
        MF_ASSIGN_OR_RETURN(DTensor sum, Add(slot->second, *gin[i], ctx_));
        slot->second = std::move(sum);
      }
    }
    return Status::Ok();
  }

  static Status Materialize(Node* m) {
    if (!m->value_released) return Status::Ok();
    MF_ASSIGN_OR_RETURN(DTensor v, m->rematerialize());
    m->value = std::move(v);
    m->value_released = false;
    return Status::Ok();
  }

  void DoneReading(Node* m) {
    if (--readers_[m] == 0 && m->rematerialize && !m->value_released) {
      m->value.mutable_local() = Tensor();
      m->value_released = true;
    }
  }

  const std::vector<Node*>& order_;
  RankContext& ctx_;
  std::unordered_map<Node*, int> readers_;
  std::unordered_map<Node*, DTensor> grads_;  // pending: not yet propagated
};

}  // namespace

Status Backward(const Variable& loss, RankContext& ctx, const BackwardOptions& options) {
  if (!loss.defined()) return InvalidArgumentError("Backward of an undefined Variable");
  MF_ASSIGN_OR_RETURN(DTensor seed, BackwardSeed(loss.value(), options));
  if (!loss.requires_grad()) return Status::Ok();
  Node* root = BackwardAccess::NodeOf(loss);
  MF_ASSIGN_OR_RETURN(const std::vector<Node*> order, PostOrder(root));
  MF_RETURN_IF_ERROR(BackwardSweep(order, ctx).Run(root, std::move(seed)));
  if (!options.retain_graph) {
    for (Node* n : order) {
      if (n->result()) {
        n->inputs.clear();
        n->pre_backward_hooks.clear();
        n->released = true;
      }
    }
  }
  return Status::Ok();
}

}  // namespace meshflow
