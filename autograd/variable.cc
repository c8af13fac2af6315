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

struct BackwardAccess {
  using Node = Variable::Node;
  static Node* NodeOf(const Variable& v) { return v.node_.get(); }
};

Status Backward(const Variable& loss, RankContext& ctx, const BackwardOptions& options) {
  using Node = BackwardAccess::Node;
  if (!loss.defined()) return InvalidArgumentError("Backward of an undefined Variable");
  const DTensor& lv = loss.value();
  std::optional<DTensor> seed;
  if (options.seed != nullptr) {
    if (options.seed->global_shape() != lv.global_shape() || options.seed->dtype() != lv.dtype()) {
      return InvalidArgumentError("Backward seed " + ShapeString(options.seed->global_shape()) + " " +
                                  std::string(DTypeName(options.seed->dtype())) + " differs from the loss " +
                                  ShapeString(lv.global_shape()) + " " + std::string(DTypeName(lv.dtype())));
    }
    seed = *options.seed;
  } else {
    if (!lv.global_shape().empty()) {
      return InvalidArgumentError("Backward of a non-scalar loss of shape " + ShapeString(lv.global_shape()) +
                                  " needs a seed (BackwardOptions::seed)");
    }
    MF_ASSIGN_OR_RETURN(DTensor one, ScalarLike(lv, 1.0));
    seed = std::move(one);
  }
  if (!loss.requires_grad()) return Status::Ok();

  // Reverse topological order (iterative DFS, post-order) over nodes that require a gradient.
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack = {{BackwardAccess::NodeOf(loss), 0}};
  seen.insert(stack.back().first);
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

  // Released values (ReleaseValue) come back right before a VJP needs them and go again after the
  // last VJP that reads them: count the readers (the consumers in `order`, the node itself when its
  // VJP reads its output).
  std::unordered_map<Node*, int> readers;
  for (Node* n : order) {
    if (!n->result()) continue;
    for (const Variable& v : n->inputs) ++readers[BackwardAccess::NodeOf(v)];
    ++readers[n];
  }
  auto materialize = [](Node* m) -> Status {
    if (!m->value_released) return Status::Ok();
    MF_ASSIGN_OR_RETURN(DTensor v, m->rematerialize());
    m->value = std::move(v);
    m->value_released = false;
    return Status::Ok();
  };
  auto done_reading = [&readers](Node* m) {
    if (--readers[m] == 0 && m->rematerialize && !m->value_released) {
      m->value.mutable_local() = Tensor();
      m->value_released = true;
    }
  };

  std::unordered_map<Node*, DTensor> grads;
  grads.emplace(BackwardAccess::NodeOf(loss), std::move(*seed));
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    auto g = grads.find(n);
    if (g == grads.end()) continue;  // no path carried a gradient here (e.g. step's zero)
    if (!n->result()) {
      if (n->grad) {
        MF_ASSIGN_OR_RETURN(DTensor sum, Add(*n->grad, g->second, ctx));
        n->grad = std::move(sum);
      } else {
        n->grad = std::move(g->second);
      }
      grads.erase(g);
      for (const auto& hook : n->grad_ready_hooks) MF_RETURN_IF_ERROR(hook());  // the leaf's grad is final
      continue;
    }
    for (const auto& hook : n->pre_backward_hooks) MF_RETURN_IF_ERROR(hook());
    std::vector<std::optional<DTensor>> gin;
    if (n->redistribution) {
      gin.push_back(std::move(g->second));  // the same global values, in the gradient's layout
    } else {
      std::vector<const DTensor*> in;
      for (const Variable& v : n->inputs) {
        MF_RETURN_IF_ERROR(materialize(BackwardAccess::NodeOf(v)));
        in.push_back(&BackwardAccess::NodeOf(v)->value);
      }
      MF_RETURN_IF_ERROR(materialize(n));
      MF_ASSIGN_OR_RETURN(gin, Vjp(*n->op, in, n->value, g->second, ctx));
    }
    grads.erase(g);
    for (const Variable& v : n->inputs) done_reading(BackwardAccess::NodeOf(v));
    done_reading(n);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Node* m = BackwardAccess::NodeOf(n->inputs[i]);
      if (!m->requires_grad || !gin[i]) continue;
      auto [slot, fresh] = grads.try_emplace(m, *gin[i]);
      if (!fresh) {
        MF_ASSIGN_OR_RETURN(DTensor sum, Add(slot->second, *gin[i], ctx));
        slot->second = std::move(sum);
      }
    }
  }
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
