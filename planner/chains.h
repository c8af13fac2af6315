// Planner-internal (target //planner:chains, visible to //planner only; no public header includes
// it): a layout's sharding as flat shard chains, the compact form the search's states and the
// step pricing (planner/collective_pricing.h, planner/send_recv_pricing.h) work on, and PerThread,
// the per-thread scratch buffers of that pricing.
#ifndef MESHFLOW_PLANNER_CHAINS_H_
#define MESHFLOW_PLANNER_CHAINS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <span>
#include <vector>

#include "meshflow/dtensor/layout.h"

namespace meshflow {

// A layout's sharding without the Layout (the search's compact states, see search.cc): the global
// shape, the mesh dim sizes, and the shard order as concatenated chains, tensor dim t's chain being
// dims[begin[t] .. begin[t+1]) (outermost first). Views only; nothing is allocated to build one.
struct ShardChains {
  std::span<const int64_t> shape;       // global shape, one per tensor dim
  std::span<const int64_t> mesh_shape;  // mesh dim sizes
  std::span<const int> dims;
  std::span<const int> begin;           // tensor rank + 1 offsets into dims
  int tensor_rank() const { return static_cast<int>(shape.size()); }
  std::span<const int> chain(int t) const { return dims.subspan(begin[t], begin[t + 1] - begin[t]); }
};

// A Layout's shard order as chains: Of() returns views into this object's `dims` / `begin` (valid
// until the next Of() or its destruction) and into the layout's shape and mesh.
struct FlatChains {
  std::vector<int> dims, begin;
  ShardChains Of(const Layout& l);
};

// MaxLocalElements (planner/cost_model.h) of the layout these chains describe: the box at mesh
// coordinate (0,...,0). O(dims).
int64_t MaxLocalElements(const ShardChains& chains);

// The two sides' MaxLocalElements of a step: all a collective's time depends on besides its
// kind, group and link. The search computes them once per state, not once per edge.
struct StepExtents {
  int64_t from = 0;
  int64_t to = 0;
};

// One T per thread, reused between calls (the pricing's scratch buffers: the search prices
// thousands of edges).
template <typename T>
T& PerThread() {
  thread_local T s;
  return s;
}

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_CHAINS_H_
