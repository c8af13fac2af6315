// SendRecvCache: one rank's bookkeeping of send_recv plan steps, computed once per step.
//
// A send_recv step (planner/direct.h) needs, on each rank, the pieces it sends and receives, the
// peers, and where each piece lies in its buffers. The executor derives them once per distinct
// step with DirectPiecesOfRank (arithmetic over the rank's own peers, never the world) and
// keeps them here, so a repeated execution of the same plan does no bookkeeping at all.
//
// Why keyed on the step's layouts (from, to) and held by RankContext: the schedule is a pure
// function of (from, to, this rank), and a RankContext is one rank's. Layouts are values with an
// O(1) hash and a cheap operator== (layout.h), so the key is stable: unlike a Plan address it
// cannot alias a freed plan whose memory holds a new one, it needs no ownership of the plan
// (ExecutePlan takes a const Plan&), and equal steps of different plans share one entry.
// Bounded: at most kMaxEntries, the least recently used dropped first. Used by one thread at a
// time, like the communicators and the BufferPool.
#ifndef MESHFLOW_RUNTIME_SEND_RECV_CACHE_H_
#define MESHFLOW_RUNTIME_SEND_RECV_CACHE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/direct.h"

namespace meshflow {

// One rank's part of a send_recv step: its pieces in flat form (DirectPiecesOfRank: sends by
// destination, receives by source rank; a peer's mesh index is its position in the full-mesh
// group) and where each piece lies in the local buffers.
struct SendRecvSchedule {
  Box from_box, to_box;  // the rank's boxes before / after the step
  Box kept;              // Intersect(from_box, to_box): copied locally
  int64_t covered = 0;   // elements of to_box written: kept plus every received piece
  RankPieces pieces;
  // Per piece: its element offset in the source (send) / target (receive) local tensor when it is
  // one contiguous run of it, else -1 (packed via a temporary).
  std::vector<int64_t> send_offsets, recv_offsets;
};

class SendRecvCache {
 public:
  static constexpr size_t kMaxEntries = 32;

  // The schedule cached for the step from -> to, or null.
  const SendRecvSchedule* Find(const Layout& from, const Layout& to);
  // Caches `schedule` for from -> to (replacing an equal key) and returns it; it stays valid until
  // it is evicted (kMaxEntries later insertions of other keys) or Clear().
  const SendRecvSchedule& Insert(const Layout& from, const Layout& to, SendRecvSchedule schedule);
  void Clear() { entries_.clear(); }

  size_t size() const { return entries_.size(); }
  // Find calls that returned a schedule / returned null.
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  struct Entry {
    uint64_t hash;
    Layout from, to;
    std::unique_ptr<const SendRecvSchedule> schedule;
    uint64_t last_use;
  };
  Entry* Lookup(const Layout& from, const Layout& to, uint64_t hash);

  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_SEND_RECV_CACHE_H_
