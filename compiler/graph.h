// Graph IR of the sharding compiler: values with global shapes, op nodes, inputs / params /
// outputs, and user layout annotations on a DeviceMesh.
//
// A Graph is a straight-line program over global tensors. Every value has an id (its index in
// values()), a unique name, a global shape and a dtype, and is either a graph input, a parameter
// (a graph input that holds weights; the distinction is for printing) or the result of exactly
// one node. Nodes are appended in topological order by construction: an op may only use values
// that already exist. The builder checks every op with the op's sharding rule (RuleFor in
// ops/op_spec.h), which also gives the result shape, so new op kinds work without changes here.
//
// Annotations pin a value's Layout on the graph's mesh (inputs, params, outputs or any
// intermediate value). The propagation pass (compiler/propagation.h) honours them exactly and infers
// every other value's layout.
//
//   MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({2, 2}, {"dp", "tp"}));
//   Graph g(mesh);
//   MF_ASSIGN_OR_RETURN(ValueId x, g.Input("x", {4, 6, 8}, DType::kF32));
//   MF_ASSIGN_OR_RETURN(ValueId w, g.Param("w1", {8, 10}, DType::kF32));
//   MF_ASSIGN_OR_RETURN(ValueId h, g.Apply(OpSpec::Matmul(), {x, w}, "h"));
//   MF_RETURN_IF_ERROR(g.Annotate(x, "S(0),R"));
//   MF_RETURN_IF_ERROR(g.Annotate(w, "R,S(1)"));
//   MF_RETURN_IF_ERROR(g.MarkOutput(h));
//
// Errors (INVALID_ARGUMENT, the message names the node / value): an unknown value id, an empty
// or duplicate name, a negative size, floating-point operands of different dtypes, the rule's
// shape errors (wrong operand count, shapes that do not match), an annotation that is not a
// valid Layout for the value (wrong placement count, shard dim out of range, ...), annotating a
// value twice with different layouts, marking a value as output twice.
#ifndef MESHFLOW_COMPILER_GRAPH_H_
#define MESHFLOW_COMPILER_GRAPH_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/ops/op_spec.h"

namespace meshflow {

using ValueId = int;

enum class ValueKind { kInput, kParam, kOpResult };
std::string_view ValueKindName(ValueKind kind);  // "input", "param", "op"

struct Value {
  std::string name;
  std::vector<int64_t> shape;  // global
  DType dtype = DType::kF32;
  ValueKind kind = ValueKind::kInput;
  int producer = -1;  // node index for kOpResult, else -1
  friend bool operator==(const Value&, const Value&) = default;
};

struct Node {
  OpSpec op;
  std::vector<ValueId> operands;
  ValueId result = -1;
  friend bool operator==(const Node&, const Node&) = default;
};

class Graph {
 public:
  explicit Graph(DeviceMesh mesh) : mesh_(std::move(mesh)) {}

  const DeviceMesh& mesh() const { return mesh_; }

  // A graph input / parameter. Errors: empty or duplicate name, negative size.
  StatusOr<ValueId> Input(std::string name, std::vector<int64_t> shape, DType dtype);
  StatusOr<ValueId> Param(std::string name, std::vector<int64_t> shape, DType dtype);

  // Appends `op` applied to `operands`; returns the result value. An empty name becomes
  // "v<id>". The result shape comes from the op's rule; its dtype is the dtype of the first
  // floating-point operand (else of the first operand). Errors: see the file comment.
  StatusOr<ValueId> Apply(const OpSpec& op, std::vector<ValueId> operands, std::string name = "");

  // Pins a value's layout. Errors: bad id, layout not on this mesh / not matching the shape,
  // a different annotation already present.
  Status Annotate(ValueId v, const Layout& layout);
  Status Annotate(ValueId v, Placements placements, ShardOrder order = {});
  // Parses "S(0),R" (and an optional shard order in ParseShardOrder syntax).
  Status Annotate(ValueId v, std::string_view placements, std::string_view order = "");

  // Marks a value as a graph output (outputs are returned in marking order). Errors: bad id,
  // already an output.
  Status MarkOutput(ValueId v);

  const std::vector<Value>& values() const { return values_; }
  const Value& value(ValueId v) const { return values_[static_cast<size_t>(v)]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // Inputs and params in declaration order (the order Execute takes them in).
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  const std::optional<Layout>& annotation(ValueId v) const { return annotations_[static_cast<size_t>(v)]; }
  // The id of the value named `name`. Errors: NOT_FOUND.
  StatusOr<ValueId> Find(std::string_view name) const;
  // The nodes consuming each value, in node order.
  std::vector<std::vector<int>> Consumers() const;
  // Per value: whether any of `roots` depends on it (the roots included). Precondition: valid ids.
  std::vector<bool> DependedOnBy(std::span<const ValueId> roots) const;

  // "f32[4,6,8]"
  std::string TypeString(ValueId v) const;
  // One line per input / node / output, with annotations.
  std::string ToString() const;

 private:
  Status CheckId(ValueId v, std::string_view what) const;
  StatusOr<ValueId> AddLeaf(std::string name, std::vector<int64_t> shape, DType dtype, ValueKind kind);
  Status CheckName(const std::string& name) const;

  DeviceMesh mesh_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::vector<std::optional<Layout>> annotations_;
};

// The single-rank reference: runs every node's kernel (RunKernel) on full tensors. `inputs` are the global tensors of graph.inputs(), in order.
// Returns every value's global tensor (index = ValueId). Errors: wrong count / shapes / dtypes
// of the inputs, kernel errors (naming the node).
StatusOr<std::vector<Tensor>> EvaluateReference(const Graph& graph, const std::vector<Tensor>& inputs);

}  // namespace meshflow

#endif  // MESHFLOW_COMPILER_GRAPH_H_
