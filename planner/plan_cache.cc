#include "meshflow/planner/plan_cache.h"

#include <functional>
#include <utility>

#include "meshflow/planner/search.h"

namespace meshflow {
uint64_t PlanCache::KeyHash(const Layout& from, const Layout& to, DType dtype, const Topology& topo,
                            const SearchBudget& budget) {
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
  HashMix(h, static_cast<uint64_t>(budget.max_edges));
  HashMix(h, std::hash<double>()(budget.max_ms));
  return h;
}

const PlanCache::Entry* PlanCache::FindLocked(uint64_t hash, const Layout& from, const Layout& to, DType dtype,
                                              const Topology& topo, const SearchBudget& budget) const {
  auto [begin, end] = plans_.equal_range(hash);
  for (auto it = begin; it != end; ++it) {
    const Entry& e = it->second;
    if (e.plan->dtype == dtype && e.plan->from == from && e.plan->to == to && e.topo == topo && e.budget == budget) {
      return &e;
    }
  }
  return nullptr;
}

std::shared_ptr<PlanCache::InFlight> PlanCache::FindInFlightLocked(uint64_t hash, const Layout& from,
                                                                   const Layout& to, DType dtype,
                                                                   const Topology& topo,
                                                                   const SearchBudget& budget) const {
  auto [begin, end] = in_flight_.equal_range(hash);
  for (auto it = begin; it != end; ++it) {
    const InFlight& f = *it->second;
    if (f.dtype == dtype && f.from == from && f.to == to && f.topo == topo && f.budget == budget) return it->second;
  }
  return nullptr;
}

StatusOr<std::shared_ptr<const Plan>> PlanCache::GetOrPlan(const Layout& from, const Layout& to, DType dtype,
                                                           const Topology& topo, const SearchBudget& budget) {
  const uint64_t hash = KeyHash(from, to, dtype, topo, budget);
  std::shared_ptr<InFlight> mine;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (const Entry* e = FindLocked(hash, from, to, dtype, topo, budget)) {
      ++hits_;
      return e->plan;
    }
    if (std::shared_ptr<InFlight> f = FindInFlightLocked(hash, from, to, dtype, topo, budget)) {
      // Another thread is planning this key: wait for its result (no busy wait; planning always
      // ends, with a plan or an error).
      ++hits_;
      ++shared_waits_;
      cv_.wait(lock, [&] { return f->result.has_value(); });
      return *f->result;
    }
    ++misses_;
    mine = std::make_shared<InFlight>(InFlight{from, to, dtype, topo, budget, std::nullopt});
    in_flight_.emplace(hash, mine);
  }
  StatusOr<Plan> planned = PlanRedistribution(from, to, dtype, topo, budget);
  StatusOr<std::shared_ptr<const Plan>> result =
      planned.ok() ? StatusOr<std::shared_ptr<const Plan>>(std::make_shared<const Plan>(std::move(planned).value()))
                   : StatusOr<std::shared_ptr<const Plan>>(planned.status());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result.ok()) {
      if (const Entry* e = FindLocked(hash, from, to, dtype, topo, budget)) {
        result = e->plan;  // stored meanwhile (a Clear() let a second planning start): keep one plan
      } else {
        plans_.emplace(hash, Entry{topo, budget, *result});
      }
    }
    mine->result = result;
    for (auto [it, end] = in_flight_.equal_range(hash); it != end; ++it) {
      if (it->second == mine) {
        in_flight_.erase(it);
        break;
      }
    }
  }
  cv_.notify_all();
  return result;
}

int64_t PlanCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t PlanCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

int64_t PlanCache::shared_waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_waits_;
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
  shared_waits_ = 0;
}

}  // namespace meshflow
