#include "meshflow/planner/plan_cache.h"

#include <functional>
#include <utility>

#include "meshflow/planner/search.h"

namespace meshflow {
uint64_t PlanCache::KeyHash(const Layout& from, const Layout& to, DType dtype, const Topology& topo) {
  uint64_t h = HashLayout(from);
  HashMix(h, HashLayout(to));
  HashMix(h, static_cast<uint64_t>(dtype));
  if (topo.intra_dims.has_value()) {
    HashMix(h, 0x1a7eu);
    for (int d : *topo.intra_dims) HashMix(h, static_cast<uint64_t>(d));
  }
  for (double v : {topo.bw_intra_gbps, topo.bw_inter_gbps, topo.lat_intra_us, topo.lat_inter_us}) {
    HashMix(h, std::hash<double>()(v));
  }
  return h;
}

const PlanCache::Entry* PlanCache::FindLocked(uint64_t hash, const Layout& from, const Layout& to, DType dtype,
                                              const Topology& topo) const {
  auto [begin, end] = plans_.equal_range(hash);
  for (auto it = begin; it != end; ++it) {
    const Entry& e = it->second;
    if (e.plan->dtype == dtype && e.plan->from == from && e.plan->to == to && e.topo == topo) return &e;
  }
  return nullptr;
}

StatusOr<std::shared_ptr<const Plan>> PlanCache::GetOrPlan(const Layout& from, const Layout& to, DType dtype,
                                                           const Topology& topo) {
  const uint64_t hash = KeyHash(from, to, dtype, topo);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const Entry* e = FindLocked(hash, from, to, dtype, topo)) {
      ++hits_;
      return e->plan;
    }
    ++misses_;
  }
  MF_ASSIGN_OR_RETURN(Plan plan, PlanRedistribution(from, to, dtype, topo));
  auto value = std::make_shared<const Plan>(std::move(plan));
  std::lock_guard<std::mutex> lock(mu_);
  if (const Entry* e = FindLocked(hash, from, to, dtype, topo)) return e->plan;  // another thread won
  plans_.emplace(hash, Entry{topo, value});
  return value;
}

int64_t PlanCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t PlanCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

size_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}

void PlanCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  plans_.clear();
  hits_ = 0;
  misses_ = 0;
}

}  // namespace meshflow
