// Vector-Jacobian products of the eager ops (runtime/eager.h) on DTensors: the ops' VJPs
// (ops/op_spec.h Vjp, ops/op_vjp.cc) with every emitted op run at once as an eager sharded op.
//
// Given an op's input values, its output value and the gradient of a loss w.r.t. that output
// (all DTensors on one mesh, any layouts), Vjp returns the gradient w.r.t. each input: nullopt
// where the input gets none (integer operands, comparisons, a zero derivative such as step's).
// Broadcast operands get their gradient summed back to their shape.
//
//   const DTensor* in[2] = {&x, &w};
//   MF_ASSIGN_OR_RETURN(std::vector<std::optional<DTensor>> g,
//                       Vjp(OpSpec::Matmul(), in, y, dy, ctx));  // g[0] = dy w^T, g[1] = x^T dy
//
// Errors: those of Vjp in ops/op_spec.h (UNIMPLEMENTED for matmul with a rank-1 operand and for
// double backward); errors of the eager ops.
#ifndef MESHFLOW_AUTOGRAD_VJP_H_
#define MESHFLOW_AUTOGRAD_VJP_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <optional>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/ops/op_spec.h"

namespace meshflow {

// Collective.
StatusOr<std::vector<std::optional<DTensor>>> Vjp(const OpSpec& op, std::span<const DTensor* const> inputs,
                                                  const DTensor& output, const DTensor& grad, RankContext& ctx);

// Collective: `x` summed over the dims it was broadcast along, to `shape` (numpy rules).
StatusOr<DTensor> SumTo(const DTensor& x, const std::vector<int64_t>& shape, RankContext& ctx);

// A Replicate DTensor of shape [] holding `value`, on `like`'s mesh and rank with its dtype.
StatusOr<DTensor> ScalarLike(const DTensor& like, double value);

}  // namespace meshflow

#endif  // MESHFLOW_AUTOGRAD_VJP_H_
