#include "planner/plan_cache.h"

#include <utility>

#include "planner/search.h"

namespace meshflow {
namespace {

void AppendInts(std::string& out, const auto& v) {
  out += "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  out += "]";
}

void AppendLayout(std::string& out, const Layout& l) {
  out += "shape=";
  AppendInts(out, l.global_shape());
  out += ";mesh=";
  AppendInts(out, l.mesh().shape());
  out += ";ranks=";
  AppendInts(out, l.mesh().ranks());
  out += ";names=[";
  for (const std::string& n : l.mesh().names()) out += n + ",";
  out += "];placements=" + ToString(std::span<const Placement>(l.placements())) + ";order=";
  for (const std::vector<int>& o : l.shard_order()) AppendInts(out, o);
}

}  // namespace

std::string PlanCache::Key(const Layout& from, const Layout& to, DType dtype, const Topology& topo) {
  std::string key = "from{";
  AppendLayout(key, from);
  key += "}to{";
  AppendLayout(key, to);
  key += "}dtype=" + std::string(DTypeName(dtype)) + ";topo{" + topo.ToString() + "}";
  return key;
}

StatusOr<std::shared_ptr<const Plan>> PlanCache::GetOrPlan(const Layout& from, const Layout& to, DType dtype,
                                                           const Topology& topo) {
  const std::string key = Key(from, to, dtype, topo);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
  }
  MF_ASSIGN_OR_RETURN(Plan plan, PlanRedistribution(from, to, dtype, topo));
  auto value = std::make_shared<const Plan>(std::move(plan));
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = plans_.emplace(key, std::move(value));
  return it->second;
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
