// Direct transfers: the send/recv schedule of the direct-transfer plan.
//
// Source boxes of a layout are either identical (replicas along Replicate mesh dims) or
// disjoint, so the tensor is partitioned into distinct blocks, each held by a set of ranks. A
// destination rank r needs Intersect(block, to_box(r)) of every block it does not already hold;
// it receives it from exactly one holder: holders[r_index % holders.size()] (r_index = r's
// position in mesh().ranks()), which spreads the load over replicas. Every rank therefore
// receives exactly its lower bound: the elements of its target box not in its source box.
//
// Only for Partial-free sources (a Partial source needs a reduction first).
#ifndef MESHFLOW_PLANNER_DIRECT_H_
#define MESHFLOW_PLANNER_DIRECT_H_

#include <cstdint>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/layout.h"

namespace meshflow {

struct Transfer {
  int src_rank = 0;  // world ranks
  int dst_rank = 0;
  Box box;  // global coordinates, never empty
  friend bool operator==(const Transfer&, const Transfer&) = default;
};

// All non-self transfers, ordered by (dst_rank, src_rank). Errors: layouts on different meshes
// or shapes; a Partial source.
StatusOr<std::vector<Transfer>> DirectTransfers(const Layout& from, const Layout& to);

// Per rank (mesh().ranks() order): elements of the target box not in the source box. This is the
// least any plan can make that rank receive, for Partial-free sources.
std::vector<int64_t> LowerBoundElementsPerRank(const Layout& from, const Layout& to);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_DIRECT_H_
