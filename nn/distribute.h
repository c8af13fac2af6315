// Creating DTensors from global tensors, with the rank taken from the communicators.
//
// Distribute(global, layout, ctx): every rank holds `global` and keeps its part (no
// communication; dtensor/dtensor.h's Distribute with ctx.world_rank()).
//
// DistributeFrom(global, layout, src_rank, ctx): only world rank `src_rank` holds the global
// tensor (DTensor's src_data_rank); the others pass nullptr (what they pass is not read). It is a
// scatter over the group of all of the layout's mesh dims:
//   1. src broadcasts a 2-element i64 header (its check result and the dtype), so a bad tensor on
//      src (null, wrong shape) fails every rank with the same error instead of a hang;
//   2. fully replicated layouts: one Broadcast of the whole tensor (every rank receives
//      |global| bytes; src sends |global| to each of the others);
//      otherwise: src sends every other rank exactly its box (with dtensor/dtensor.h's
//      Replicate -> Partial rule, so Partial(sum) boxes off coordinate 0 are zeros; empty boxes
//      send nothing) with one grouped SendRecv. Each rank receives its local bytes once; src
//      sends the sum of the others' local bytes (|global| * (N - 1) / N for a fully sharded
//      layout on N ranks) and holds no copy beyond `global` and the outgoing boxes.
// The result equals Distribute(global, layout, rank) on every rank.
//
//   // mesh {2, 2} "dp", "tp"; only rank 0 loaded x.
//   const Tensor* x_or_null = ctx.world_rank() == 0 ? &x : nullptr;
//   MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({8, 6}, ctx.mesh(), {Shard{0}, Replicate{}}));
//   MF_ASSIGN_OR_RETURN(DTensor xd, nn::DistributeFrom(x_or_null, l, /*src_rank=*/0, ctx));
//
// Errors (INVALID_ARGUMENT, naming the value; on every rank): the layout on another mesh than the
// communicators', src_rank not a rank of the mesh, and (found on src, broadcast to all) a null
// global or one whose shape differs from the layout's. Communicator errors are returned as they are.
#ifndef MESHFLOW_NN_DISTRIBUTE_H_
#define MESHFLOW_NN_DISTRIBUTE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/tensor.h"

namespace meshflow::nn {

StatusOr<DTensor> Distribute(const Tensor& global, const Layout& layout, const RankContext& ctx);

// Collective over the layout's mesh. See the banner.
StatusOr<DTensor> DistributeFrom(const Tensor* global, const Layout& layout, int src_rank, RankContext& ctx);

}  // namespace meshflow::nn

#endif  // MESHFLOW_NN_DISTRIBUTE_H_
