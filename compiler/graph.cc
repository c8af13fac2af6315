#include "meshflow/compiler/graph.h"

#include <utility>

#include "meshflow/base/strings.h"

namespace meshflow {
namespace {

}  // namespace

std::string_view ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kInput: return "input";
    case ValueKind::kParam: return "param";
    case ValueKind::kOpResult: return "op";
  }
  return "?";
}

Status Graph::CheckId(ValueId v, std::string_view what) const {
  if (v < 0 || v >= static_cast<int>(values_.size())) {
    return InvalidArgumentError(std::string(what) + ": unknown value id " + std::to_string(v) + " (graph has " +
                                std::to_string(values_.size()) + " values)");
  }
  return Status::Ok();
}

Status Graph::CheckName(const std::string& name) const {
  if (name.empty()) return InvalidArgumentError("value name is empty");
  for (const Value& v : values_) {
    if (v.name == name) return InvalidArgumentError("duplicate value name '" + name + "'");
  }
  return Status::Ok();
}

StatusOr<ValueId> Graph::AddLeaf(std::string name, std::vector<int64_t> shape, DType dtype, ValueKind kind) {
  MF_RETURN_IF_ERROR(CheckName(name));
  for (int64_t s : shape) {
    if (s < 0) return InvalidArgumentError(std::string(ValueKindName(kind)) + " '" + name + "': negative size in shape " + ListString(shape));
  }
  const ValueId id = static_cast<ValueId>(values_.size());
  values_.push_back(Value{std::move(name), std::move(shape), dtype, kind, -1});
  annotations_.emplace_back();
  inputs_.push_back(id);
  return id;
}

StatusOr<ValueId> Graph::Input(std::string name, std::vector<int64_t> shape, DType dtype) {
  return AddLeaf(std::move(name), std::move(shape), dtype, ValueKind::kInput);
}

StatusOr<ValueId> Graph::Param(std::string name, std::vector<int64_t> shape, DType dtype) {
  return AddLeaf(std::move(name), std::move(shape), dtype, ValueKind::kParam);
}

StatusOr<ValueId> Graph::Apply(const OpSpec& op, std::vector<ValueId> operands, std::string name) {
  const ValueId id = static_cast<ValueId>(values_.size());
  if (name.empty()) name = "v" + std::to_string(id);
  const std::string where = "node " + std::to_string(nodes_.size()) + " '" + name + "' (" + op.ToString() + ")";
  for (ValueId v : operands) MF_RETURN_IF_ERROR(CheckId(v, where));
  MF_RETURN_IF_ERROR(CheckName(name).WithContext(where));
  std::string args;
  for (size_t i = 0; i < operands.size(); ++i) {
    args += (i ? ", " : "") + value(operands[i]).name + ": " + TypeString(operands[i]);
  }
  // Floating-point operands must agree; the result takes their dtype.
  std::optional<DType> float_type;
  for (ValueId v : operands) {
    const DType t = value(v).dtype;
    if (!IsFloatDType(t)) continue;
    if (float_type && *float_type != t) {
      return InvalidArgumentError(where + ": operand dtypes differ (" + args + ")");
    }
    float_type = t;
  }
  std::vector<const std::vector<int64_t>*> shapes;
  for (ValueId v : operands) shapes.push_back(&value(v).shape);
  StatusOr<ShardingRule> rule = RuleFor(op, shapes);
  if (!rule.ok()) return rule.status().WithContext(where + " on (" + args + ")");
  const DType dtype = float_type ? *float_type : operands.empty() ? DType::kF32 : value(operands[0]).dtype;
  values_.push_back(Value{std::move(name), rule->result_shape, dtype, ValueKind::kOpResult,
                          static_cast<int>(nodes_.size())});
  annotations_.emplace_back();
  nodes_.push_back(Node{op, std::move(operands), id});
  return id;
}

Status Graph::Annotate(ValueId v, const Layout& layout) {
  MF_RETURN_IF_ERROR(CheckId(v, "annotate"));
  const Value& val = value(v);
  if (!(layout.mesh() == mesh_)) {
    return InvalidArgumentError("annotation of '" + val.name + "': layout on " + layout.mesh().ToString() +
                                ", graph on " + mesh_.ToString());
  }
  if (layout.global_shape() != val.shape) {
    return InvalidArgumentError("annotation of '" + val.name + "': layout shape " + ListString(layout.global_shape()) +
                                " != value shape " + ListString(val.shape));
  }
  std::optional<Layout>& slot = annotations_[static_cast<size_t>(v)];
  if (slot && !(*slot == layout)) {
    return InvalidArgumentError("annotation of '" + val.name + "': already annotated " + slot->PlacementsString() +
                                ", now " + layout.PlacementsString());
  }
  slot = layout;
  return Status::Ok();
}

Status Graph::Annotate(ValueId v, Placements placements, ShardOrder order) {
  MF_RETURN_IF_ERROR(CheckId(v, "annotate"));
  StatusOr<Layout> layout = Layout::Create(value(v).shape, mesh_, std::move(placements), std::move(order));
  if (!layout.ok()) return layout.status().WithContext("annotation of '" + value(v).name + "' " + TypeString(v));
  return Annotate(v, *layout);
}

Status Graph::Annotate(ValueId v, std::string_view placements, std::string_view order) {
  MF_RETURN_IF_ERROR(CheckId(v, "annotate"));
  StatusOr<Placements> p = ParsePlacements(placements);
  if (!p.ok()) return p.status().WithContext("annotation of '" + value(v).name + "'");
  StatusOr<ShardOrder> o = ParseShardOrder(order);
  if (!o.ok()) return o.status().WithContext("annotation of '" + value(v).name + "'");
  return Annotate(v, std::move(*p), std::move(*o));
}

Status Graph::MarkOutput(ValueId v) {
  MF_RETURN_IF_ERROR(CheckId(v, "output"));
  for (ValueId o : outputs_) {
    if (o == v) return InvalidArgumentError("value '" + value(v).name + "' is already an output");
  }
  outputs_.push_back(v);
  return Status::Ok();
}

StatusOr<ValueId> Graph::Find(std::string_view name) const {
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].name == name) return static_cast<ValueId>(i);
  }
  return NotFoundError("no value named '" + std::string(name) + "'");
}

std::vector<std::vector<int>> Graph::Consumers() const {
  std::vector<std::vector<int>> out(values_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    for (ValueId v : nodes_[n].operands) {
      std::vector<int>& c = out[static_cast<size_t>(v)];
      if (c.empty() || c.back() != static_cast<int>(n)) c.push_back(static_cast<int>(n));
    }
  }
  return out;
}

std::vector<bool> Graph::DependedOnBy(std::span<const ValueId> roots) const {
  std::vector<bool> needed(values_.size(), false);
  for (ValueId v : roots) needed[static_cast<size_t>(v)] = true;
  // Nodes are in topological order: one reverse sweep reaches every ancestor.
  for (size_t n = nodes_.size(); n-- > 0;) {
    if (!needed[static_cast<size_t>(nodes_[n].result)]) continue;
    for (ValueId v : nodes_[n].operands) needed[static_cast<size_t>(v)] = true;
  }
  return needed;
}

std::string Graph::TypeString(ValueId v) const {
  return std::string(DTypeName(value(v).dtype)) + ListString(value(v).shape);
}

std::string Graph::ToString() const {
  std::string out = "graph on " + mesh_.ToString() + "\n";
  auto annot = [&](ValueId v) {
    const std::optional<Layout>& a = annotation(v);
    return a ? "  @ " + a->PlacementsString() : std::string();
  };
  for (ValueId v : inputs_) {
    out += "  " + std::string(ValueKindName(value(v).kind)) + " " + value(v).name + ": " + TypeString(v) + annot(v) + "\n";
  }
  for (const Node& n : nodes_) {
    std::string args;
    for (size_t i = 0; i < n.operands.size(); ++i) args += (i ? ", " : "") + value(n.operands[i]).name;
    out += "  " + value(n.result).name + ": " + TypeString(n.result) + " = " + n.op.ToString() + "(" + args + ")" +
           annot(n.result) + "\n";
  }
  out += "  outputs:";
  for (ValueId v : outputs_) out += " " + value(v).name;
  return out + "\n";
}

StatusOr<std::vector<Tensor>> EvaluateReference(const Graph& graph, const std::vector<Tensor>& inputs) {
  if (inputs.size() != graph.inputs().size()) {
    return InvalidArgumentError("reference: expected " + std::to_string(graph.inputs().size()) + " inputs, got " +
                                std::to_string(inputs.size()));
  }
  std::vector<std::optional<Tensor>> vals(graph.values().size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueId v = graph.inputs()[i];
    if (inputs[i].shape() != graph.value(v).shape || inputs[i].dtype() != graph.value(v).dtype) {
      return InvalidArgumentError("reference: input '" + graph.value(v).name + "' is " +
                                  std::string(DTypeName(inputs[i].dtype())) + ListString(inputs[i].shape()) +
                                  ", expected " + graph.TypeString(v));
    }
    vals[static_cast<size_t>(v)] = inputs[i];
  }
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const Node& node = graph.nodes()[n];
    std::vector<const Tensor*> args;
    for (ValueId v : node.operands) args.push_back(&*vals[static_cast<size_t>(v)]);
    StatusOr<Tensor> out = RunKernel(node.op, args);
    if (!out.ok()) {
      return out.status().WithContext("reference: node " + std::to_string(n) + " '" + graph.value(node.result).name +
                                      "' (" + node.op.ToString() + ")");
    }
    vals[static_cast<size_t>(node.result)] = std::move(*out);
  }
  std::vector<Tensor> result;
  result.reserve(vals.size());
  for (std::optional<Tensor>& t : vals) result.push_back(std::move(*t));
  return result;
}

}  // namespace meshflow
