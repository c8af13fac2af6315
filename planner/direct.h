// Direct transfers: the send/recv schedule of the direct-transfer plan.
//
// Source boxes of a layout are either identical (replicas along Replicate mesh dims) or
// disjoint, so the tensor is partitioned into distinct blocks, each held by a set of ranks. A
// destination rank r needs Intersect(block, to_box(r)) of every block it does not already hold;
// it receives it from exactly one holder: holders[r_index % holders.size()] (r_index = r's
// position in mesh().ranks()), which spreads the load over replicas. Every rank therefore
// receives exactly the elements of its target box not in its source box: the lower bound below
// when the target has no Partial dims.
//
// Only for Partial-free sources (a Partial source needs a reduction first).
#ifndef MESHFLOW_PLANNER_DIRECT_H_
#define MESHFLOW_PLANNER_DIRECT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/layout.h"

namespace meshflow {

struct Transfer {
  int src_rank = 0;  // world ranks
  int dst_rank = 0;
  Box box;  // global coordinates, never empty
  friend bool operator==(const Transfer&, const Transfer&) = default;
};

// All non-self transfers, ordered by (dst_rank, src_rank). Errors: layouts on different meshes
// or shapes; a Partial source.
StatusOr<std::vector<Transfer>> DirectTransfers(const Layout& from, const Layout& to);

// The transfers of DirectTransfers(from, to) in which world rank `rank` is the source or the
// destination, in the same order (DirectTransfers filtered to the rank): what one rank of a
// send_recv step sends and receives, found by arithmetic instead of over the world.
//
// Receives: per tensor dim, the source chunks overlapping the rank's target interval (the torch.chunk
// inverse, level by level down the shard order); their product is the source blocks that overlap
// the target box, each taken from the holder the replica rule picks. Sends: likewise the target
// chunks overlapping the rank's source box give the destination coordinates on the target's
// sharding mesh dims; the other mesh dims are enumerated keeping only destinations whose replica
// rule picks this rank (the innermost by solving the congruence). Cost: O(peers x (tensor rank +
// mesh ndim)) plus one IndexOf; with Replicate source dims and Replicate/Partial target dims, up to
// the outer free-dim combinations that pick another replica are visited too (never the world).
// Errors: those of DirectTransfers; `rank` not in the mesh.
StatusOr<std::vector<Transfer>> DirectTransfersOfRank(const Layout& from, const Layout& to, int rank);

// Pieces in flat form: one array of peers and one of coordinates, not a Box (two heap blocks)
// per piece, so that a rank exchanging with thousands of peers pays a few nanoseconds per piece.
// Piece i: the other rank's mesh index peers[i]; its global box has offsets
// coords[2*r*i .. 2*r*i + r) and extents coords[2*r*i + r .. 2*r*(i + 1)), r = tensor_rank.
struct PieceList {
  int tensor_rank = 0;
  std::vector<int> peers;
  std::vector<int64_t> coords;

  size_t size() const { return peers.size(); }
  std::span<const int64_t> offset(size_t i) const {
    return {coords.data() + 2 * static_cast<size_t>(tensor_rank) * i, static_cast<size_t>(tensor_rank)};
  }
  std::span<const int64_t> shape(size_t i) const {
    return {coords.data() + (2 * i + 1) * static_cast<size_t>(tensor_rank), static_cast<size_t>(tensor_rank)};
  }
  int64_t NumElements(size_t i) const;
  Box box(size_t i) const;
};

// What one rank sends and receives in a send_recv step.
struct RankPieces {
  PieceList sends;  // by destination mesh index
  PieceList recvs;  // by source world rank
};

// DirectTransfersOfRank in flat form (the executor's send_recv bookkeeping): the same pieces in the
// same order, sends and receives apart, peers as mesh indices. Cost: O(peers x tensor rank) after
// O(tensor rank x mesh ndim) per overlapping chunk; the pieces come out in order for the usual
// layouts, else they are put in order by a counting pass (O(peers + mesh size)) or, when that
// would cost more than the pieces, a sort. Errors: those of DirectTransfersOfRank.
//
//   const DeviceMesh mesh = *DeviceMesh::Create({4});
//   const Layout rows = *Layout::Create({8, 8}, mesh, {Shard{0}});
//   const Layout cols = *Layout::Create({8, 8}, mesh, {Shard{1}});
//   const RankPieces p = *DirectPiecesOfRank(rows, cols, 1);
//   // Rank 1 holds rows 2..3 and needs columns 2..3. p.recvs: 3 pieces from peers 0, 2, 3, the
//   // first p.recvs.box(0) == [0:2, 2:4]; p.sends: 3 pieces to peers 0, 2, 3, the first
//   // p.sends.box(0) == [2:4, 0:2].
StatusOr<RankPieces> DirectPiecesOfRank(const Layout& from, const Layout& to, int rank);

// Per rank r (mesh().ranks() order), for a Partial-free source:
//
//   G(r) = r's group over the target's Partial mesh dims ({r} when the target has none),
//   T    = r's target box (the same for every member of G(r): Partial dims do not cut boxes),
//   D    = |T| - |T ∩ (union over q in G(r) of from_box(q))|   (elements of T no member holds),
//   entry = ceil(D / |G(r)|).
//
// Why: a Partial(op) value may be split over G(r) in any way (any member may hold the identity,
// e.g. S(0) -> P(sum) keeps each shard in place with zeros elsewhere: D = 0, nothing moves), so
// no single member must receive anything in particular; but the members together must receive
// the D elements of T that none of them holds, so the busiest member receives >= ceil(D/|G|).
// Without Partial target dims (|G| = 1) the entry is exactly the elements of r's target box not
// in its source box, the least any plan can make r itself receive. With Partial target dims an
// entry bounds the busiest member of G(r), not each member; the max over ranks (the plan's
// lower_bound_bytes_per_rank, planner/plan.h) bounds the busiest rank of any plan.
// (Source boxes are identical or disjoint, so the union is the sum over distinct member boxes.)
std::vector<int64_t> LowerBoundElementsPerRank(const Layout& from, const Layout& to);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_DIRECT_H_
