#include "meshflow/runtime/prefetch_cache.h"

#include <utility>

namespace meshflow {

bool PrefetchCache::Contains(const DTensor& x, const Layout& target) const {
  for (const Entry& e : entries_) {
    if (e.source == &x && e.storage == x.local().raw() && e.target == target) return true;
  }
  return false;
}

void PrefetchCache::Put(const DTensor& x, const Layout& target, PendingTensor pending) {
  entries_.push_back(Entry{&x, x.local().raw(), target, x.rank(), std::move(pending)});
  ++stats_.issued;
}

std::optional<StatusOr<DTensor>> PrefetchCache::Take(const DTensor& x, const Layout& target) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.source != &x || e.storage != x.local().raw() || !(e.target == target)) continue;
    Entry taken = std::move(e);
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
    ++stats_.hits;
    StatusOr<Tensor> local = taken.pending.Wait();
    if (!local.ok()) return StatusOr<DTensor>(local.status());
    return DTensor::FromLocal(std::move(*local), taken.target, taken.rank);
  }
  return std::nullopt;
}

Status PrefetchCache::Clear() {
  Status first;
  for (Entry& e : entries_) {
    StatusOr<Tensor> t = e.pending.Wait();
    if (!t.ok() && first.ok()) first = t.status();
    ++stats_.dropped;
  }
  entries_.clear();
  return first;
}

}  // namespace meshflow
