#include "meshflow/planner/direct.h"

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <utility>

namespace meshflow {
namespace {

Status CheckDirect(const Layout& from, const Layout& to) {
  if (!(from.mesh() == to.mesh()) || from.global_shape() != to.global_shape()) {
    return InvalidArgumentError("direct transfer needs the same mesh and shape: " + from.ToString() + " vs " +
                                to.ToString());
  }
  if (from.HasPartial()) {
    return InvalidArgumentError("direct transfer cannot start from a Partial layout (" + from.PlacementsString() +
                                "); reduce first");
  }
  return Status();
}

// The non-empty intervals of one tensor dim's nested torch.chunk (one level per mesh dim of the
// shard order, outermost first) that overlap a target interval, each with the coordinates (one
// per level) that give it.
struct DimPieces {
  std::vector<Interval> intervals;
  std::vector<int64_t> coords;  // intervals.size() rows of order.size() coordinates
};

// The torch.chunk inverse, level by level: of the k parts of `iv` (chunk = ceil(|iv|/k), part i
// starts at iv.begin + i*chunk), those overlapping [lo, hi) are the parts holding lo and hi - 1
// and every part between them, all non-empty; recursing only into them visits at most
// (levels x overlapping leaves) intervals.
void CollectOverlapping(Interval iv, std::span<const int> order, size_t level, std::span<const int64_t> mesh_shape,
                        Interval target, std::vector<int64_t>& path, DimPieces& out) {
  const int64_t lo = std::max(iv.begin, target.begin);
  const int64_t hi = std::min(iv.end, target.end);
  if (lo >= hi) return;  // no overlap (or iv empty)
  if (level == order.size()) {
    out.intervals.push_back(iv);
    out.coords.insert(out.coords.end(), path.begin(), path.end());
    return;
  }
  const int64_t k = mesh_shape[order[level]];
  const int64_t chunk = (iv.size() + k - 1) / k;  // >= 1: iv is not empty
  const int64_t first = (lo - iv.begin) / chunk;
  const int64_t last = (hi - 1 - iv.begin) / chunk;  // < k: hi - 1 < iv.end <= iv.begin + k*chunk
  for (int64_t i = first; i <= last; ++i) {
    path[level] = i;
    CollectOverlapping(ChunkOf(iv, k, i), order, level + 1, mesh_shape, target, path, out);
  }
}

// Per tensor dim, the intervals of `layout` overlapping the non-empty box `target`.
std::vector<DimPieces> OverlappingPieces(const Layout& layout, const Box& target) {
  std::vector<DimPieces> out(static_cast<size_t>(layout.tensor_rank()));
  std::vector<int64_t> path;
  for (int t = 0; t < layout.tensor_rank(); ++t) {
    const std::vector<int>& order = layout.shard_order()[t];
    path.assign(order.size(), 0);
    CollectOverlapping(Interval{0, layout.global_shape()[t]}, order, 0, layout.mesh().shape(), target.dim(t), path,
                       out[t]);
  }
  return out;
}

// Calls f(choice) for every choice[t] in [0, pieces[t].intervals.size()), last dim fastest: the
// boxes of `layout` overlapping the target, in mesh-coordinate order of their sharding dims.
template <typename F>
void ForEachCombination(const std::vector<DimPieces>& pieces, F&& f) {
  for (const DimPieces& p : pieces) {
    if (p.intervals.empty()) return;
  }
  std::vector<size_t> choice(pieces.size(), 0);
  while (true) {
    f(choice);
    size_t t = pieces.size();
    while (true) {
      if (t == 0) return;
      --t;
      if (++choice[t] < pieces[t].intervals.size()) break;
      choice[t] = 0;
    }
  }
}

// Writes the coordinates of a combination on `layout`'s sharding mesh dims into `coord`, and its
// box into `box`.
void ApplyCombination(const Layout& layout, const std::vector<DimPieces>& pieces, const std::vector<size_t>& choice,
                      std::vector<int64_t>& coord, Box& box) {
  for (size_t t = 0; t < pieces.size(); ++t) {
    const std::vector<int>& order = layout.shard_order()[t];
    const int64_t* c = pieces[t].coords.data() + choice[t] * order.size();
    for (size_t l = 0; l < order.size(); ++l) coord[order[l]] = c[l];
    const Interval& iv = pieces[t].intervals[choice[t]];
    box.offset[t] = iv.begin;
    box.shape[t] = iv.size();
  }
}

// Intersect(a, b) written into `out` (already of a's rank), without allocating.
void IntersectInto(const Box& a, const Box& b, Box& out) {
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    out.offset[d] = lo;
    out.shape[d] = std::max<int64_t>(0, hi - lo);
  }
}

// Number of combinations ForEachCombination visits.
size_t CombinationCount(const std::vector<DimPieces>& pieces) {
  size_t n = 1;
  for (const DimPieces& p : pieces) n *= p.intervals.size();
  return n;
}

int64_t Gcd(int64_t a, int64_t b) {
  while (b != 0) {
    const int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

// x with a*x = 1 (mod m), 0 <= x < m. Precondition: m >= 1, gcd(a, m) == 1.
int64_t InverseMod(int64_t a, int64_t m) {
  int64_t r0 = a % m, r1 = m, s0 = 1, s1 = 0;
  while (r1 != 0) {
    const int64_t q = r0 / r1;
    const int64_t r2 = r0 - q * r1;
    r0 = r1;
    r1 = r2;
    const int64_t s2 = s0 - q * s1;
    s0 = s1;
    s1 = s2;
  }
  return ((s0 % m) + m) % m;
}

}  // namespace

StatusOr<std::vector<Transfer>> DirectTransfers(const Layout& from, const Layout& to) {
  MF_RETURN_IF_ERROR(CheckDirect(from, to));
  const std::vector<int>& ranks = from.mesh().ranks();
  const std::vector<Box> src = from.AllLocalBoxes();
  const std::vector<Box> dst = to.AllLocalBoxes();
  // Distinct source blocks and their holders (mesh index order).
  std::vector<Box> blocks;
  std::vector<std::vector<int>> holders;
  {
    std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, size_t> index;
    for (size_t i = 0; i < src.size(); ++i) {
      auto key = std::make_pair(src[i].offset, src[i].shape);
      auto [it, inserted] = index.emplace(key, blocks.size());
      if (inserted) {
        blocks.push_back(src[i]);
        holders.emplace_back();
      }
      holders[it->second].push_back(static_cast<int>(i));
    }
  }
  std::vector<Transfer> out;
  for (size_t r = 0; r < dst.size(); ++r) {
    std::vector<Transfer> mine;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (src[r] == blocks[b]) continue;  // already held
      Box piece = Intersect(blocks[b], dst[r]);
      if (piece.empty()) continue;
      const int holder = holders[b][r % holders[b].size()];
      mine.push_back(Transfer{ranks[holder], ranks[r], std::move(piece)});
    }
    std::sort(mine.begin(), mine.end(), [](const Transfer& a, const Transfer& b) { return a.src_rank < b.src_rank; });
    out.insert(out.end(), mine.begin(), mine.end());
  }
  return out;
}

StatusOr<std::vector<Transfer>> DirectTransfersOfRank(const Layout& from, const Layout& to, int rank) {
  MF_RETURN_IF_ERROR(CheckDirect(from, to));
  const DeviceMesh& mesh = from.mesh();
  MF_ASSIGN_OR_RETURN(const int me, mesh.IndexOf(rank));
  const std::vector<int>& ranks = mesh.ranks();
  const std::vector<int64_t>& mshape = mesh.shape();
  const int n = mesh.ndim();
  std::vector<int64_t> stride(static_cast<size_t>(n), 1);  // row-major: mesh index = sum coord*stride
  for (int d = n - 2; d >= 0; --d) stride[d] = stride[d + 1] * mshape[d + 1];
  std::vector<int64_t> my_coord(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) my_coord[d] = (me / stride[d]) % mshape[d];
  const Box from_box = from.LocalBoxAt(my_coord);
  const Box to_box = to.LocalBoxAt(my_coord);

  // The holders of a non-empty source block, in mesh order, are the ranks with its coordinates on
  // the source's sharding dims and every combination (row-major) of the replica dims (those sharding
  // no tensor dim; the source has no Partial dim): DirectTransfers' holders[b], of size `replicas`.
  std::vector<bool> shards_from(static_cast<size_t>(n), false), shards_to(static_cast<size_t>(n), false);
  for (const std::vector<int>& order : from.shard_order()) {
    for (int m : order) shards_from[m] = true;
  }
  for (const std::vector<int>& order : to.shard_order()) {
    for (int m : order) shards_to[m] = true;
  }
  std::vector<int> replica_dims, free_dims;  // free: mesh dims the target boxes do not depend on
  std::vector<int> block_dims;               // the source's sharding dims
  int64_t replicas = 1;
  for (int m = 0; m < n; ++m) {
    if (!shards_from[m]) {
      replica_dims.push_back(m);
      replicas *= mshape[m];
    } else {
      block_dims.push_back(m);
    }
    if (!shards_to[m]) free_dims.push_back(m);
  }
  // Non-empty source boxes at different coordinates on the sharding dims are disjoint: a rank at
  // `coord` holds the (non-empty) block of this rank iff it has this rank's block coordinates.
  auto holds_my_block = [&](const std::vector<int64_t>& coord) {
    for (int m : block_dims) {
      if (coord[m] != my_coord[m]) return false;
    }
    return !from_box.empty();
  };

  // Receives: every non-empty source block overlapping the target box, but the own one, from the
  // holder at replica position me % replicas.
  std::vector<Transfer> recvs;
  if (!to_box.empty()) {
    const std::vector<DimPieces> pieces = OverlappingPieces(from, to_box);
    std::vector<int64_t> holder(static_cast<size_t>(n), 0);
    int64_t j = me % replicas;
    for (size_t i = replica_dims.size(); i-- > 0;) {
      holder[replica_dims[i]] = j % mshape[replica_dims[i]];
      j /= mshape[replica_dims[i]];
    }
    Box block = to_box, piece = to_box;
    recvs.reserve(CombinationCount(pieces));
    ForEachCombination(pieces, [&](const std::vector<size_t>& choice) {
      ApplyCombination(from, pieces, choice, holder, block);
      if (holds_my_block(holder)) return;  // already held (the block is not empty)
      int64_t index = 0;
      for (int d = 0; d < n; ++d) index += holder[d] * stride[d];
      IntersectInto(block, to_box, piece);
      recvs.push_back(Transfer{ranks[index], rank, piece});
    });
    std::sort(recvs.begin(), recvs.end(), [](const Transfer& a, const Transfer& b) { return a.src_rank < b.src_rank; });
  }

  // Sends: every destination whose target box overlaps the source box, that does not hold this
  // block itself, and whose replica rule (its mesh index % replicas) picks this rank's replica
  // position.
  std::vector<std::pair<int64_t, Transfer>> sends;  // (destination mesh index, transfer)
  if (!from_box.empty()) {
    const std::vector<DimPieces> pieces = OverlappingPieces(to, from_box);
    int64_t my_replica = 0;
    for (int m : replica_dims) my_replica = my_replica * mshape[m] + my_coord[m];
    // The innermost free dim L is solved, not scanned: (partial + c*stride[L]) = my_replica
    // (mod replicas) holds for c = c0 + i*step, step = replicas / gcd(stride[L], replicas).
    const int last_free = free_dims.empty() ? -1 : free_dims.back();
    const int64_t a = last_free < 0 ? 0 : stride[last_free] % replicas;
    const int64_t g = Gcd(a, replicas);  // gcd(0, R) = R
    const int64_t step = replicas / g;
    const int64_t a_inv = InverseMod(a / g, step);
    std::vector<int64_t> dst(static_cast<size_t>(n), 0);
    Box target = from_box, piece = from_box;
    if (free_dims.empty()) sends.reserve(CombinationCount(pieces));
    auto visit = [&](int64_t index) {
      if (holds_my_block(dst)) return;  // the destination holds this block already
      sends.emplace_back(index, Transfer{rank, ranks[index], piece});
    };
    ForEachCombination(pieces, [&](const std::vector<size_t>& choice) {
      ApplyCombination(to, pieces, choice, dst, target);
      IntersectInto(from_box, target, piece);
      int64_t base = 0;
      for (int d = 0; d < n; ++d) {
        if (shards_to[d]) base += dst[d] * stride[d];
      }
      if (last_free < 0) {
        if (base % replicas == my_replica) visit(base);
        return;
      }
      // Odometer over the outer free dims.
      const size_t outer = free_dims.size() - 1;
      for (size_t i = 0; i < outer; ++i) dst[free_dims[i]] = 0;
      while (true) {
        int64_t partial = base;
        for (size_t i = 0; i < outer; ++i) partial += dst[free_dims[i]] * stride[free_dims[i]];
        const int64_t b = ((my_replica - partial) % replicas + replicas) % replicas;
        if (b % g == 0) {
          const int64_t c0 = (b / g) % step * a_inv % step;
          for (int64_t c = c0; c < mshape[last_free]; c += step) {
            dst[last_free] = c;
            visit(partial + c * stride[last_free]);
          }
        }
        size_t i = outer;
        while (true) {
          if (i == 0) return;
          --i;
          if (++dst[free_dims[i]] < mshape[free_dims[i]]) break;
          dst[free_dims[i]] = 0;
        }
      }
    });
    std::sort(sends.begin(), sends.end(),
              [](const std::pair<int64_t, Transfer>& x, const std::pair<int64_t, Transfer>& y) { return x.first < y.first; });
  }

  // DirectTransfers' order: by destination mesh index, this rank's receives at its own index.
  std::vector<Transfer> out;
  out.reserve(sends.size() + recvs.size());
  size_t s = 0;
  for (; s < sends.size() && sends[s].first < me; ++s) out.push_back(std::move(sends[s].second));
  for (Transfer& t : recvs) out.push_back(std::move(t));
  for (; s < sends.size(); ++s) out.push_back(std::move(sends[s].second));
  return out;
}

std::vector<int64_t> LowerBoundElementsPerRank(const Layout& from, const Layout& to) {
  const std::vector<Box> src = from.AllLocalBoxes();
  const std::vector<Box> dst = to.AllLocalBoxes();
  const DeviceMesh& mesh = from.mesh();
  std::vector<int> partial_dims;
  for (int m = 0; m < to.mesh().ndim(); ++m) {
    if (IsPartial(to.placement(m))) partial_dims.push_back(m);
  }
  std::vector<int64_t> out(src.size(), -1);
  for (size_t r = 0; r < src.size(); ++r) {
    if (out[r] >= 0) continue;  // filled with its group
    std::vector<size_t> group{r};
    if (!partial_dims.empty()) {
      group.clear();
      // ranks()[r] is in the mesh and partial_dims are valid mesh dims: Group cannot fail.
      const std::vector<int> members = mesh.Group(mesh.ranks()[r], partial_dims).value();
      for (int q : members) group.push_back(static_cast<size_t>(mesh.IndexOf(q).value()));
    }
    std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;
    int64_t held = 0;
    for (size_t q : group) {
      if (!seen.emplace(src[q].offset, src[q].shape).second) continue;
      held += Intersect(src[q], dst[r]).NumElements();
    }
    const int64_t missing = dst[r].NumElements() - held;
    const int64_t g = static_cast<int64_t>(group.size());
    for (size_t q : group) out[q] = (missing + g - 1) / g;
  }
  return out;
}

}  // namespace meshflow
