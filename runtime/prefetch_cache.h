// PrefetchCache: redistributions started ahead of the op that needs them, handed to that op.
//
// FSDP gathers each block's sharded parameters right before the block computes; started one block
// ahead (PrefetchRedistribute, runtime/redistribute.h), the all-gather runs on the communication
// stream while the previous block computes. The eager dispatch (runtime/eager.h) asks the rank's
// cache before it redistributes an operand: an entry for (that operand, the layout the chosen
// strategy needs) is taken, waited for, and used instead of running the plan. It is the same plan,
// so the result has the same bits as without the prefetch.
//
// An entry is keyed by the source DTensor's address, its local buffer's address and the target
// layout, so it never serves another tensor or one whose storage was replaced; it serves one use.
// Entries nobody takes (the strategy wanted another layout) stay until Clear(), which waits for
// them and drops them: call it at the end of a step.
//
//   MF_RETURN_IF_ERROR(PrefetchRedistribute(w, w_full_layout, ctx));   // block i+1's weight
//   ...                                                                // block i computes
//   // Matmul(x, w, ctx) takes the prefetched all-gather instead of gathering w itself.
//   MF_RETURN_IF_ERROR(ctx.prefetches().Clear());
#ifndef MESHFLOW_RUNTIME_PREFETCH_CACHE_H_
#define MESHFLOW_RUNTIME_PREFETCH_CACHE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/runtime/pending.h"

namespace meshflow {

struct PrefetchStats {
  int64_t issued = 0;   // entries put
  int64_t hits = 0;     // entries taken by an op
  int64_t dropped = 0;  // entries cleared untaken
};

class PrefetchCache {
 public:
  // True when an entry for (x, target) is waiting.
  bool Contains(const DTensor& x, const Layout& target) const;
  // Adds a started redistribution of `x` to `target` (PrefetchRedistribute does this).
  void Put(const DTensor& x, const Layout& target, PendingTensor pending);
  // The entry for (x, target), removed, waited for (the compute stream waits) and wrapped in
  // `target`; nullopt when there is none.
  std::optional<StatusOr<DTensor>> Take(const DTensor& x, const Layout& target);
  // Waits for every entry and drops it. Returns the first error among them.
  Status Clear();

  size_t size() const { return entries_.size(); }
  const PrefetchStats& stats() const { return stats_; }

 private:
  struct Entry {
    const DTensor* source;
    const std::byte* storage;
    Layout target;
    int rank;
    PendingTensor pending;
  };
  std::vector<Entry> entries_;  // few at a time: one block's parameters
  PrefetchStats stats_;
};

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_PREFETCH_CACHE_H_
