// PlanCache: a thread-safe memo of optimal plans (PlanRedistribution, search.h).
//
// Keyed on everything a plan depends on: the source and target layouts (global shape, mesh
// shape, ranks and names, placements, shard orders), the dtype and the topology; the key is hashed
// (HashLayout) and confirmed with operator==, so a hit costs two layout hashes and compares, no
// allocation. Values are
// shared, immutable plans. Planning runs outside the lock; when two threads miss on the same key
// at once both plan, the first insertion wins and both get that plan (each counts a miss).
// Errors are not cached.
//
// Example:
//   PlanCache cache;
//   MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, cache.GetOrPlan(from, to, DType::kF32, topo));
//   cache.hits();   // 0, then 1 after a second identical call
#ifndef MESHFLOW_PLANNER_PLAN_CACHE_H_
#define MESHFLOW_PLANNER_PLAN_CACHE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

class PlanCache {
 public:
  PlanCache() = default;
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // The cached plan for the key, or plans, caches and returns it. Errors: those of
  // PlanRedistribution.
  StatusOr<std::shared_ptr<const Plan>> GetOrPlan(const Layout& from, const Layout& to, DType dtype,
                                                  const Topology& topo);

  int64_t hits() const;
  int64_t misses() const;
  size_t size() const;
  // Drops every entry and resets the counters.
  void Clear();

  // The hash of a key (exposed for tests): equal keys hash equal.
  static uint64_t KeyHash(const Layout& from, const Layout& to, DType dtype, const Topology& topo);

 private:
  struct Entry {
    Topology topo;
    std::shared_ptr<const Plan> plan;  // holds the key's from, to and dtype
  };
  // The entry for the key, or null. Requires mu_.
  const Entry* FindLocked(uint64_t hash, const Layout& from, const Layout& to, DType dtype,
                          const Topology& topo) const;

  mutable std::mutex mu_;
  std::unordered_multimap<uint64_t, Entry> plans_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_PLAN_CACHE_H_
