// Graph autodiff: appends the backward of a scalar loss to a Graph (compiler/graph.h).
//
// AppendBackward walks the graph's nodes in reverse from `loss` and appends, for each node on a
// path to the loss, its VJP (ops/op_spec.h Vjp) as ordinary nodes, summing gradients of values
// used more than once. The result is one graph holding the forward and the backward, so the
// propagation pass (compiler/propagation.h) chooses the layouts of activations and gradients jointly
// (as GSPMD partitions a whole training step), Compile inserts every collective of both, and
// ProgramToText prints them. The seed is fill(loss, 1); a `wrt` value the loss does not depend on
// gets fill(value, 0) (a zero gradient, never absent).
//
//   MF_ASSIGN_OR_RETURN(ValueId loss, g.Apply(OpSpec::Reduce(ReduceKind::kMean, {}, false), {y}, "loss"));
//   const ValueId params[] = {w1, w2};
//   MF_ASSIGN_OR_RETURN(std::vector<ValueId> grads, AppendBackward(g, loss, params));
//   for (ValueId d : grads) MF_RETURN_IF_ERROR(g.MarkOutput(d));
//   // Propagate / Compile / Execute the graph: outputs are the forward's and the gradients.
//
// Gradient values are named "d_<name>" for the `wrt` values (e.g. "d_w1"); intermediate ones get
// the graph's default names. Errors (INVALID_ARGUMENT unless noted): a bad value id, a loss that
// is not a float scalar, a `wrt` value that is not float; the VJPs' errors (UNIMPLEMENTED for
// matmul with a rank-1 operand, for double backward) and Graph::Apply's, naming the node.
#ifndef MESHFLOW_COMPILER_GRAPH_AUTODIFF_H_
#define MESHFLOW_COMPILER_GRAPH_AUTODIFF_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/compiler/graph.h"

namespace meshflow {

// The id of d loss / d wrt[i] for each i, appended to `graph`.
StatusOr<std::vector<ValueId>> AppendBackward(Graph& graph, ValueId loss, std::span<const ValueId> wrt);

}  // namespace meshflow

#endif  // MESHFLOW_COMPILER_GRAPH_AUTODIFF_H_
