#include "meshflow/planner/chains.h"

#include "meshflow/dtensor/box.h"

namespace meshflow {

ShardChains FlatChains::Of(const Layout& l) {
  dims.clear();
  begin.assign(1, 0);
  for (const std::vector<int>& o : l.shard_order()) {
    dims.insert(dims.end(), o.begin(), o.end());
    begin.push_back(static_cast<int>(dims.size()));
  }
  return ShardChains{l.global_shape(), l.mesh().shape(), dims, begin};
}

int64_t MaxLocalElements(const ShardChains& l) {
  int64_t e = 1;
  for (int t = 0; t < l.tensor_rank(); ++t) {
    Interval iv{0, l.shape[t]};
    for (int m : l.chain(t)) iv = ChunkOf(iv, l.mesh_shape[m], 0);
    e *= iv.size();
  }
  return e;
}

}  // namespace meshflow
