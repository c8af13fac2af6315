#include "meshflow/autograd/variable.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "meshflow/autograd/vjp.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/ops/shape_util.h"

namespace meshflow {

struct Variable::Node {
  explicit Node(DTensor v) : value(std::move(v)) {}
  DTensor value;
  bool requires_grad = false;
  std::optional<OpSpec> op;       // nullopt: a leaf
  std::vector<Variable> inputs;   // op results: the op's operands (cleared when released)
  bool released = false;          // Backward ran through this node without retain_graph
  std::optional<DTensor> grad;    // leaves with requires_grad
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

const DTensor& Variable::value() const { return node_->value; }
DTensor* Variable::mutable_leaf_value() { return node_ != nullptr && !node_->op ? &node_->value : nullptr; }
bool Variable::requires_grad() const { return node_ != nullptr && node_->requires_grad; }
bool Variable::is_leaf() const { return node_ == nullptr || !node_->op.has_value(); }
const std::optional<DTensor>& Variable::grad() const {
  static const std::optional<DTensor> kNone;
  return node_ == nullptr ? kNone : node_->grad;
}
void Variable::ZeroGrad() {
  if (node_ != nullptr) node_->grad.reset();
}
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
          "Backward through a graph an earlier Backward released (op " + (n->op ? n->op->ToString() : "leaf") +
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

  std::unordered_map<Node*, DTensor> grads;
  grads.emplace(BackwardAccess::NodeOf(loss), std::move(*seed));
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    auto g = grads.find(n);
    if (g == grads.end()) continue;  // no path carried a gradient here (e.g. step's zero)
    if (!n->op) {
      if (n->grad) {
        MF_ASSIGN_OR_RETURN(DTensor sum, Add(*n->grad, g->second, ctx));
        n->grad = std::move(sum);
      } else {
        n->grad = std::move(g->second);
      }
      grads.erase(g);
      continue;
    }
    std::vector<const DTensor*> in;
    for (const Variable& v : n->inputs) in.push_back(&v.value());
    StatusOr<std::vector<std::optional<DTensor>>> gin = Vjp(*n->op, in, n->value, g->second, ctx);
    if (!gin.ok()) return gin.status();
    grads.erase(g);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Node* m = BackwardAccess::NodeOf(n->inputs[i]);
      if (!m->requires_grad || !(*gin)[i]) continue;
      auto [slot, fresh] = grads.try_emplace(m, *(*gin)[i]);
      if (!fresh) {
        MF_ASSIGN_OR_RETURN(DTensor sum, Add(slot->second, *(*gin)[i], ctx));
        slot->second = std::move(sum);
      }
    }
  }
  if (!options.retain_graph) {
    for (Node* n : order) {
      if (n->op) {
        n->inputs.clear();
        n->released = true;
      }
    }
  }
  return Status::Ok();
}

}  // namespace meshflow
