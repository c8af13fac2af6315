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

int64_t PieceList::NumElements(size_t i) const {
  int64_t n = 1;
  for (int64_t e : shape(i)) n *= e;
  return n;
}

Box PieceList::box(size_t i) const {
  const std::span<const int64_t> o = offset(i), e = shape(i);
  return Box{std::vector<int64_t>(o.begin(), o.end()), std::vector<int64_t>(e.begin(), e.end())};
}

namespace {

// Per tensor dim, what every overlapping chunk of one layout contributes to a piece: its intersection with the rank's
// own box, its part of the other rank's mesh index (its coordinates on the chunk's shard order times the mesh strides),
// and whether those coordinates are this rank's on the given mesh dims.
struct DimTerms {
  size_t n = 0;  // chunks: the first n entries of each array (the arrays are reused storage)
  std::vector<Interval> inter;
  std::vector<int64_t> index;
  std::vector<char> same;

  void Add(Interval iv, int64_t i, bool s) {
    inter[n] = iv;
    index[n] = i;
    same[n] = s ? 1 : 0;
    ++n;
  }
};

// The non-empty chunks of one tensor dim's nested torch.chunk (one level per mesh dim of the shard order, outermost
// first) that overlap `target`, as terms (`index` and `same`: those of the levels above). The torch.chunk inverse,
// level by level: of the k parts of `iv` (chunk = ceil(|iv|/k), part i starts at iv.begin + i*chunk), those overlapping
// [lo, hi) are the parts holding lo and hi - 1 and every part between them, all non-empty; recursing only into them
// visits at most (levels x overlapping leaves) intervals.
void CollectTerms(Interval iv, std::span<const int> order, size_t level, std::span<const int64_t> mesh_shape,
                  Interval target, int64_t index, bool same, std::span<const int64_t> stride,
                  std::span<const int64_t> my_coord, const std::vector<bool>& compare, DimTerms& out) {
  const int64_t lo = std::max(iv.begin, target.begin);
  const int64_t hi = std::min(iv.end, target.end);
  if (lo >= hi) return;  // no overlap (or iv empty)
  if (level == order.size()) {
    out.Add(Interval{lo, hi}, index, same);
    return;
  }
  const int m = order[level];
  const int64_t k = mesh_shape[m];
  const int64_t chunk = (iv.size() + k - 1) / k;  // >= 1: iv is not empty
  const int64_t first = (lo - iv.begin) / chunk;
  const int64_t last = (hi - 1 - iv.begin) / chunk;  // < k: hi - 1 < iv.end <= iv.begin + k*chunk
  if (level + 1 == order.size()) {  // the leaves, without a call each: parts first..last overlap
    for (int64_t i = first; i <= last; ++i) {
      const int64_t b = iv.begin + i * chunk;
      out.Add(Interval{std::max(b, lo), std::min(b + chunk, hi)}, index + i * stride[m],
              same && (!compare[m] || i == my_coord[m]));
    }
    return;
  }
  for (int64_t i = first; i <= last; ++i) {
    CollectTerms(ChunkOf(iv, k, i), order, level + 1, mesh_shape, target, index + i * stride[m],
                 same && (!compare[m] || i == my_coord[m]), stride, my_coord, compare, out);
  }
}

// Per tensor dim, the terms of the chunks of `layout` overlapping the non-empty box `own`, into
// `out` (its vectors reused).
void TermsOf(const Layout& layout, const Box& own, std::span<const int64_t> stride, std::span<const int64_t> my_coord,
             const std::vector<bool>& compare, std::vector<DimTerms>& out) {
  out.resize(static_cast<size_t>(layout.tensor_rank()));
  for (int t = 0; t < layout.tensor_rank(); ++t) {
    DimTerms& d = out[static_cast<size_t>(t)];
    size_t most = 1;  // chunks of the dim's shard order: at most this many overlap
    for (int m : layout.shard_order()[t]) most *= static_cast<size_t>(layout.mesh().dim_size(m));
    if (d.inter.size() < most) {
      d.inter.resize(most);
      d.index.resize(most);
      d.same.resize(most);
    }
    d.n = 0;
    CollectTerms(Interval{0, layout.global_shape()[t]}, layout.shard_order()[t], 0, layout.mesh().shape(), own.dim(t),
                 0, true, stride, my_coord, compare, d);
  }
}

// The working storage of DirectPiecesOfRank, kept per thread between calls: a rank exchanging
// with the whole world allocates (and, once freed, faults in again) only its result.
struct PiecesScratch {
  std::vector<DimTerms> terms;
  std::vector<int64_t> row;
  std::vector<size_t> choice, order;
  std::vector<int> slot;
};

PiecesScratch& Scratch() {
  thread_local PiecesScratch s;
  return s;
}

// Number of combinations of one chunk per tensor dim (0 when a dim has none).
size_t CombinationCount(const std::vector<DimTerms>& terms) {
  size_t n = 1;
  for (const DimTerms& d : terms) n *= d.n;
  return n;
}

// Calls f(index, same, row) for every combination of one chunk per tensor dim: `index` and `same` summed / and-ed over
// the dims, `row` the piece's r offsets then r extents. The dim with the most chunks is the inner loop (the order of
// the calls is not the pieces' order: OrderByKey restores it), so a rank exchanging with the whole world pays a few
// stores per piece.
template <typename F>
void ForEachCombination(const std::vector<DimTerms>& terms, std::vector<int64_t>& row, F&& f) {
  const size_t r = terms.size();
  size_t inner = 0;
  for (size_t t = 0; t < r; ++t) {
    if (terms[t].n == 0) return;
    if (terms[t].n > terms[inner].n) inner = t;
  }
  row.assign(2 * r, 0);
  if (r == 0) {
    f(int64_t{0}, true, row.data());
    return;
  }
  std::vector<size_t>& choice = Scratch().choice;
  choice.assign(r, 0);
  const DimTerms& d = terms[inner];
  while (true) {
    int64_t index = 0;
    bool same = true;
    for (size_t t = 0; t < r; ++t) {
      if (t == inner) continue;
      index += terms[t].index[choice[t]];
      same = same && terms[t].same[choice[t]];
      row[t] = terms[t].inter[choice[t]].begin;
      row[r + t] = terms[t].inter[choice[t]].size();
    }
    for (size_t i = 0; i < d.n; ++i) {
      row[inner] = d.inter[i].begin;
      row[r + inner] = d.inter[i].size();
      f(index + d.index[i], same && d.same[i], row.data());
    }
    size_t t = r;
    while (true) {
      if (t == 0) return;
      --t;
      if (t == inner) continue;
      if (++choice[t] < terms[t].n) break;
      choice[t] = 0;
    }
  }
}

// Appends pieces (peer, row of r offsets and r extents) to a PieceList, the coordinates through a cursor into storage
// grown ahead (sized once when the count is known): a few stores per piece.
class PieceWriter {
 public:
  PieceWriter(PieceList& list, size_t expected) : list_(list), width_(2 * static_cast<size_t>(list.tensor_rank)) {
    list_.peers.reserve(expected);
    list_.coords.resize(expected * width_);
  }
  ~PieceWriter() { list_.coords.resize(used_); }
  PieceWriter(const PieceWriter&) = delete;
  PieceWriter& operator=(const PieceWriter&) = delete;

  void Push(int peer, const int64_t* row) {
    list_.peers.push_back(peer);
    if (used_ + width_ > list_.coords.size()) list_.coords.resize(std::max(used_ + width_, 2 * list_.coords.size()));
    int64_t* dst = list_.coords.data() + used_;
    // Fixed widths for the usual tensor ranks: a few register moves, not a memmove call.
    switch (width_) {
      case 2: Copy<2>(row, dst); break;
      case 4: Copy<4>(row, dst); break;
      case 6: Copy<6>(row, dst); break;
      case 8: Copy<8>(row, dst); break;
      default: std::copy_n(row, width_, dst); break;
    }
    used_ += width_;
  }

 private:
  template <size_t W>
  static void Copy(const int64_t* row, int64_t* dst) {
    for (size_t i = 0; i < W; ++i) dst[i] = row[i];
  }

  PieceList& list_;
  const size_t width_;
  size_t used_ = 0;
};

// Puts `list` in ascending order of key(peer) (distinct, >= 0): nothing when it is already, else a
// counting pass when the key range is small next to the pieces, else a sort.
template <typename Key>
void OrderByKey(PieceList& list, Key key) {
  const size_t k = list.size();
  const std::vector<int>& peers = list.peers;
  bool in_order = true;
  int64_t key_bound = 0;
  for (size_t i = 0; i < k; ++i) {
    const int64_t x = key(peers[i]);
    if (i > 0 && x < key(peers[i - 1])) in_order = false;
    key_bound = std::max(key_bound, x + 1);
  }
  if (in_order) return;
  std::vector<size_t>& order = Scratch().order;
  order.resize(k);
  if (key_bound <= 8 * static_cast<int64_t>(k) + 64) {
    std::vector<int>& slot = Scratch().slot;
    slot.assign(static_cast<size_t>(key_bound), -1);
    for (size_t i = 0; i < k; ++i) slot[static_cast<size_t>(key(peers[i]))] = static_cast<int>(i);
    size_t j = 0;
    for (int i : slot) {
      if (i >= 0) order[j++] = static_cast<size_t>(i);
    }
  } else {
    for (size_t i = 0; i < k; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(peers[a]) < key(peers[b]); });
  }
  const size_t w = 2 * static_cast<size_t>(list.tensor_rank);
  PieceList sorted;
  sorted.tensor_rank = list.tensor_rank;
  sorted.peers.resize(k);
  sorted.coords.resize(list.coords.size());
  for (size_t j = 0; j < k; ++j) {
    sorted.peers[j] = list.peers[order[j]];
    std::copy_n(list.coords.begin() + static_cast<std::ptrdiff_t>(order[j] * w), w,
                sorted.coords.begin() + static_cast<std::ptrdiff_t>(j * w));
  }
  list = std::move(sorted);
}

// What DirectPiecesOfRank needs to know about one rank: its mesh coordinates and boxes, and the
// mesh dims by role. The holders of a non-empty source block, in mesh order, are the ranks with
// its coordinates on the source's sharding dims and every combination (row-major) of the replica
// dims (those sharding no tensor dim; the source has no Partial dim): DirectTransfers'
// holders[b], of size `replicas`.
struct RankFrame {
  int me = 0;  // mesh index
  std::vector<int64_t> my_coord;
  Box from_box, to_box;
  std::vector<bool> shards_from;  // per mesh dim: shards the source
  std::vector<int> replica_dims;  // mesh dims sharding no tensor dim of the source
  std::vector<int> free_dims;     // mesh dims the target boxes do not depend on
  int64_t replicas = 1;           // product of the replica dims' sizes
};

StatusOr<RankFrame> FrameOfRank(const Layout& from, const Layout& to, int rank) {
  const DeviceMesh& mesh = from.mesh();
  RankFrame f;
  MF_ASSIGN_OR_RETURN(f.me, mesh.IndexOf(rank));
  const std::vector<int64_t>& mshape = mesh.shape();
  const int n = mesh.ndim();
  const std::vector<int64_t>& stride = mesh.strides();  // mesh index = sum coord*stride
  f.my_coord.resize(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) f.my_coord[d] = (f.me / stride[d]) % mshape[d];
  f.from_box = from.LocalBoxAt(f.my_coord);
  f.to_box = to.LocalBoxAt(f.my_coord);
  f.shards_from.assign(static_cast<size_t>(n), false);
  std::vector<bool> shards_to(static_cast<size_t>(n), false);
  for (const std::vector<int>& order : from.shard_order()) {
    for (int m : order) f.shards_from[m] = true;
  }
  for (const std::vector<int>& order : to.shard_order()) {
    for (int m : order) shards_to[m] = true;
  }
  for (int m = 0; m < n; ++m) {
    if (!f.shards_from[m]) {
      f.replica_dims.push_back(m);
      f.replicas *= mshape[m];
    }
    if (!shards_to[m]) f.free_dims.push_back(m);
  }
  return f;
}

// Receives: every non-empty source block overlapping the target box, but the own one, from the
// holder at replica position me % replicas; ordered by source world rank. Non-empty source boxes
// at different coordinates on the sharding dims are disjoint: a rank holds the (non-empty) block
// of this rank iff it has this rank's coordinates on those dims.
void AppendRecvs(const Layout& from, const RankFrame& f, PieceList& recvs) {
  if (f.to_box.empty()) return;
  const DeviceMesh& mesh = from.mesh();
  const std::vector<int64_t>& mshape = mesh.shape();
  const std::vector<int64_t>& stride = mesh.strides();
  PiecesScratch& scratch = Scratch();
  TermsOf(from, f.to_box, stride, f.my_coord, f.shards_from, scratch.terms);
  int64_t base = 0;  // the holder's part of the index on the replica dims
  int64_t j = f.me % f.replicas;
  for (size_t i = f.replica_dims.size(); i-- > 0;) {
    base += (j % mshape[f.replica_dims[i]]) * stride[f.replica_dims[i]];
    j /= mshape[f.replica_dims[i]];
  }
  const size_t count = CombinationCount(scratch.terms);
  if (count == 0) return;
  const bool held = !f.from_box.empty();
  {
    PieceWriter writer(recvs, count);
    ForEachCombination(scratch.terms, scratch.row, [&](int64_t index, bool same, const int64_t* piece) {
      if (held && same) return;  // the own block (not empty): already held
      writer.Push(static_cast<int>(index + base), piece);
    });
  }
  OrderByKey(recvs, [&](int peer) -> int64_t { return mesh.rank(peer); });  // by source world rank
}

// Sends: every destination whose target box overlaps the source box, that does not hold this
// block itself, and whose replica rule (its mesh index % replicas) picks this rank's replica
// position; ordered by destination mesh index.
void AppendSends(const Layout& to, const RankFrame& f, PieceList& sends) {
  if (f.from_box.empty()) return;
  const std::vector<int64_t>& mshape = to.mesh().shape();
  const std::vector<int64_t>& stride = to.mesh().strides();
  const std::vector<int>& free_dims = f.free_dims;
  const int64_t replicas = f.replicas;
  PiecesScratch& scratch = Scratch();
  TermsOf(to, f.from_box, stride, f.my_coord, f.shards_from, scratch.terms);
  int64_t my_replica = 0;
  for (int m : f.replica_dims) my_replica = my_replica * mshape[m] + f.my_coord[m];
  // The innermost free dim L is solved, not scanned: (partial + c*stride[L]) = my_replica (mod
  // replicas) holds for c = c0 + i*step, step = replicas / gcd(stride[L], replicas).
  const int last_free = free_dims.empty() ? -1 : free_dims.back();
  const int64_t a = last_free < 0 ? 0 : stride[last_free] % replicas;
  const int64_t g = Gcd(a, replicas);  // gcd(0, R) = R
  const int64_t step = replicas / g;
  const int64_t a_inv = InverseMod(a / g, step);
  std::vector<int64_t> dst(free_dims.size(), 0);  // coordinates on the free dims
  const size_t count = CombinationCount(scratch.terms);
  if (count == 0) return;
  {
    // Without free dims each combination is at most one destination.
    PieceWriter writer(sends, free_dims.empty() ? count : 0);
    ForEachCombination(scratch.terms, scratch.row, [&](int64_t base, bool same, const int64_t* piece) {
      // `same`: the destination's coordinates on the source's sharding dims that shard the target
      // are this rank's; it holds this block when its free coordinates that shard the source are
      // this rank's too.
      auto visit = [&](int64_t index) {
        if (same) {
          bool holds = true;
          for (size_t i = 0; i < free_dims.size() && holds; ++i) {
            holds = !f.shards_from[free_dims[i]] || dst[i] == f.my_coord[free_dims[i]];
          }
          if (holds) return;
        }
        writer.Push(static_cast<int>(index), piece);
      };
      if (last_free < 0) {
        if (replicas == 1 || base % replicas == my_replica) visit(base);
        return;
      }
      // Odometer over the outer free dims.
      const size_t outer = free_dims.size() - 1;
      std::fill(dst.begin(), dst.end(), 0);
      while (true) {
        int64_t partial = base;
        for (size_t i = 0; i < outer; ++i) partial += dst[i] * stride[free_dims[i]];
        const int64_t b = ((my_replica - partial) % replicas + replicas) % replicas;
        if (b % g == 0) {
          const int64_t c0 = (b / g) % step * a_inv % step;
          for (int64_t c = c0; c < mshape[last_free]; c += step) {
            dst[outer] = c;
            visit(partial + c * stride[last_free]);
          }
        }
        size_t i = outer;
        bool more = false;
        while (i > 0) {
          --i;
          if (++dst[i] < mshape[free_dims[i]]) {
            more = true;
            break;
          }
          dst[i] = 0;
        }
        if (!more) break;
      }
    });
  }
  OrderByKey(sends, [](int peer) -> int64_t { return peer; });  // by destination mesh index
}

}  // namespace

StatusOr<RankPieces> DirectPiecesOfRank(const Layout& from, const Layout& to, int rank) {
  MF_RETURN_IF_ERROR(CheckDirect(from, to));
  MF_ASSIGN_OR_RETURN(const RankFrame frame, FrameOfRank(from, to, rank));
  RankPieces out;
  out.sends.tensor_rank = out.recvs.tensor_rank = from.tensor_rank();
  AppendRecvs(from, frame, out.recvs);
  AppendSends(to, frame, out.sends);
  return out;
}

StatusOr<std::vector<Transfer>> DirectTransfersOfRank(const Layout& from, const Layout& to, int rank) {
  MF_ASSIGN_OR_RETURN(const RankPieces p, DirectPiecesOfRank(from, to, rank));
  const DeviceMesh& mesh = from.mesh();
  const int me = mesh.IndexOf(rank).value();  // DirectPiecesOfRank checked it
  // DirectTransfers' order: by destination mesh index, this rank's receives at its own index.
  std::vector<Transfer> out;
  out.reserve(p.sends.size() + p.recvs.size());
  size_t s = 0;
  for (; s < p.sends.size() && p.sends.peers[s] < me; ++s) {
    out.push_back(Transfer{rank, mesh.rank(p.sends.peers[s]), p.sends.box(s)});
  }
  for (size_t i = 0; i < p.recvs.size(); ++i)
    out.push_back(Transfer{mesh.rank(p.recvs.peers[i]), rank, p.recvs.box(i)});
  for (; s < p.sends.size(); ++s) out.push_back(Transfer{rank, mesh.rank(p.sends.peers[s]), p.sends.box(s)});
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
