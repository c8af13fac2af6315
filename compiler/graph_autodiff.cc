#include "meshflow/compiler/graph_autodiff.h"

#include <map>
#include <optional>
#include <string>

namespace meshflow {
namespace {

class GraphBuilder : public GradBuilder {
 public:
  explicit GraphBuilder(Graph& g) : g_(g) {}
  StatusOr<int> Emit(const OpSpec& op, std::span<const int> operands) override {
    return g_.Apply(op, std::vector<ValueId>(operands.begin(), operands.end()));
  }
  std::vector<int64_t> Shape(int v) const override { return g_.value(v).shape; }

 private:
  Graph& g_;
};

Status CheckValue(const Graph& g, ValueId v, const char* what) {
  if (v < 0 || v >= static_cast<ValueId>(g.values().size())) {
    return InvalidArgumentError(std::string("backward: ") + what + " value id " + std::to_string(v) +
                                " is not a value of the graph (it has " + std::to_string(g.values().size()) + ")");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<ValueId>> AppendBackward(Graph& g, ValueId loss, std::span<const ValueId> wrt) {
  MF_RETURN_IF_ERROR(CheckValue(g, loss, "loss"));
  for (ValueId w : wrt) {
    MF_RETURN_IF_ERROR(CheckValue(g, w, "wrt"));
    if (!IsFloatDType(g.value(w).dtype)) {
      return InvalidArgumentError("backward: wrt value '" + g.value(w).name + "' is " + g.TypeString(w) +
                                  "; gradients need a float value");
    }
  }
  if (!g.value(loss).shape.empty() || !IsFloatDType(g.value(loss).dtype)) {
    return InvalidArgumentError("backward: loss '" + g.value(loss).name + "' is " + g.TypeString(loss) +
                                "; it must be a float scalar");
  }
  // Which values lie on a path from a wrt value to the loss (only those need gradients).
  const size_t num_forward_nodes = g.nodes().size();
  std::vector<bool> needs(g.values().size(), false);
  for (ValueId w : wrt) needs[static_cast<size_t>(w)] = true;
  for (size_t n = 0; n < num_forward_nodes; ++n) {
    const Node& node = g.nodes()[n];
    if (!IsDifferentiable(node.op) || !IsFloatDType(g.value(node.result).dtype)) continue;
    for (ValueId v : node.operands) {
      if (needs[static_cast<size_t>(v)]) needs[static_cast<size_t>(node.result)] = true;
    }
  }
  GraphBuilder b(g);
  std::map<ValueId, ValueId> grads;
  if (needs[static_cast<size_t>(loss)]) {
    MF_ASSIGN_OR_RETURN(ValueId seed, g.Apply(OpSpec::Unary(UnaryOp::kFill, 1.0), {loss}, ""));
    grads[loss] = seed;
  }
  for (size_t n = num_forward_nodes; n-- > 0;) {
    const Node node = g.nodes()[n];  // a copy: Apply below grows nodes()
    auto it = grads.find(node.result);
    if (it == grads.end()) continue;
    const std::string where = "backward of node " + std::to_string(n) + " '" + g.value(node.result).name + "' (" +
                              node.op.ToString() + ")";
    StatusOr<std::vector<std::optional<int>>> gin = Vjp(node.op, b, node.operands, node.result, it->second);
    if (!gin.ok()) return gin.status().WithContext(where);
    for (size_t i = 0; i < node.operands.size(); ++i) {
      const ValueId v = node.operands[i];
      if (!(*gin)[i] || !needs[static_cast<size_t>(v)]) continue;
      auto [slot, fresh] = grads.try_emplace(v, *(*gin)[i]);
      if (!fresh) {
        StatusOr<ValueId> sum = g.Apply(OpSpec::Binary(BinaryOp::kAdd), {slot->second, *(*gin)[i]});
        if (!sum.ok()) return sum.status().WithContext(where);
        slot->second = *sum;
      }
    }
  }
  std::vector<ValueId> out;
  for (ValueId w : wrt) {
    auto it = grads.find(w);
    const std::string name = "d_" + g.value(w).name;
    // A named copy (scale 1) so that the gradient has a findable name; zeros when unreached.
    const OpSpec op = it == grads.end() ? OpSpec::Unary(UnaryOp::kFill, 0.0) : OpSpec::Unary(UnaryOp::kScale, 1.0);
    MF_ASSIGN_OR_RETURN(ValueId d, g.Apply(op, {it == grads.end() ? w : it->second}, name));
    out.push_back(d);
  }
  return out;
}

}  // namespace meshflow
