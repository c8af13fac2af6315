// PlanCache: a thread-safe memo of optimal plans (PlanRedistribution, search.h).
//
// Keyed on everything a plan depends on: the source and target layouts (global shape, mesh
// shape, ranks and names, placements, shard orders), the dtype, the topology and the search
// budget; the key is hashed (HashLayout) and confirmed with operator==, so a hit costs two layout
// hashes and compares, no allocation. Values are shared, immutable plans. Planning runs outside
// the lock, once per key: a caller that misses while the same key is being planned by another
// thread waits for that plan instead of searching too (the ranks of an in-process world all ask
// for the same plan at once; one of them searches). The waiter counts a hit and shared_waits().
// Errors are not cached (every waiter of a failed planning gets its error; the next call plans
// again).
//
// Example:
//   PlanCache cache;
//   MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, cache.GetOrPlan(from, to, DType::kF32, topo));
//   cache.hits();   // 0, then 1 after a second identical call
#ifndef MESHFLOW_PLANNER_PLAN_CACHE_H_
#define MESHFLOW_PLANNER_PLAN_CACHE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan.h"
#include "meshflow/planner/search.h"

namespace meshflow {

class PlanCache {
 public:
  PlanCache() = default;
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // The cached plan for the key, or plans, caches and returns it (waiting for the plan when the
  // same key is being planned by another thread). Errors: those of PlanRedistribution.
  StatusOr<std::shared_ptr<const Plan>> GetOrPlan(const Layout& from, const Layout& to, DType dtype,
                                                  const Topology& topo, const SearchBudget& budget = {});

  int64_t hits() const;
  int64_t misses() const;
  // Calls that found their key being planned and waited for it (counted in hits() too).
  int64_t shared_waits() const;
  size_t size() const;
  // Drops every entry and resets the counters (plans in flight still finish and are stored).
  void Clear();

  // The hash of a key (exposed for tests): equal keys hash equal.
  static uint64_t KeyHash(const Layout& from, const Layout& to, DType dtype, const Topology& topo,
                          const SearchBudget& budget = {});

 private:
  struct Entry {
    Topology topo;
    SearchBudget budget;
    std::shared_ptr<const Plan> plan;  // holds the key's from, to and dtype
  };
  // A key being planned; its waiters block on cv_ until `result` is set.
  struct InFlight {
    Layout from;
    Layout to;
    DType dtype;
    Topology topo;
    SearchBudget budget;
    std::optional<StatusOr<std::shared_ptr<const Plan>>> result;
  };
  // The entry for the key, or null. Requires mu_.
  const Entry* FindLocked(uint64_t hash, const Layout& from, const Layout& to, DType dtype, const Topology& topo,
                          const SearchBudget& budget) const;
  std::shared_ptr<InFlight> FindInFlightLocked(uint64_t hash, const Layout& from, const Layout& to, DType dtype,
                                               const Topology& topo, const SearchBudget& budget) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // signalled when an InFlight gets its result
  std::unordered_multimap<uint64_t, Entry> plans_;
  std::unordered_multimap<uint64_t, std::shared_ptr<InFlight>> in_flight_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
  int64_t shared_waits_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_PLAN_CACHE_H_
