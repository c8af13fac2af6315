#include "meshflow/runtime/send_recv_cache.h"

#include <algorithm>
#include <utility>

#include "meshflow/base/hash.h"

namespace meshflow {
namespace {

uint64_t KeyHash(const Layout& from, const Layout& to) {
  uint64_t h = HashLayout(from);
  HashMix(h, HashLayout(to));
  return h;
}

}  // namespace

SendRecvCache::Entry* SendRecvCache::Lookup(const Layout& from, const Layout& to, uint64_t hash) {
  for (Entry& e : entries_) {
    if (e.hash == hash && e.from == from && e.to == to) return &e;
  }
  return nullptr;
}

const SendRecvSchedule* SendRecvCache::Find(const Layout& from, const Layout& to) {
  Entry* e = Lookup(from, to, KeyHash(from, to));
  if (e == nullptr) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  e->last_use = ++clock_;
  return e->schedule.get();
}

const SendRecvSchedule& SendRecvCache::Insert(const Layout& from, const Layout& to, SendRecvSchedule schedule) {
  const uint64_t hash = KeyHash(from, to);
  auto owned = std::make_unique<const SendRecvSchedule>(std::move(schedule));
  if (Entry* e = Lookup(from, to, hash)) {
    e->schedule = std::move(owned);
    e->last_use = ++clock_;
    return *e->schedule;
  }
  if (entries_.size() >= kMaxEntries) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    entries_.erase(oldest);
  }
  entries_.push_back(Entry{hash, from, to, std::move(owned), ++clock_});
  return *entries_.back().schedule;
}

}  // namespace meshflow
