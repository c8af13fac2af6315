// Exact global-norm gradient clipping over sharded, replicated and Partial gradients.
//
//   std::vector<DTensor*> grads = {&gw, &gb};
//   MF_ASSIGN_OR_RETURN(double norm, ClipGradNorm(grads, /*max_norm=*/1.0, ctx));
#ifndef MESHFLOW_OPTIM_CLIP_H_
#define MESHFLOW_OPTIM_CLIP_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <span>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/runtime/rank_context.h"

namespace meshflow {

// Collective: clips gradients by their global norm, torch.nn.utils.clip_grad_norm_ semantics
// (norm_type 2, error_if_nonfinite=False):
//   total = sqrt(sum over grads of sum of squares of the FULL gradient)
//   coef = max_norm / (total + 1e-6); if coef < 1, every gradient's local values are multiplied by
//   coef (in place; a Partial(sum) gradient is scaled by scaling every rank's part).
// Returns total (before clipping), the same double on every rank. The norm is exact over layouts:
// a Partial gradient counts as its reduced value (it is redistributed, Partial -> Replicate, into
// a temporary, by Redistribute), and an element replicated over mesh dims counts once (only the
// rank at group coordinate 0 of each Replicate mesh dim adds it). Squares are summed in double,
// per rank then across ranks with a Partial(sum) scalar gathered by FullTensor (rank order, so
// every rank gets the same bits). A non-finite total leaves the gradients unchanged (coef is not
// < 1) and is returned as is. Errors: a null gradient, an integer gradient, a gradient on another
// mesh than `ctx`, max_norm negative or NaN (INVALID_ARGUMENT; nothing is scaled).
StatusOr<double> ClipGradNorm(std::span<DTensor* const> grads, double max_norm, RankContext& ctx);

// Collective: the global norm alone (ClipGradNorm without the scaling).
StatusOr<double> GlobalGradNorm(std::span<const DTensor* const> grads, RankContext& ctx);

// max_norm's check (ClipGradNorm's and StepOptions::max_grad_norm's): INVALID_ARGUMENT for a
// negative or NaN max_norm.
Status CheckMaxGradNorm(double max_norm);

}  // namespace meshflow

#endif  // MESHFLOW_OPTIM_CLIP_H_
