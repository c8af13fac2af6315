#include "meshflow/planner/cost_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "meshflow/base/strings.h"
#include "meshflow/planner/direct.h"

namespace meshflow {
namespace {

std::string FormatDouble(double v) { return DoubleString(v); }

std::string Trim(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != ' ' && c != '\t') out += c;
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t e = s.find(sep, pos);
    out.push_back(s.substr(pos, e == std::string::npos ? std::string::npos : e - pos));
    if (e == std::string::npos) break;
    pos = e + 1;
  }
  return out;
}

double BetaUs(double factor, int64_t bytes, double bw_gbps) {
  // 1 GB/s = 1e3 bytes per microsecond.
  return factor * static_cast<double>(bytes) / (bw_gbps * 1e3);
}

// Reused per-thread buffers of the collective pricing (the search prices thousands of edges).
struct CellScratch {
  std::vector<std::vector<int64_t>> cuts;
  std::vector<int64_t> lens, next, coord;
  std::vector<size_t> idx;
  std::vector<Interval> fi, ti, next_iv;  // ForEachGridPoint: a tensor dim's chunk intervals per chain
  std::vector<int64_t> fstep, tstep;      // their strides per mesh dim
  std::vector<const int64_t*> ptr;        // per tensor dim, the current table entry
  std::vector<int64_t> ptr_step;          // and its step along the last mesh dim
  // ForEachGridPoint: per tensor dim, its factor table and its stride per mesh dim (row-major
  // over the grid positions of the mesh dims its chains use; 0 for the others).
  std::vector<std::vector<int64_t>> table;  // (from length, to length, overlap) triples
  std::vector<int64_t> stride;             // tensor rank x mesh ndim
  std::vector<int64_t> off;
  std::vector<std::vector<int64_t>> grid;
  std::vector<bool> diff;
  std::vector<char> used;
};

// One T per thread, reused between calls (the scratch buffers below).
template <typename T>
T& PerThread() {
  thread_local T s;
  return s;
}

// torch.chunk of every length in `lens` into k parts: the distinct part lengths, sorted, into
// `next`, and the part indices where the length changes (q and q+1, those below k; see
// LengthCells) appended to `cuts`. Inlined: LengthCells runs per priced collective edge.
[[gnu::always_inline]] inline void SplitLengths(const std::vector<int64_t>& lens, int64_t k, std::vector<int64_t>& next,
                                                std::vector<int64_t>& cuts) {
  next.clear();
  for (int64_t len : lens) {
    if (len == 0) {
      next.push_back(0);
      continue;
    }
    const int64_t chunk = (len + k - 1) / k;
    const int64_t q = len / chunk;
    next.push_back(chunk);
    if (q < k) {
      cuts.push_back(q);
      next.push_back(len - q * chunk);
    }
    if (q + 1 < k) {
      cuts.push_back(q + 1);
      next.push_back(0);
    }
  }
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
}

// Per mesh dim, the sorted start coordinates of the cells (in s.cuts): coordinate ranges within
// which every shard chain of `a` and `b` gives the same interval length at every level, whatever
// the (reachable) length of the interval being split. torch.chunk of a length L > 0 into k parts
// (chunk = ceil(L/k), q = L / chunk): parts 0..q-1 are full, part q holds L - q*chunk (if q < k),
// parts q+1.. are empty; so the cuts are q and q+1 for every reachable L at that level. Only the
// tensor dims t with use[t] enter; the mesh dims of the others keep the single cell {0}.
void LengthCells(const ShardChains& a, const ShardChains& b, const std::vector<bool>& use, CellScratch& s) {
  const size_t nd = a.mesh_shape.size();
  if (s.cuts.size() < nd) s.cuts.resize(nd);
  for (size_t m = 0; m < nd; ++m) s.cuts[m].assign(1, 0);
  std::vector<int64_t>& lens = s.lens;
  std::vector<int64_t>& next = s.next;
  for (const ShardChains* l : {&a, &b}) {
    for (int t = 0; t < l->tensor_rank(); ++t) {
      if (!use[t]) continue;
      lens.assign(1, l->shape[t]);
      for (int m : l->chain(t)) {
        SplitLengths(lens, l->mesh_shape[m], next, s.cuts[m]);
        lens.swap(next);
      }
    }
  }
  for (size_t m = 0; m < nd; ++m) {
    std::vector<int64_t>& c = s.cuts[m];
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
}

// The intervals of tensor dim t's chunks along `chain` (torch.chunk at every level), one per
// combination of the chain's grid positions, row-major in chain order (the last level fastest);
// step[m] is mesh dim m's stride in that order (0 for dims not in the chain).
void ChainIntervals(int64_t extent, std::span<const int64_t> mesh_shape, std::span<const int> chain,
                    const std::vector<std::vector<int64_t>>& grid, std::vector<Interval>& out,
                    std::vector<Interval>& next, std::vector<int64_t>& step) {
  out.assign(1, Interval{0, extent});
  for (int m : chain) {
    const std::vector<int64_t>& coords = grid[m];
    next.clear();
    for (const Interval& iv : out) {
      for (int64_t c : coords) next.push_back(ChunkOf(iv, mesh_shape[m], c));
    }
    out.swap(next);
  }
  int64_t stride = 1;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    step[static_cast<size_t>(*it)] = stride;
    stride *= static_cast<int64_t>(grid[*it].size());
  }
}

// Calls f(from_elems, to_elems, held) for every point of the grid s.grid (per mesh dim, the
// coordinates to visit; row-major, the last mesh dim fastest), where from_elems and to_elems are
// the element counts of the two boxes at that coordinate and held = |from box ∩ to box|; while f
// runs, s.idx holds the point's position in the grid per mesh dim. Each tensor dim's factors
// depend only on the coordinates of the mesh dims in its two chains, so they are tabulated per
// tensor dim over those dims' grid positions, from the two chains' intervals (one ChunkOf per
// chunk of each chain, not per point): a point costs O(tensor rank).
template <typename F>
void ForEachGridPoint(const ShardChains& from, const ShardChains& to, CellScratch& s, F&& f) {
  const int nd = static_cast<int>(from.mesh_shape.size());
  const int tr = from.tensor_rank();
  if (static_cast<int>(s.table.size()) < tr) s.table.resize(static_cast<size_t>(tr));
  s.stride.assign(static_cast<size_t>(tr) * nd, 0);
  s.off.assign(static_cast<size_t>(tr), 0);
  s.idx.assign(static_cast<size_t>(nd), 0);
  for (int t = 0; t < tr; ++t) {
    std::vector<char>& used = s.used;
    used.assign(static_cast<size_t>(nd), 0);
    for (int m : from.chain(t)) used[m] = 1;
    for (int m : to.chain(t)) used[m] = 1;
    int64_t size = 1;
    for (int m = nd - 1; m >= 0; --m) {
      if (!used[m]) continue;
      s.stride[static_cast<size_t>(t) * nd + m] = size;
      size *= static_cast<int64_t>(s.grid[m].size());
    }
    s.fstep.assign(static_cast<size_t>(nd), 0);
    s.tstep.assign(static_cast<size_t>(nd), 0);
    ChainIntervals(from.shape[t], from.mesh_shape, from.chain(t), s.grid, s.fi, s.next_iv, s.fstep);
    ChainIntervals(to.shape[t], to.mesh_shape, to.chain(t), s.grid, s.ti, s.next_iv, s.tstep);
    std::vector<int64_t>& tab = s.table[t];
    tab.resize(static_cast<size_t>(3 * size));
    // The table's points in its own row-major order (the used dims, last fastest), with their
    // positions in the two interval lists carried along.
    s.coord.assign(static_cast<size_t>(nd), 0);  // grid position per used dim
    int64_t pf = 0, pt = 0;
    for (int64_t k = 0; k < size; ++k) {
      const Interval fi = s.fi[static_cast<size_t>(pf)], ti = s.ti[static_cast<size_t>(pt)];
      const int64_t b = std::max(fi.begin, ti.begin), e = std::min(fi.end, ti.end);
      tab[3 * k] = fi.size();
      tab[3 * k + 1] = ti.size();
      tab[3 * k + 2] = std::max<int64_t>(0, e - b);
      for (int m = nd - 1; m >= 0; --m) {
        if (!used[m]) continue;
        if (++s.coord[m] < static_cast<int64_t>(s.grid[m].size())) {
          pf += s.fstep[m];
          pt += s.tstep[m];
          break;
        }
        pf -= (s.coord[m] - 1) * s.fstep[m];
        pt -= (s.coord[m] - 1) * s.tstep[m];
        s.coord[m] = 0;
      }
    }
  }
  // Every point: the last mesh dim in an inner run (per tensor dim, a pointer that steps through
  // its table), the others by an odometer. A mesh has at least one dim.
  const int last = nd - 1;
  const size_t run = s.grid[last].size();
  s.ptr.resize(static_cast<size_t>(tr));
  s.ptr_step.resize(static_cast<size_t>(tr));
  for (int t = 0; t < tr; ++t) s.ptr_step[t] = 3 * s.stride[static_cast<size_t>(t) * nd + last];
  // Up to four tensor dims, the inner run keeps its pointers in locals (f's stores cannot alias
  // them, so they stay in registers); missing dims read a factor of 1 and do not step.
  static constexpr int64_t kOnes[3] = {1, 1, 1};
  while (true) {
    if (tr <= 4) {
      auto start = [&](int t) { return t < tr ? s.table[t].data() + 3 * s.off[t] : kOnes; };
      auto step = [&](int t) { return t < tr ? s.ptr_step[t] : int64_t{0}; };
      const int64_t *p0 = start(0), *p1 = start(1), *p2 = start(2), *p3 = start(3);
      const int64_t s0 = step(0), s1 = step(1), s2 = step(2), s3 = step(3);
      for (size_t j = 0; j < run; ++j) {
        s.idx[last] = j;
        const int64_t fe = p0[0] * p1[0] * p2[0] * p3[0];
        const int64_t te = p0[1] * p1[1] * p2[1] * p3[1];
        const int64_t held = p0[2] * p1[2] * p2[2] * p3[2];
        p0 += s0;
        p1 += s1;
        p2 += s2;
        p3 += s3;
        f(fe, te, held);
      }
    } else {
      for (int t = 0; t < tr; ++t) s.ptr[t] = s.table[t].data() + 3 * s.off[t];
      for (size_t j = 0; j < run; ++j) {
        s.idx[last] = j;
        int64_t fe = 1, te = 1, held = 1;
        for (int t = 0; t < tr; ++t) {
          const int64_t* x = s.ptr[t];
          fe *= x[0];
          te *= x[1];
          held *= x[2];
          s.ptr[t] = x + s.ptr_step[t];
        }
        f(fe, te, held);
      }
    }
    s.idx[last] = 0;
    int m = last - 1;
    for (; m >= 0; --m) {
      // Indexed, not a pointer to stride[m]: the stride table is empty for a rank-0 tensor.
      auto st = [&](int t) { return s.stride[static_cast<size_t>(t) * nd + static_cast<size_t>(m)]; };
      if (++s.idx[m] < s.grid[m].size()) {
        for (int t = 0; t < tr; ++t) s.off[t] += st(t);
        break;
      }
      const int64_t back = static_cast<int64_t>(s.grid[m].size()) - 1;
      for (int t = 0; t < tr; ++t) s.off[t] -= back * st(t);
      s.idx[m] = 0;
    }
    if (m < 0) break;
  }
}

// s.grid = every coordinate of every mesh dim (ForEachGridPoint then visits every rank, in mesh
// index order).
void AllCoordinates(const DeviceMesh& mesh, CellScratch& s) {
  if (s.grid.size() < static_cast<size_t>(mesh.ndim())) s.grid.resize(static_cast<size_t>(mesh.ndim()));
  for (int m = 0; m < mesh.ndim(); ++m) {
    s.grid[m].resize(static_cast<size_t>(mesh.dim_size(m)));
    for (int64_t c = 0; c < mesh.dim_size(m); ++c) s.grid[m][c] = c;
  }
}

// Max over ranks of |to box| - |from box ∩ to box|, for steps whose boxes nest per tensor dim
// (all_gather, all_to_all: then the count depends on interval lengths only), from one
// representative rank per cell combination (LengthCells).
//
// A tensor dim with the same chain in both layouts contributes the same factor L to both counts;
// its mesh dims shard nothing else, so the max is (product of those dims' longest L, at
// coordinate 0) times the max over the other mesh dims of the product difference over the other
// tensor dims (each factor of which is >= 0: held <= whole per tensor dim), which only the other
// tensor dims' chains enter.
int64_t MaxElementsNotHeld(const ShardChains& from, const ShardChains& to) {
  const int tr = from.tensor_rank();
  int64_t same = 1;  // product of the equal-chain tensor dims' longest lengths
  CellScratch& s = PerThread<CellScratch>();
  std::vector<bool>& diff = s.diff;
  diff.assign(static_cast<size_t>(tr), false);
  bool any = false;
  for (int t = 0; t < tr; ++t) {
    const std::span<const int> a = from.chain(t), b = to.chain(t);
    if (std::equal(a.begin(), a.end(), b.begin(), b.end())) {
      Interval iv{0, from.shape[t]};
      for (int m : a) iv = ChunkOf(iv, from.mesh_shape[m], 0);
      same *= iv.size();
      continue;
    }
    diff[t] = true;
    any = true;
  }
  if (same == 0 || !any) return 0;  // no element to receive anywhere
  // The equal-chain tensor dims' mesh dims keep one cell (coordinate 0): no other chain holds them.
  LengthCells(from, to, diff, s);
  std::vector<std::vector<int64_t>>& cells = s.cuts;
  const size_t nd = from.mesh_shape.size();
  s.idx.assign(nd, 0);
  s.coord.assign(nd, 0);
  int64_t best = 0;
  while (true) {
    for (size_t m = 0; m < nd; ++m) s.coord[m] = cells[m][s.idx[m]];
    int64_t whole = 1, held = 1;
    for (int t = 0; t < tr; ++t) {
      if (!diff[t]) continue;
      Interval fi{0, from.shape[t]}, ti{0, to.shape[t]};
      for (int m : from.chain(t)) fi = ChunkOf(fi, from.mesh_shape[m], s.coord[m]);
      for (int m : to.chain(t)) ti = ChunkOf(ti, to.mesh_shape[m], s.coord[m]);
      whole *= ti.size();
      const int64_t b = std::max(fi.begin, ti.begin), e = std::min(fi.end, ti.end);
      held *= std::max<int64_t>(0, e - b);
    }
    best = std::max(best, whole - held);
    size_t m = 0;
    for (; m < nd; ++m) {
      if (++s.idx[m] < cells[m].size()) break;
      s.idx[m] = 0;
    }
    if (m == nd) break;
  }
  return same * best;
}

// Appends, for the chunks of `iv` split along chain[level..] (torch.chunk at every level) that are
// non-empty and overlap `target`, the overlap length to `lens` and the chain coordinates to
// `coords` (cc holds the coordinates of the levels above). Only overlapping chunks are visited:
// at each level they are a contiguous range of chunk indices.
void ChunksOverlapping(std::span<const int64_t> mesh_shape, std::span<const int> chain, size_t level, Interval iv,
                       Interval target, std::vector<int64_t>& cc, std::vector<int64_t>& lens,
                       std::vector<int64_t>& coords) {
  const int64_t b = std::max(iv.begin, target.begin), e = std::min(iv.end, target.end);
  if (iv.empty() || b >= e) return;
  if (level == chain.size()) {
    lens.push_back(e - b);
    coords.insert(coords.end(), cc.begin(), cc.end());
    return;
  }
  const int64_t k = mesh_shape[chain[level]];
  const int64_t chunk = (iv.size() + k - 1) / k;
  const int64_t lo = (b - iv.begin) / chunk;
  const int64_t hi = std::min(k - 1, (e - 1 - iv.begin) / chunk);
  for (int64_t x = lo; x <= hi; ++x) {
    cc[level] = x;
    ChunksOverlapping(mesh_shape, chain, level + 1, ChunkOf(iv, k, x), target, cc, lens, coords);
  }
}

// One transfer into the destination being priced (SendRecvCostChains).
struct SendRecvIn {
  int src_rank;
  int64_t src_index;
  double us;
};

// The destination list of the origin alone (mesh index 0), for SendRecvCostChains' only_dst.
constexpr int64_t kZero = 0;
std::span<const int64_t> OriginOnly() { return std::span<const int64_t>(&kZero, 1); }

// Link masks of a send_recv step: one bit per mesh dim of size >= 2 (only those can differ
// between two ranks; there are at most 63 of them), and per bit that dim's latency and bandwidth.
// The link of a mask is LinkOf of that path (max latency, min bandwidth over it).
struct MaskLinks {
  std::vector<int> bit;  // per mesh dim, its bit (-1: size 1)
  std::vector<double> lat, bw;

  void Build(const DeviceMesh& mesh, const Topology& topo) {
    bit.assign(static_cast<size_t>(mesh.ndim()), -1);
    lat.clear();
    bw.clear();
    for (int d = 0; d < mesh.ndim(); ++d) {
      if (mesh.dim_size(d) < 2) continue;
      bit[d] = static_cast<int>(lat.size());
      lat.push_back(topo.LatencyUs(d));
      bw.push_back(topo.BandwidthGBps(d));
    }
  }
  int bits() const { return static_cast<int>(lat.size()); }
  Link Of(uint64_t mask) const {
    Link link{0.0, std::numeric_limits<double>::infinity()};
    for (size_t b = 0; b < lat.size(); ++b) {
      if (mask >> b & 1) {
        link.alpha_us = std::max(link.alpha_us, lat[b]);
        link.bw_gbps = std::min(link.bw_gbps, bw[b]);
      }
    }
    return link;
  }
};

// SendRecvCostChains' buffers, reused per thread (the search prices an edge per expansion).
struct SendRecvScratch {
  std::vector<int64_t> cc, c, least_stride, memo_bytes;
  std::vector<char> sharded;
  std::vector<int> rep, fastest, last_dim;
  MaskLinks links;
  std::vector<char> mask_ok;
  std::vector<double> memo_us, in_us, out_us;
  std::vector<Link> memo_link;  // per link mask, its link (valid where memo_bytes is not -1)
  // Per tensor dim: the overlap lists of every target interval met so far (appended), where each
  // target interval's list starts (slot, per key; -1: not met yet), and the current list.
  std::vector<std::vector<int64_t>> store_len, store_coords, store_index, slot;  // slot: (begin, size) per key
  std::vector<int64_t> last_key, cur_begin, cur_size;
  std::vector<const int64_t*> len_p, index_p;  // the current lists' lengths and index parts
  std::vector<std::vector<uint64_t>> over_mask;
  std::vector<SendRecvIn> mine;
  std::vector<size_t> idx;
  std::vector<std::vector<int64_t>> visit;  // TranslationClasses: per mesh dim, the coordinates priced
  std::vector<size_t> visit_pos;            // the grid odometer's position per mesh dim
  std::vector<int64_t> lens, next;          // TranslationClasses' reachable interval lengths
};

// Mesh dims along which a send_recv step's per-rank terms repeat, and one coordinate per class.
//
// A mesh dim m is "passive" when it sits at the same level l of the same tensor dim t's chain in
// both layouts, below the same outer levels (the chains agree up to and including m). Then a
// destination's target interval on t and the source chunks it overlaps are subdivisions of one
// level-l chunk, every source it receives from has its coordinate on m (its bit never differs),
// and every destination a source sends to shares the source's coordinate on m. Moving a rank (with
// all its partners) from coordinate x to y on m changes neither the lengths nor the links of its
// transfers when the level-l chunks at x and y have the same length for every reachable length of
// the interval they split (the cells of LengthCells: torch.chunk gives full chunks, one remainder,
// then empty ones), and keeps their order when mesh index order is world rank order (the ranks
// ascend with the index) and the Replicate holder each destination picks (its index modulo the
// holder count) does not move: the move is a multiple of the period count / gcd(m's stride,
// count) (1 when the stride is a multiple of the count, i.e. the Replicate dims are inner to m).
// So every per-rank term, as the same double summed in the same order, is that of the rank with
// one of the cell's first `period` coordinates on m, and the max over ranks is the max over the
// sub-grid of such coordinates.
//
// Fills s.visit (per mesh dim: the first `period` coordinates of each cell on passive dims, every
// coordinate of the others)
// and returns the sub-grid's size, or 0 when no dim is passive (then the full pass is no larger).
int64_t TranslationClasses(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t h_count,
                           SendRecvScratch& s) {
  const int nd = mesh.ndim();
  if (!mesh.identity_ranks() && !std::is_sorted(mesh.ranks().begin(), mesh.ranks().end())) return 0;
  if (s.visit.size() < static_cast<size_t>(nd)) s.visit.resize(static_cast<size_t>(nd));
  bool reduced = false;
  int64_t total = 1;
  for (int m = 0; m < nd; ++m) {
    const int64_t k = mesh.dim_size(m);
    std::vector<int64_t>& v = s.visit[m];
    v.clear();
    // The tensor dim and level of m in the source's chains, and whether the target agrees.
    int t = -1;
    size_t level = 0;
    for (int q = 0; q < from.tensor_rank() && t < 0; ++q) {
      const std::span<const int> a = from.chain(q);
      for (size_t j = 0; j < a.size(); ++j) {
        if (a[j] == m) {
          t = q;
          level = j;
        }
      }
    }
    // Moving by `period` coordinates moves the mesh index by a multiple of the holder count.
    const int64_t period = h_count / std::gcd(mesh.strides()[static_cast<size_t>(m)], h_count);
    bool passive = k > 1 && t >= 0 && period < k;
    if (passive) {
      const std::span<const int> a = from.chain(t), b = to.chain(t);
      passive = b.size() > level && std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(level) + 1, b.begin());
    }
    if (passive) {
      // Reachable lengths of the interval split at `level`, then the cell starts of that split.
      const std::span<const int> a = from.chain(t);
      s.lens.assign(1, from.shape[t]);
      for (size_t j = 0; j < level; ++j) {
        SplitLengths(s.lens, from.mesh_shape[a[j]], s.next, v);  // v: scratch until here
        s.lens.swap(s.next);
      }
      v.assign(1, 0);
      SplitLengths(s.lens, k, s.next, v);
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
      if (period > 1) {
        // The first `period` coordinates of each cell: x is equivalent to the one congruent to it
        // modulo the period (same cell, same holder).
        s.next.clear();
        for (size_t c = 0; c < v.size(); ++c) {
          const int64_t end = c + 1 < v.size() ? v[c + 1] : k;
          for (int64_t x = v[c]; x < std::min(end, v[c] + period); ++x) s.next.push_back(x);
        }
        v.swap(s.next);
      }
      reduced = reduced || static_cast<int64_t>(v.size()) < k;
    } else {
      v.resize(static_cast<size_t>(k));
      std::iota(v.begin(), v.end(), int64_t{0});
    }
    total *= static_cast<int64_t>(v.size());
  }
  return reduced ? total : 0;
}

// s.visit = every coordinate of every mesh dim (the grid of every rank).
void VisitEveryRank(const DeviceMesh& mesh, SendRecvScratch& s) {
  if (s.visit.size() < static_cast<size_t>(mesh.ndim())) s.visit.resize(static_cast<size_t>(mesh.ndim()));
  for (int m = 0; m < mesh.ndim(); ++m) {
    s.visit[m].resize(static_cast<size_t>(mesh.dim_size(m)));
    std::iota(s.visit[m].begin(), s.visit[m].end(), int64_t{0});
  }
}

// ModelStep's send_recv time and busiest rank's bytes, from the same transfers summed in the same
// order (see ModelStepCost), without the (destination, block) pass of DirectTransfers.
// With a non-empty `only_dst` (mesh indices, each at most once), only those destinations are
// priced and `us` is the max of their incoming times (max_bytes_per_rank the max of their bytes):
// each incoming time is the same double as in the full pass (it depends on that destination's
// transfers only).
// With bytes_per_rank, also fills every rank's received bytes (mesh().ranks() order).
// SendRecvCost on chains (`from` Partial-free; Replicate dims are those in no chain of `from`).
//
// Per destination, each tensor dim's overlapping source chunks (built once per distinct target
// interval of that dim, i.e. per coordinate tuple on its target chain) carry their overlap length,
// their part of the source's mesh index and the mesh dims where their coordinates differ from the
// destination's (a bit mask); a source block is one chunk per tensor dim, so its bytes, index and
// mask are a product, a sum and an or, and its link (max latency, min bandwidth over the differing
// dims) follows from the mask; the time of the last transfer per mask is reused when the bytes
// repeat. The doubles are those of the per-source loop: the same link values, the same
// expression, summed in source-rank order.
StepCost SendRecvCostChains(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                            const Topology& topo, std::span<const int64_t> only_dst,
                            std::vector<int64_t>* bytes_per_rank,
                            int64_t limit_units = std::numeric_limits<int64_t>::max(), bool* gave_up = nullptr) {
  const int nd = mesh.ndim();
  const int tr = from.tensor_rank();
  const int64_t n = mesh.size();
  SendRecvScratch& sc = PerThread<SendRecvScratch>();
  const std::vector<int64_t>& stride = mesh.strides();  // mesh index = sum coord * stride
  std::vector<char>& sharded = sc.sharded;
  sharded.assign(static_cast<size_t>(nd), 0);
  for (int m : from.dims) sharded[m] = 1;
  // Replicate dims of the source (ascending) and their row-major holder spread.
  std::vector<int>& rep = sc.rep;
  rep.clear();
  int64_t h_count = 1;
  for (int m = 0; m < nd; ++m) {
    if (!sharded[m]) {
      rep.push_back(m);
      h_count *= mesh.dim_size(m);
    }
  }
  // Masks of differing mesh dims (MaskLinks).
  MaskLinks& links = sc.links;
  links.Build(mesh, topo);
  const std::vector<int>& bit = links.bit;
  const int nb = links.bits();
  constexpr int kMaskDims = 12;  // the memo below is indexed by mask up to this many bits
  const bool table = nb <= kMaskDims;
  auto differ = [&](int m, bool d) { return d ? uint64_t{1} << bit[m] : uint64_t{0}; };
  auto link_of = [&](uint64_t mask) { return links.Of(mask); };
  // Per link mask, the bytes and time of the last transfer priced on it (most transfers of a step
  // repeat a few sizes on a few links): the same double without the link walk and the division.
  std::vector<int64_t>& memo_bytes = sc.memo_bytes;
  std::vector<double>& memo_us = sc.memo_us;
  std::vector<Link>& memo_link = sc.memo_link;
  if (table) {
    memo_bytes.assign(size_t{1} << nb, -1);
    memo_us.resize(size_t{1} << nb);    // read only where memo_bytes is not -1
    memo_link.resize(size_t{1} << nb);  // the same
  }
  const bool some = !only_dst.empty();  // only the destinations in only_dst, not every one
  // Otherwise the destinations are the points of the grid sc.visit in mesh index order: every
  // rank, or, without a byte vector to fill, one rank per translation class (TranslationClasses).
  int64_t count = static_cast<int64_t>(only_dst.size());
  if (!some) {
    const int64_t sub = bytes_per_rank != nullptr ? 0 : TranslationClasses(mesh, from, to, h_count, sc);
    if (sub == 0) VisitEveryRank(mesh, sc);
    count = sub > 0 ? sub : n;
  }
  std::vector<double>& in_us = sc.in_us;  // per destination priced (the k-th)
  std::vector<double>& out_us = sc.out_us;
  in_us.assign(static_cast<size_t>(count), 0.0);
  out_us.assign(some ? 0 : static_cast<size_t>(n), 0.0);
  int64_t max_bytes = 0;
  // Per tensor dim, the non-empty source chunks overlapping the destination's interval: overlap
  // lengths and chain coordinates (flat, chain order) from ChunksOverlapping, and per chunk its
  // part of the source's mesh index; the interval is a function of the destination's coordinates
  // on the target chain (the key, row-major over that chain), so each interval's list is computed
  // once per call and kept (store_*, slot). over_mask: per chunk of the current list, its
  // differing-dims mask for the current destination.
  std::vector<std::vector<int64_t>>& store_len = sc.store_len;
  std::vector<std::vector<int64_t>>& store_coords = sc.store_coords;
  std::vector<std::vector<int64_t>>& store_index = sc.store_index;
  std::vector<std::vector<int64_t>>& slot = sc.slot;
  std::vector<std::vector<uint64_t>>& over_mask = sc.over_mask;
  if (store_len.size() < static_cast<size_t>(tr)) {
    store_len.resize(static_cast<size_t>(tr));
    store_coords.resize(static_cast<size_t>(tr));
    store_index.resize(static_cast<size_t>(tr));
    slot.resize(static_cast<size_t>(tr));
    over_mask.resize(static_cast<size_t>(tr));
  }
  // Keys are kept only when every destination is priced (a few probed ones rarely share one).
  const bool keep = !some;
  for (int t = 0; t < tr; ++t) {
    store_len[t].clear();
    store_coords[t].clear();
    store_index[t].clear();
    int64_t keys = 1;
    for (int m : to.chain(t)) keys *= to.mesh_shape[m];
    slot[t].assign(keep ? 2 * static_cast<size_t>(keys) : 0, -1);
  }
  std::vector<int64_t>& last_key = sc.last_key;
  std::vector<int64_t>& cur_begin = sc.cur_begin;
  std::vector<int64_t>& cur_size = sc.cur_size;
  last_key.assign(static_cast<size_t>(tr), -1);
  std::vector<const int64_t*>& len_p = sc.len_p;
  std::vector<const int64_t*>& index_p = sc.index_p;
  len_p.assign(static_cast<size_t>(tr), nullptr);
  index_p.assign(static_cast<size_t>(tr), nullptr);
  cur_begin.assign(static_cast<size_t>(tr), 0);
  cur_size.assign(static_cast<size_t>(tr), 0);
  std::vector<int64_t>& cc = sc.cc;
  std::vector<SendRecvIn>& mine = sc.mine;
  std::vector<size_t>& idx = sc.idx;
  idx.assign(static_cast<size_t>(tr), 0);
  // The odometer's order: tensor dims whose chains hold the innermost mesh dims vary fastest, so
  // that the sources usually come in index order and need no sort.
  std::vector<int>& fastest = sc.fastest;
  std::vector<int64_t>& least_stride = sc.least_stride;
  fastest.resize(static_cast<size_t>(tr));
  least_stride.assign(static_cast<size_t>(tr), std::numeric_limits<int64_t>::max());
  for (int t = 0; t < tr; ++t) {
    fastest[t] = t;
    for (int m : from.chain(t)) least_stride[t] = std::min(least_stride[t], stride[m]);
  }
  // Stable insertion sort (a handful of dims; std::stable_sort would allocate a buffer per call).
  for (int a = 1; a < tr; ++a) {
    const int v = fastest[a];
    int b = a;
    for (; b > 0 && least_stride[fastest[b - 1]] > least_stride[v]; --b) fastest[b] = fastest[b - 1];
    fastest[b] = v;
  }
  double running = 0;  // max of the finished destinations' incoming and the partial outgoing times
  double checked = -1;  // the last value of running checked against limit_units
  std::vector<int64_t>& c = sc.c;
  c.assign(static_cast<size_t>(nd), 0);
  // A tensor dim's masks depend on the destination's coordinates on its chain's mesh dims: they
  // are recomputed when one of those (or the dim's overlaps) changed.
  std::vector<int>& last_dim = sc.last_dim;  // per tensor dim, its chain's highest mesh dim (-1: none)
  std::vector<char>& mask_ok = sc.mask_ok;
  last_dim.assign(static_cast<size_t>(tr), -1);
  mask_ok.assign(static_cast<size_t>(tr), 0);
  for (int t = 0; t < tr; ++t) {
    for (int m : from.chain(t)) last_dim[t] = std::max(last_dim[t], m);
  }
  std::vector<size_t>& visit_pos = sc.visit_pos;
  visit_pos.assign(static_cast<size_t>(nd), 0);
  int64_t grid_index = 0;  // the grid point's mesh index (its first point is the origin)
  for (int64_t k = 0; k < count; ++k) {
    if (some) {  // its coordinates (all 0 before the first), and every tensor dim's masks to compute
      const int64_t i = only_dst[static_cast<size_t>(k)];
      if (i != 0 || k > 0) {
        int64_t rem = i;
        for (int d = nd - 1; d >= 0; --d) {
          c[d] = rem % mesh.dim_size(d);
          rem /= mesh.dim_size(d);
        }
      }
      if (k > 0) std::fill(mask_ok.begin(), mask_ok.end(), 0);
    } else if (k > 0) {  // the grid's next point in row-major order: mesh dims first_changed.. change
      int first_changed = nd - 1;
      for (int d = nd - 1; d >= 0; --d) {
        first_changed = d;
        const std::vector<int64_t>& v = sc.visit[d];
        grid_index -= c[d] * stride[d];
        const bool carry = ++visit_pos[d] == v.size();
        if (carry) visit_pos[d] = 0;
        c[d] = v[visit_pos[d]];
        grid_index += c[d] * stride[d];
        if (!carry) break;
      }
      for (int t = 0; t < tr; ++t) {
        if (last_dim[t] >= first_changed) mask_ok[t] = 0;
      }
    }
    const int64_t i = some ? only_dst[static_cast<size_t>(k)] : grid_index;  // the destination's mesh index
    bool any = true;
    for (int t = 0; t < tr && any; ++t) {
      const std::span<const int> chain = from.chain(t);
      int64_t key = 0;
      for (int m : to.chain(t)) key = key * to.mesh_shape[m] + c[m];
      // Neighbouring ranks often share a tensor dim's target interval: reuse its overlaps.
      if (key != last_key[t]) {
        last_key[t] = key;
        mask_ok[t] = 0;
        if (keep && slot[t][2 * key] >= 0) {
          cur_begin[t] = slot[t][2 * key];
          cur_size[t] = slot[t][2 * key + 1];
        } else {
          Interval target{0, to.shape[t]};
          for (int m : to.chain(t)) target = ChunkOf(target, to.mesh_shape[m], c[m]);
          cur_begin[t] = static_cast<int64_t>(store_len[t].size());
          cc.assign(chain.size(), 0);
          ChunksOverlapping(from.mesh_shape, chain, 0, Interval{0, from.shape[t]}, target, cc, store_len[t],
                            store_coords[t]);
          for (size_t e = static_cast<size_t>(cur_begin[t]); e < store_len[t].size(); ++e) {
            const int64_t* pc = store_coords[t].data() + e * chain.size();
            int64_t index = 0;
            for (size_t j = 0; j < chain.size(); ++j) index += pc[j] * stride[chain[j]];
            store_index[t].push_back(index);
          }
          cur_size[t] = static_cast<int64_t>(store_len[t].size()) - cur_begin[t];
          if (keep) {
            slot[t][2 * key] = cur_begin[t];
            slot[t][2 * key + 1] = cur_size[t];
          }
        }
        // Only this branch changes the list (or reallocates store_*[t]).
        len_p[t] = store_len[t].data() + cur_begin[t];
        index_p[t] = store_index[t].data() + cur_begin[t];
      }
      any = cur_size[t] > 0;
      if (!any) break;
      if (mask_ok[t]) continue;
      mask_ok[t] = 1;
      over_mask[t].resize(static_cast<size_t>(cur_size[t]));
      for (size_t e = 0; e < over_mask[t].size(); ++e) {
        const int64_t* pc = store_coords[t].data() + (static_cast<size_t>(cur_begin[t]) + e) * chain.size();
        uint64_t mask = 0;
        for (size_t j = 0; j < chain.size(); ++j) mask |= differ(chain[j], pc[j] != c[chain[j]]);
        over_mask[t][e] = mask;
      }
    }
    if (!any) continue;
    // Holder coordinates on the Replicate dims: row-major over them of i % h_count; their part of
    // the index and of the mask.
    int64_t rep_index = 0;
    uint64_t rep_mask = 0;
    {
      int64_t rem = i % h_count;
      for (int j = static_cast<int>(rep.size()) - 1; j >= 0; --j) {
        const int m = rep[j];
        const int64_t h = rem % mesh.dim_size(m);
        rem /= mesh.dim_size(m);
        rep_index += h * stride[m];
        rep_mask |= differ(m, h != c[m]);
      }
    }
    mine.clear();
    int64_t bytes_in = 0;
    bool in_order = true;  // the sources came in rank order (the usual case: no sort)
    // One transfer from the source block with these bytes, index and mask (0: the own block).
    auto add = [&](int64_t elems, int64_t hi, uint64_t mask) {
      if (mask == 0) return;  // not the destination's own block
      const uint64_t full = mask | rep_mask;
      const int64_t bytes = elems * esize;
      double us;
      if (table && memo_bytes[full] == bytes) {  // the same transfer time as the last one on this link
        us = memo_us[full];
      } else {
        // The link of a mask is found once per call (memo_bytes is -1 before its first transfer).
        if (table && memo_bytes[full] < 0) memo_link[full] = link_of(full);
        const Link link = table ? memo_link[full] : link_of(full);
        us = link.alpha_us + BetaUs(1.0, bytes, link.bw_gbps);
        if (table) {
          memo_bytes[full] = bytes;
          memo_us[full] = us;
        }
      }
      const int src_rank = mesh.rank(static_cast<int>(hi));
      if (!mine.empty() && src_rank < mine.back().src_rank) in_order = false;
      mine.push_back(SendRecvIn{src_rank, hi, us});
      bytes_in += bytes;
    };
    if (tr == 0) {
      add(1, rep_index, 0);
    } else {
      // The odometer over one chunk per tensor dim, fastest[0] the inner loop: the other dims'
      // product, sum and or are formed once per inner run.
      const int in = fastest[0];
      const int64_t* in_len = len_p[in];
      const int64_t* in_index = index_p[in];
      const uint64_t* in_mask = over_mask[in].data();
      const size_t in_size = static_cast<size_t>(cur_size[in]);
      std::fill(idx.begin(), idx.end(), 0);
      while (true) {
        int64_t elems = 1, hi = rep_index;
        uint64_t mask = 0;
        for (int q = 1; q < tr; ++q) {
          const int t = fastest[q];
          elems *= len_p[t][idx[t]];
          hi += index_p[t][idx[t]];
          mask |= over_mask[t][idx[t]];
        }
        for (size_t e = 0; e < in_size; ++e) add(elems * in_len[e], hi + in_index[e], mask | in_mask[e]);
        int q = 1;
        for (; q < tr; ++q) {
          const int t = fastest[q];
          if (++idx[t] < static_cast<size_t>(cur_size[t])) break;
          idx[t] = 0;
        }
        if (q == tr) break;
      }
    }
    auto by_rank = [](const SendRecvIn& a, const SendRecvIn& b) { return a.src_rank < b.src_rank; };
    if (!in_order) std::sort(mine.begin(), mine.end(), by_rank);
    for (const SendRecvIn& x : mine) {
      in_us[k] += x.us;
      if (!some) {
        out_us[x.src_index] += x.us;
        running = std::max(running, out_us[x.src_index]);
      }
    }
    max_bytes = std::max(max_bytes, bytes_in);
    if (bytes_per_rank != nullptr) (*bytes_per_rank)[i] = bytes_in;
    // in_us[k] is final and the outgoing sums only grow (non-negative addends): the time is at
    // least `running`.
    running = std::max(running, in_us[k]);
    if (limit_units != std::numeric_limits<int64_t>::max() && running != checked) {
      checked = running;  // CostUnits is a function of running: check each value once
      if (CostUnits(running) > limit_units) {
        if (gave_up != nullptr) *gave_up = true;
        return StepCost{};
      }
    }
  }
  StepCost out;
  out.max_bytes_per_rank = max_bytes;
  if (some) {
    for (double x : in_us) out.us = std::max(out.us, x);
    return out;
  }
  // Every source of a priced destination is priced itself (TranslationClasses), and out_us is 0
  // for the ranks outside the sub-grid.
  for (int64_t k = 0; k < count; ++k) out.us = std::max(out.us, in_us[k]);
  for (int64_t i = 0; i < n; ++i) out.us = std::max(out.us, out_us[i]);
  return out;
}

// SendRecvOutgoingUsChains' buffers, reused per thread.
struct OutgoingScratch {
  MaskLinks links;
  std::vector<int64_t> sc, dc, cc, fc;
  std::vector<char> in_from, in_to;
  std::vector<int> free_dims;
  std::vector<std::vector<int64_t>> lens, coords;
  std::vector<std::pair<int64_t, double>> outs;
  std::vector<size_t> idx;
};

// The outgoing time of the source at mesh index `src` in SendRecvCostChains' full pass, found
// from the target side: per tensor dim, the target chunks overlapping the source's interval
// (ChunksOverlapping on the target chain), with every coordinate on the mesh dims in no target
// chain; a destination counts where it does not hold the source's block itself (it differs on a
// source chain's dim) and takes its blocks from this holder (its mesh index modulo the holder
// count is this source's row-major position over the Replicate dims). Each transfer is the same
// expression on the same link (max latency, min bandwidth over the dims where the two ranks
// differ), summed in destination mesh-index order as the full pass sums it: the same double.
double SendRecvOutgoingUsChains(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to,
                                int64_t esize, const Topology& topo, int64_t src) {
  const int nd = mesh.ndim();
  const int tr = from.tensor_rank();
  if (tr == 0) return 0.0;  // a scalar: every rank holds it, nothing moves
  const std::vector<int64_t>& stride = mesh.strides();
  OutgoingScratch& s = PerThread<OutgoingScratch>();
  s.links.Build(mesh, topo);
  std::vector<int64_t>& sc = s.sc;
  std::vector<int64_t>& dc = s.dc;
  sc.resize(static_cast<size_t>(nd));
  dc.resize(static_cast<size_t>(nd));
  int64_t rem = src;
  for (int d = nd - 1; d >= 0; --d) {
    sc[d] = rem % mesh.dim_size(d);
    rem /= mesh.dim_size(d);
  }
  std::vector<char>& in_from = s.in_from;
  std::vector<char>& in_to = s.in_to;
  in_from.assign(static_cast<size_t>(nd), 0);
  in_to.assign(static_cast<size_t>(nd), 0);
  for (int m : from.dims) in_from[m] = 1;
  for (int m : to.dims) in_to[m] = 1;
  int64_t h_count = 1, h_pos = 0;  // the holder count and this source's position among its block's holders
  std::vector<int>& free_dims = s.free_dims;  // mesh dims in no target chain: every coordinate receives
  free_dims.clear();
  for (int m = 0; m < nd; ++m) {
    if (!in_from[m]) {
      h_count *= mesh.dim_size(m);
      h_pos = h_pos * mesh.dim_size(m) + sc[m];
    }
    if (!in_to[m]) free_dims.push_back(m);
  }
  std::vector<std::vector<int64_t>>& lens = s.lens;
  std::vector<std::vector<int64_t>>& coords = s.coords;
  if (lens.size() < static_cast<size_t>(tr)) {
    lens.resize(static_cast<size_t>(tr));
    coords.resize(static_cast<size_t>(tr));
  }
  std::vector<int64_t>& cc = s.cc;
  for (int t = 0; t < tr; ++t) {
    lens[t].clear();
    coords[t].clear();
  }
  for (int t = 0; t < tr; ++t) {
    Interval iv{0, from.shape[t]};
    for (int m : from.chain(t)) iv = ChunkOf(iv, from.mesh_shape[m], sc[m]);
    const std::span<const int> chain = to.chain(t);
    cc.assign(chain.size(), 0);
    ChunksOverlapping(to.mesh_shape, chain, 0, Interval{0, to.shape[t]}, iv, cc, lens[t], coords[t]);
    if (lens[t].empty()) return 0.0;  // the block is empty or no target box overlaps it
  }
  std::vector<std::pair<int64_t, double>>& outs = s.outs;  // (destination mesh index, transfer time)
  outs.clear();
  std::vector<size_t>& idx = s.idx;
  idx.assign(static_cast<size_t>(tr), 0);
  std::vector<int64_t>& fc = s.fc;
  fc.assign(free_dims.size(), 0);
  while (true) {
    int64_t elems = 1;
    for (int t = 0; t < tr; ++t) {
      const std::span<const int> chain = to.chain(t);
      elems *= lens[t][idx[t]];
      for (size_t j = 0; j < chain.size(); ++j) dc[chain[j]] = coords[t][idx[t] * chain.size() + j];
    }
    for (size_t j = 0; j < free_dims.size(); ++j) dc[free_dims[j]] = fc[j];
    bool holds = true;  // the destination has the block already (the full pass's empty mask)
    int64_t i = 0;
    uint64_t mask = 0;  // the mesh dims where source and destination differ (all of size >= 2)
    for (int m = 0; m < nd; ++m) {
      i += dc[m] * stride[m];
      if (dc[m] == sc[m]) continue;
      if (in_from[m]) holds = false;
      mask |= uint64_t{1} << s.links.bit[m];
    }
    if (!holds && i % h_count == h_pos) {
      const Link link = s.links.Of(mask);
      outs.emplace_back(i, link.alpha_us + BetaUs(1.0, elems * esize, link.bw_gbps));
    }
    // Next combination: the free dims' coordinates, then one overlapping chunk per tensor dim.
    size_t j = 0;
    for (; j < fc.size(); ++j) {
      if (++fc[j] < mesh.dim_size(free_dims[j])) break;
      fc[j] = 0;
    }
    if (j < fc.size()) continue;
    int t = 0;
    for (; t < tr; ++t) {
      if (++idx[t] < lens[t].size()) break;
      idx[t] = 0;
    }
    if (t == tr) break;
  }
  std::sort(outs.begin(), outs.end());
  double us = 0;
  for (const auto& [i, x] : outs) us += x;
  return us;
}


// The source chunks of one tensor dim that overlap a destination at the origin (every coordinate
// 0), grouped by the mesh dims where their coordinates differ from it (a bit mask: bit `bit[m]`
// where the chunk's coordinate on chain dim m is not 0): per group, the number of non-empty
// chunks and their total overlap length. Fully covered subtrees are counted by size, not per
// chunk (children of equal size have the same subtree), so the cost does not grow with the
// number of chunks, only with the number of distinct masks (at most 2^chain length).
struct MaskGroup {
  uint64_t mask;
  int64_t count;
  int64_t len;
};

// Past this many groups (before merging equal masks) the closed form stops and the caller prices
// the first rank exactly: a chain over many mesh dims can have up to 2^dims masks.
constexpr size_t kMaxGroups = 4096;

// SendRecvFirstRankBoundUs' buffers, reused per thread.
struct FirstRankScratch {
  MaskLinks links;
  std::vector<std::vector<MaskGroup>> groups;
  std::vector<size_t> idx;
};

// Every non-empty leaf under `level` of an interval of `size` elements, `mult` copies of it.
void FullTreeGroups(std::span<const int64_t> mesh_shape, std::span<const int> chain, std::span<const int> bit,
                    size_t level, int64_t size, uint64_t mask, int64_t mult, std::vector<MaskGroup>& out) {
  if (size == 0 || out.size() > kMaxGroups) return;
  if (level == chain.size()) {
    out.push_back(MaskGroup{mask, mult, mult * size});
    return;
  }
  const int m = chain[level];
  const int64_t k = mesh_shape[m];
  const int64_t chunk = (size + k - 1) / k;
  FullTreeGroups(mesh_shape, chain, bit, level + 1, chunk, mask, mult, out);  // child 0 (chunk <= size)
  if (k == 1) return;
  const uint64_t b = uint64_t{1} << bit[m];
  const int64_t full = size / chunk;  // children 0 .. full-1 have `chunk` elements (full <= k)
  const int64_t rem = size - full * chunk;
  if (full > 1) FullTreeGroups(mesh_shape, chain, bit, level + 1, chunk, mask | b, mult * (full - 1), out);
  if (rem > 0) FullTreeGroups(mesh_shape, chain, bit, level + 1, rem, mask | b, mult, out);
}

// The leaves under `level` of `iv` that overlap `target`, by group.
void OverlapGroups(std::span<const int64_t> mesh_shape, std::span<const int> chain, std::span<const int> bit,
                   size_t level, Interval iv, Interval target, uint64_t mask, std::vector<MaskGroup>& out) {
  const int64_t b = std::max(iv.begin, target.begin), e = std::min(iv.end, target.end);
  if (iv.empty() || b >= e || out.size() > kMaxGroups) return;
  if (b == iv.begin && e == iv.end) {
    FullTreeGroups(mesh_shape, chain, bit, level, iv.size(), mask, 1, out);
    return;
  }
  if (level == chain.size()) {
    out.push_back(MaskGroup{mask, 1, e - b});
    return;
  }
  const int m = chain[level];
  const int64_t k = mesh_shape[m];
  const int64_t chunk = (iv.size() + k - 1) / k;
  const int64_t lo = (b - iv.begin) / chunk;
  const int64_t hi = std::min(k - 1, (e - 1 - iv.begin) / chunk);
  // Children inside the target other than child 0 differ on this dim and have one of at most two
  // sizes (`chunk`, the remainder): their subtrees are counted once per size.
  int64_t inside_size[2] = {0, 0}, inside_mult[2] = {0, 0};
  for (int64_t x = lo; x <= hi; ++x) {
    const Interval child = ChunkOf(iv, k, x);
    if (x > 0 && !child.empty() && child.begin >= target.begin && child.end <= target.end) {
      const int j = inside_mult[0] == 0 || inside_size[0] == child.size() ? 0 : 1;
      inside_size[j] = child.size();
      ++inside_mult[j];
      continue;
    }
    OverlapGroups(mesh_shape, chain, bit, level + 1, child, target, x == 0 ? mask : mask | uint64_t{1} << bit[m], out);
  }
  for (int j = 0; j < 2; ++j) {
    if (inside_mult[j] > 0) {
      FullTreeGroups(mesh_shape, chain, bit, level + 1, inside_size[j], mask | uint64_t{1} << bit[m], inside_mult[j],
                     out);
    }
  }
}

// ModelStep's send_recv time and busiest rank's bytes (see SendRecvCostChains).
StatusOr<StepCost> SendRecvCost(const Layout& from, const Layout& to, int64_t esize, const Topology& topo,
                                std::span<const int64_t> only_dst = {},
                                std::vector<int64_t>* bytes_per_rank = nullptr) {
  if (!(from.mesh() == to.mesh()) || from.global_shape() != to.global_shape() || from.HasPartial()) {
    return DirectTransfers(from, to).status();
  }
  FlatChains a, b;
  return SendRecvCostChains(from.mesh(), a.Of(from), b.Of(to), esize, topo, only_dst, bytes_per_rank);
}

}  // namespace

ShardChains FlatChains::Of(const Layout& l) {
  dims.clear();
  begin.assign(1, 0);
  for (const std::vector<int>& o : l.shard_order()) {
    dims.insert(dims.end(), o.begin(), o.end());
    begin.push_back(static_cast<int>(dims.size()));
  }
  return ShardChains{l.global_shape(), l.mesh().shape(), dims, begin};
}

bool Topology::IsIntra(int mesh_dim) const {
  if (!intra_dims.has_value()) return true;
  return std::find(intra_dims->begin(), intra_dims->end(), mesh_dim) != intra_dims->end();
}

std::string Topology::ToString() const {
  std::string out = "intra=";
  if (!intra_dims.has_value()) {
    out += "all";
  } else {
    for (size_t i = 0; i < intra_dims->size(); ++i) out += (i ? "," : "") + std::to_string((*intra_dims)[i]);
  }
  out += ";bw_intra=" + FormatDouble(bw_intra_gbps);
  out += ";bw_inter=" + FormatDouble(bw_inter_gbps);
  out += ";lat_intra=" + FormatDouble(lat_intra_us);
  out += ";lat_inter=" + FormatDouble(lat_inter_us);
  return out;
}

StatusOr<Topology> ParseTopology(std::string_view text) {
  Topology t;
  const std::string s = Trim(text);
  if (s.empty()) return t;
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad topology '" + std::string(text) + "': " + why +
                                " (e.g. intra=1,2;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10)");
  };
  for (const std::string& item : Split(s, ';')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("item '" + item + "' has no '='");
    const std::string key = item.substr(0, eq);
    const std::string val = item.substr(eq + 1);
    if (key == "intra") {
      if (val == "all") {
        t.intra_dims.reset();
        continue;
      }
      std::vector<int> dims;
      if (!val.empty()) {
        for (const std::string& d : Split(val, ',')) {
          int m = 0;
          auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), m);
          if (d.empty() || ec != std::errc() || p != d.data() + d.size() || m < 0) {
            return bad("mesh dim '" + d + "' in intra= is not a non-negative integer");
          }
          if (std::find(dims.begin(), dims.end(), m) != dims.end()) {
            return bad("mesh dim " + d + " repeated in intra=");
          }
          dims.push_back(m);
        }
      }
      t.intra_dims = std::move(dims);
      continue;
    }
    double v = 0;
    auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
    if (val.empty() || ec != std::errc() || p != val.data() + val.size() || !std::isfinite(v)) {
      return bad("value '" + val + "' of " + key + " is not a number");
    }
    if (key == "bw_intra" || key == "bw_inter") {
      if (!(v >= Topology::kMinBandwidthGBps)) {
        return bad(key + "=" + val + " must be > 0 and at least " + FormatDouble(Topology::kMinBandwidthGBps) +
                   " GB/s (1 kB/s)");
      }
      (key == "bw_intra" ? t.bw_intra_gbps : t.bw_inter_gbps) = v;
    } else if (key == "lat_intra" || key == "lat_inter") {
      if (v < 0) return bad(key + "=" + val + " must be >= 0");
      if (v > Topology::kMaxLatencyUs) {
        return bad(key + "=" + val + " must be at most " + FormatDouble(Topology::kMaxLatencyUs) + " us");
      }
      (key == "lat_intra" ? t.lat_intra_us : t.lat_inter_us) = v;
    } else {
      return bad("unknown key '" + key + "'; expected one of intra, bw_intra, bw_inter, lat_intra, lat_inter");
    }
  }
  return t;
}

Status Topology::Validate() const {
  for (const auto& [key, v] : {std::pair<const char*, double>{"bw_intra", bw_intra_gbps},
                               std::pair<const char*, double>{"bw_inter", bw_inter_gbps}}) {
    if (!(v >= kMinBandwidthGBps) || !std::isfinite(v)) {
      return InvalidArgumentError("topology " + std::string(key) + "=" + FormatDouble(v) +
                                  " must be > 0 and finite, at least " + FormatDouble(kMinBandwidthGBps) +
                                  " GB/s (1 kB/s)");
    }
  }
  for (const auto& [key, v] : {std::pair<const char*, double>{"lat_intra", lat_intra_us},
                               std::pair<const char*, double>{"lat_inter", lat_inter_us}}) {
    if (!(v >= 0) || !std::isfinite(v) || v > kMaxLatencyUs) {
      return InvalidArgumentError("topology " + std::string(key) + "=" + FormatDouble(v) +
                                  " must be >= 0 and finite, at most " + FormatDouble(kMaxLatencyUs) + " us");
    }
  }
  if (intra_dims.has_value()) {
    for (int d : *intra_dims) {
      if (d < 0) return InvalidArgumentError("topology intra= names mesh dim " + std::to_string(d) + ", which is negative");
    }
  }
  return Status();
}

Status Topology::ValidateForMesh(int mesh_ndim) const {
  MF_RETURN_IF_ERROR(Validate());
  if (intra_dims.has_value()) {
    for (int d : *intra_dims) {
      if (d >= mesh_ndim) {
        return InvalidArgumentError("topology intra= names mesh dim " + std::to_string(d) + " but the mesh has " +
                                    std::to_string(mesh_ndim) + (mesh_ndim == 1 ? " dim" : " dims") + " (0.." +
                                    std::to_string(mesh_ndim - 1) + ")");
      }
    }
  }
  return Status();
}

Link LinkOf(const Topology& topo, std::span<const int> mesh_dims) {
  Link l{0.0, std::numeric_limits<double>::infinity()};
  for (int d : mesh_dims) {
    l.alpha_us = std::max(l.alpha_us, topo.LatencyUs(d));
    l.bw_gbps = std::min(l.bw_gbps, topo.BandwidthGBps(d));
  }
  return l;
}

double AllGatherUs(int64_t g, int64_t bytes, Link link) {
  if (g <= 1) return 0;
  return static_cast<double>(g - 1) * link.alpha_us +
         BetaUs(static_cast<double>(g - 1) / static_cast<double>(g), bytes, link.bw_gbps);
}

double ReduceScatterUs(int64_t g, int64_t bytes, Link link) { return AllGatherUs(g, bytes, link); }

double AllReduceUs(int64_t g, int64_t bytes, Link link) {
  if (g <= 1) return 0;
  return 2.0 * static_cast<double>(g - 1) * link.alpha_us +
         BetaUs(2.0 * static_cast<double>(g - 1) / static_cast<double>(g), bytes, link.bw_gbps);
}

double AllToAllUs(int64_t g, int64_t bytes, Link link) { return AllGatherUs(g, bytes, link); }

int64_t AllReduceElementsReceived(int64_t count, int64_t g, int64_t p) {
  if (g <= 1) return 0;
  const int64_t chunk = (count + g - 1) / g;
  const int64_t b = std::min(count, p * chunk);
  const int64_t e = std::min(count, (p + 1) * chunk);
  const int64_t mine = e - b;
  return (g - 1) * mine + (count - mine);
}

StatusOr<StepModel> ModelStep(const PlanStep& step, DType dtype, const Topology& topo) {
  const DeviceMesh& mesh = step.from.mesh();
  const int64_t n = mesh.size();
  const int64_t esize = DTypeSize(dtype);
  StepModel out;
  out.bytes_per_rank.assign(static_cast<size_t>(n), 0);
  for (int d : step.mesh_dims) {
    if (d < 0 || d >= mesh.ndim()) {
      return OutOfRangeError("step " + std::string(StepKindName(step.kind)) + " names mesh dim " +
                             std::to_string(d) + " of a " + std::to_string(mesh.ndim()) + "-D mesh");
    }
  }
  if (IsLocalStep(step.kind)) return out;

  if (step.kind == StepKind::kSendRecv) {
    // DirectTransfers' transfers, found per destination from the overlapping source chunks and
    // summed in the same order (SendRecvCost).
    MF_ASSIGN_OR_RETURN(StepCost c, SendRecvCost(step.from, step.to, esize, topo, {}, &out.bytes_per_rank));
    out.us = c.us;
    return out;
  }

  // Every rank's box sizes and overlap from per-tensor-dim tables (ForEachGridPoint over every
  // coordinate, in mesh index order): no Box per rank.
  FlatChains fa, fb;
  const ShardChains from = fa.Of(step.from), to = fb.Of(step.to);
  int64_t g = 1;
  for (int d : step.mesh_dims) g *= mesh.dim_size(d);
  const Link link = LinkOf(topo, step.mesh_dims);
  int64_t max_from = 0, max_to = 0;
  CellScratch& s = PerThread<CellScratch>();
  AllCoordinates(mesh, s);
  int64_t i = 0;
  const StepKind kind = step.kind;
  ForEachGridPoint(from, to, s, [&](int64_t fe, int64_t te, int64_t held) {
    max_from = std::max(max_from, fe);
    max_to = std::max(max_to, te);
    int64_t elems = 0;
    switch (kind) {
      case StepKind::kAllGather:
      case StepKind::kAllToAll:
        // all_to_all: the group's source boxes tile the gathered box, which holds every member's
        // target box: the sum over the other members q of |from(q) ∩ to(i)| is |to(i)| - |from(i) ∩ to(i)|.
        elems = te - held;
        break;
      case StepKind::kReduceScatter:
        elems = (g - 1) * te;
        break;
      case StepKind::kAllReduce: {
        // Position in the group: row-major over mesh_dims in the order given.
        int64_t pos = 0;
        for (int d : step.mesh_dims) pos = pos * mesh.dim_size(d) + static_cast<int64_t>(s.idx[d]);
        elems = AllReduceElementsReceived(fe, g, pos);
        break;
      }
      default:
        break;
    }
    out.bytes_per_rank[i++] = elems * esize;
  });
  switch (step.kind) {
    case StepKind::kAllGather:
      out.us = AllGatherUs(g, max_to * esize, link);
      break;
    case StepKind::kReduceScatter:
      out.us = ReduceScatterUs(g, max_from * esize, link);
      break;
    case StepKind::kAllReduce:
      out.us = AllReduceUs(g, max_from * esize, link);
      break;
    case StepKind::kAllToAll:
      out.us = AllToAllUs(g, std::max(max_from, max_to) * esize, link);
      break;
    default:
      break;
  }
  return out;
}

int64_t MaxLocalElements(const Layout& layout) {
  FlatChains f;
  return MaxLocalElements(f.Of(layout));
}

StepCost SendRecvStepCost(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                          const Topology& topo, bool first_rank_only) {
  return SendRecvCostChains(mesh, from, to, esize, topo, first_rank_only ? OriginOnly() : std::span<const int64_t>(),
                            nullptr);
}

std::optional<StepCost> SendRecvStepCostWithin(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to,
                                               int64_t esize, const Topology& topo, int64_t limit_units) {
  bool gave_up = false;
  const StepCost c = SendRecvCostChains(mesh, from, to, esize, topo, {}, nullptr, limit_units, &gave_up);
  if (gave_up || CostUnits(c.us) > limit_units) return std::nullopt;
  return c;
}

int64_t SendRecvPricedDestinations(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to) {
  std::vector<char> sharded(static_cast<size_t>(mesh.ndim()), 0);
  for (int m : from.dims) sharded[m] = 1;
  int64_t h_count = 1;
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (!sharded[m]) h_count *= mesh.dim_size(m);
  }
  const int64_t sub = TranslationClasses(mesh, from, to, h_count, PerThread<SendRecvScratch>());
  return sub > 0 ? sub : mesh.size();
}

double SendRecvIncomingUs(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                          const Topology& topo, std::span<const int64_t> dst) {
  if (dst.empty()) return 0.0;
  return SendRecvCostChains(mesh, from, to, esize, topo, dst, nullptr).us;
}

double SendRecvOutgoingUs(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                          const Topology& topo, int64_t src) {
  return SendRecvOutgoingUsChains(mesh, from, to, esize, topo, src);
}

double SendRecvFirstRankBoundUs(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to,
                                int64_t esize, const Topology& topo) {
  const int tr = from.tensor_rank();
  if (tr == 0) return 0.0;  // a scalar: nothing moves
  FirstRankScratch& sc = PerThread<FirstRankScratch>();
  sc.links.Build(mesh, topo);  // the bits of the mesh dims that can differ, and their links
  const std::vector<int>& bit = sc.links.bit;
  // Per tensor dim, the overlapping source chunks of the origin's target interval, one entry per
  // mask (merged).
  std::vector<std::vector<MaskGroup>>& groups = sc.groups;
  if (groups.size() < static_cast<size_t>(tr)) groups.resize(static_cast<size_t>(tr));
  int64_t combos = 1;
  constexpr int64_t kMaxCombos = 4096;  // past this many mask combinations, price the rank exactly
  for (int t = 0; t < tr; ++t) {
    Interval target{0, to.shape[t]};
    for (int m : to.chain(t)) target = ChunkOf(target, to.mesh_shape[m], 0);
    std::vector<MaskGroup>& g = groups[t];
    g.clear();
    OverlapGroups(from.mesh_shape, from.chain(t), bit, 0, Interval{0, from.shape[t]}, target, 0, g);
    if (g.empty()) return 0.0;  // the origin receives nothing
    const bool cut = g.size() > kMaxGroups;  // OverlapGroups stopped early: g is incomplete
    std::sort(g.begin(), g.end(), [](const MaskGroup& a, const MaskGroup& b) { return a.mask < b.mask; });
    size_t w = 0;
    for (size_t r = 1; r < g.size(); ++r) {
      if (g[r].mask == g[w].mask) {
        g[w].count += g[r].count;
        g[w].len += g[r].len;
      } else {
        g[++w] = g[r];
      }
    }
    g.resize(w + 1);
    combos *= static_cast<int64_t>(g.size());
    if (cut || combos > kMaxCombos) {
      return SendRecvCostChains(mesh, from, to, esize, topo, OriginOnly(), nullptr).us;
    }
  }
  // Every combination of one group per tensor dim: its transfers' count, bytes and common link.
  // The origin takes every block from its own Replicate coordinates (its holder), so a transfer's
  // link is that of its source block's mask; mask 0 is the origin's own block.
  double sum = 0;
  int64_t transfers = 0;
  std::vector<size_t>& idx = sc.idx;
  idx.assign(static_cast<size_t>(tr), 0);
  while (true) {
    uint64_t mask = 0;
    int64_t count = 1, len = 1;
    for (int t = 0; t < tr; ++t) {
      const MaskGroup& g = groups[t][idx[t]];
      mask |= g.mask;
      count *= g.count;
      len *= g.len;
    }
    if (mask != 0) {
      const Link link = sc.links.Of(mask);
      sum += static_cast<double>(count) * link.alpha_us + BetaUs(1.0, len * esize, link.bw_gbps);
      transfers += count;
    }
    int t = 0;
    for (; t < tr; ++t) {
      if (++idx[t] < groups[t].size()) break;
      idx[t] = 0;
    }
    if (t == tr) break;
  }
  // The exact time sums the same terms one transfer at a time in doubles, each term and each sum
  // rounded to 2^-53 relative: it is at least the real sum times 1 - (transfers + 3) * 2^-53 (to
  // first order), and `sum` (one term per combination) at most the real sum times
  // 1 + (combos + 4) * 2^-53; the slack below is 8 times the two together.
  const double slack = static_cast<double>(transfers + combos + 8) * 0x1p-50;
  return slack >= 1.0 ? 0.0 : sum * (1.0 - slack);
}

std::vector<int64_t> SendRecvProbeRanks(const DeviceMesh& mesh) {
  const int nd = mesh.ndim();
  const std::vector<int64_t>& stride = mesh.strides();
  std::vector<int64_t> wide;  // strides of the mesh dims of size >= 2
  for (int d = 0; d < nd; ++d) {
    if (mesh.dim_size(d) >= 2) wide.push_back(stride[d]);
  }
  std::vector<int64_t> probes;
  constexpr size_t kCornerDims = 4;      // every corner up to 2^4 = 16 ranks
  constexpr int64_t kProbeFraction = 8;  // probe at most 1/8 of the ranks
  if (wide.size() <= kCornerDims) {
    for (uint32_t bits = 0; bits < (uint32_t{1} << wide.size()); ++bits) {
      int64_t i = 0;
      for (size_t j = 0; j < wide.size(); ++j) i += (bits >> j & 1) ? wide[j] : 0;
      probes.push_back(i);
    }
  } else {
    probes.push_back(0);
    int64_t all = 0;
    for (int64_t w : wide) {
      probes.push_back(w);
      all += w;
    }
    probes.push_back(all);
  }
  probes.push_back(mesh.size() - 1);
  if (mesh.size() < kProbeFraction * static_cast<int64_t>(probes.size())) return {};
  std::sort(probes.begin(), probes.end());
  probes.erase(std::unique(probes.begin(), probes.end()), probes.end());
  return probes;
}

double SendRecvProbeUs(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                       const Topology& topo, std::span<const int64_t> probes) {
  double us = SendRecvIncomingUs(mesh, from, to, esize, topo, probes);
  for (int64_t i : probes) us = std::max(us, SendRecvOutgoingUs(mesh, from, to, esize, topo, i));
  return us;
}

int64_t MaxLocalElements(const ShardChains& l) {
  int64_t e = 1;
  for (int t = 0; t < l.tensor_rank(); ++t) {
    Interval iv{0, l.shape[t]};
    for (int m : l.chain(t)) iv = ChunkOf(iv, l.mesh_shape[m], 0);
    e *= iv.size();
  }
  return e;
}

StepCost CollectiveStepCost(StepKind kind, std::span<const int> mesh_dims, const ShardChains& from,
                            const ShardChains& to, int64_t esize, const Topology& topo, bool time_only) {
  if (IsLocalStep(kind) || kind == StepKind::kSendRecv) return StepCost{};
  return CollectiveStepCost(kind, mesh_dims, from, to, StepExtents{MaxLocalElements(from), MaxLocalElements(to)},
                            esize, topo, time_only);
}

StepCost CollectiveStepCost(StepKind kind, std::span<const int> mesh_dims, const ShardChains& from,
                            const ShardChains& to, StepExtents extents, int64_t esize, const Topology& topo,
                            bool time_only) {
  StepCost out;
  if (IsLocalStep(kind) || kind == StepKind::kSendRecv) return out;
  int64_t g = 1;
  for (int d : mesh_dims) g *= from.mesh_shape[d];
  const Link link = LinkOf(topo, mesh_dims);
  const int64_t max_from = extents.from;
  const int64_t max_to = extents.to;
  switch (kind) {
    case StepKind::kAllGather:
      out.max_bytes_per_rank = (time_only ? 0 : MaxElementsNotHeld(from, to) * esize);
      out.us = AllGatherUs(g, max_to * esize, link);
      break;
    case StepKind::kReduceScatter:
      out.max_bytes_per_rank = (g - 1) * max_to * esize;
      out.us = ReduceScatterUs(g, max_from * esize, link);
      break;
    case StepKind::kAllReduce:
      // count + (g-2)*|chunk p| grows with count and is largest at p = 0; the rank at coordinate
      // (0,...,0) has both the largest count and group position 0.
      out.max_bytes_per_rank = AllReduceElementsReceived(max_from, g, 0) * esize;
      out.us = AllReduceUs(g, max_from * esize, link);
      break;
    case StepKind::kAllToAll:
      // The group's source boxes tile the gathered box, which holds every member's target box:
      // the elements received from the others are those of the target box not in the own source box.
      out.max_bytes_per_rank = (time_only ? 0 : MaxElementsNotHeld(from, to) * esize);
      out.us = AllToAllUs(g, std::max(max_from, max_to) * esize, link);
      break;
    default:
      break;
  }
  return out;
}

StatusOr<StepCost> ModelStepCost(const PlanStep& step, DType dtype, const Topology& topo) {
  const DeviceMesh& mesh = step.from.mesh();
  const int64_t esize = DTypeSize(dtype);
  for (int d : step.mesh_dims) {
    if (d < 0 || d >= mesh.ndim()) {
      return OutOfRangeError("step " + std::string(StepKindName(step.kind)) + " names mesh dim " +
                             std::to_string(d) + " of a " + std::to_string(mesh.ndim()) + "-D mesh");
    }
  }
  if (IsLocalStep(step.kind)) return StepCost{};
  if (step.kind == StepKind::kSendRecv) return SendRecvCost(step.from, step.to, esize, topo);
  FlatChains a, b;
  return CollectiveStepCost(step.kind, step.mesh_dims, a.Of(step.from), b.Of(step.to), esize, topo);
}

StatusOr<StepCost> SendRecvFirstRankUs(const PlanStep& step, DType dtype, const Topology& topo) {
  if (step.kind != StepKind::kSendRecv) {
    return InvalidArgumentError("SendRecvFirstRankUs needs a send_recv step, got " +
                                std::string(StepKindName(step.kind)));
  }
  return SendRecvCost(step.from, step.to, DTypeSize(dtype), topo, OriginOnly());
}

namespace {

Status FillPlanCostsImpl(Plan& plan, const Topology& topo, bool keep_send_recv_us) {
  const DeviceMesh& mesh = plan.from.mesh();
  const size_t n = static_cast<size_t>(mesh.size());
  const int64_t esize = DTypeSize(plan.dtype);
  plan.bytes_received_per_rank.assign(n, 0);
  plan.modelled_us = 0;
  // Max over ranks of |target box| - |source box ∩ target box| of the whole plan, when a send_recv
  // step goes from the plan's source to its target (-1: not known yet); the lower bound below.
  int64_t direct_max = -1;
  for (PlanStep& step : plan.steps) {
    if (keep_send_recv_us && step.kind == StepKind::kSendRecv) {
      // The search priced it with ModelStepCost (ModelStep's us); every rank receives the
      // elements of its target box not in its source box (planner/direct.h), added straight into
      // the plan's per-rank bytes.
      FlatChains fa, fb;
      CellScratch& s = PerThread<CellScratch>();
      AllCoordinates(mesh, s);
      int64_t* received = plan.bytes_received_per_rank.data();
      int64_t most = 0;
      ForEachGridPoint(fa.Of(step.from), fb.Of(step.to), s, [&](int64_t, int64_t te, int64_t held) {
        *received++ += (te - held) * esize;
        most = std::max(most, te - held);
      });
      if (step.from == plan.from && step.to == plan.to) direct_max = most;
      step.bytes_per_rank = most * esize;
      plan.modelled_us += step.modelled_us;
      continue;
    }
    MF_ASSIGN_OR_RETURN(const StepModel m, ModelStep(step, plan.dtype, topo));
    step.modelled_us = m.us;
    step.bytes_per_rank = 0;
    for (size_t i = 0; i < n; ++i) {
      step.bytes_per_rank = std::max(step.bytes_per_rank, m.bytes_per_rank[i]);
      plan.bytes_received_per_rank[i] += m.bytes_per_rank[i];
    }
    plan.modelled_us += m.us;
  }
  plan.max_bytes_received_per_rank = 0;
  for (int64_t b : plan.bytes_received_per_rank) {
    plan.max_bytes_received_per_rank = std::max(plan.max_bytes_received_per_rank, b);
  }
  plan.lower_bound_bytes_per_rank.reset();
  if (!plan.from.HasPartial()) {
    int64_t lb = 0;
    if (!plan.to.HasPartial() && direct_max >= 0) {
      lb = direct_max;  // the same pass as below, done for the send_recv step
    } else if (!plan.to.HasPartial()) {
      // LowerBoundElementsPerRank without Partial target dims: the elements of each rank's
      // target box not in its source box.
      FlatChains fa, fb;
      CellScratch& s = PerThread<CellScratch>();
      AllCoordinates(mesh, s);
      ForEachGridPoint(fa.Of(plan.from), fb.Of(plan.to), s,
                       [&](int64_t, int64_t te, int64_t held) { lb = std::max(lb, te - held); });
    } else {
      for (int64_t e : LowerBoundElementsPerRank(plan.from, plan.to)) lb = std::max(lb, e);
    }
    plan.lower_bound_bytes_per_rank = lb * esize;
  }
  return Status();
}

}  // namespace

Status FillPlanCosts(Plan& plan, const Topology& topo) { return FillPlanCostsImpl(plan, topo, false); }

Status FillPlanCostsOfSearch(Plan& plan, const Topology& topo) { return FillPlanCostsImpl(plan, topo, true); }

int64_t CostUnits(double us) {
  // Saturates: huge modelled times (slow links, huge tensors) must not overflow the conversion.
  constexpr double kMaxUnits = 4.0e18;  // below INT64_MAX, with headroom for sums
  const double ps = us * 1e6;
  if (!(ps < kMaxUnits)) return static_cast<int64_t>(kMaxUnits);
  if (ps <= 0) return 0;
  return std::llround(ps);
}

}  // namespace meshflow
