#include "meshflow/planner/send_recv_pricing.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "meshflow/dtensor/box.h"
#include "meshflow/planner/collective_pricing.h"
#include "meshflow/planner/direct.h"
#include "meshflow/planner/step_cost.h"

namespace meshflow {
namespace {

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
//
// One call is one SendRecvPass: Run() sets up the holders, link memo, destinations, overlap stores
// and odometer order, then per destination moves to it, updates each tensor dim's overlaps and
// masks, finds its holder, collects its transfers and adds them to the incoming and outgoing sums.
struct SendRecvPass {
  SendRecvPass(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
               const Topology& topo, std::span<const int64_t> only_dst, std::vector<int64_t>* bytes_per_rank,
               int64_t limit_units, bool* gave_up)
      : mesh(mesh), from(from), to(to), esize(esize), topo(topo), only_dst(only_dst),
        bytes_per_rank(bytes_per_rank), limit_units(limit_units), gave_up(gave_up), nd(mesh.ndim()),
        tr(from.tensor_rank()), n(mesh.size()), sc(PerThread<SendRecvScratch>()),
        stride(mesh.strides()),  // mesh index = sum coord * stride
        some(!only_dst.empty()),  // only the destinations in only_dst, not every one
        keep(!some) {}           // keys are kept only when every destination is priced

  StepCost Run();

  void FindHolders();
  void BuildLinkMemo();
  void ChooseDestinations();
  void ResetOverlapStores();
  void OrderTensorDims();
  void ResetMaskState();
  void MoveToDestination(int64_t k);
  bool UpdateOverlaps(int t);
  void FindHolderPart(int64_t i);
  int64_t CollectTransfers();
  bool Accumulate(int64_t k, int64_t i, int64_t bytes_in);
  StepCost Result() const;

  uint64_t Differ(int m, bool d) const { return d ? uint64_t{1} << sc.links.bit[m] : uint64_t{0}; }

  const DeviceMesh& mesh;
  const ShardChains& from;
  const ShardChains& to;
  const int64_t esize;
  const Topology& topo;
  const std::span<const int64_t> only_dst;
  std::vector<int64_t>* const bytes_per_rank;
  const int64_t limit_units;
  bool* const gave_up;
  const int nd;
  const int tr;
  const int64_t n;
  SendRecvScratch& sc;
  const std::vector<int64_t>& stride;
  const bool some;
  const bool keep;
  int64_t h_count = 1;     // the Replicate holder count (FindHolders)
  bool table = false;      // the memo is indexed by link mask (BuildLinkMemo)
  int64_t count = 0;       // destinations priced (ChooseDestinations)
  int64_t max_bytes = 0;
  double running = 0;      // max of the finished destinations' incoming and the partial outgoing times
  double checked = -1;     // the last value of running checked against limit_units
  int64_t grid_index = 0;  // the grid point's mesh index (its first point is the origin)
  int64_t rep_index = 0;   // the holder's part of the source index and mask (FindHolderPart)
  uint64_t rep_mask = 0;
};

// Marks the source's sharded mesh dims; its Replicate dims (ascending) and their row-major holder
// spread.
void SendRecvPass::FindHolders() {
  std::vector<char>& sharded = sc.sharded;
  sharded.assign(static_cast<size_t>(nd), 0);
  for (int m : from.dims) sharded[m] = 1;
  std::vector<int>& rep = sc.rep;
  rep.clear();
  h_count = 1;
  for (int m = 0; m < nd; ++m) {
    if (!sharded[m]) {
      rep.push_back(m);
      h_count *= mesh.dim_size(m);
    }
  }
}

// Masks of differing mesh dims (MaskLinks), and per link mask the bytes and time of the last
// transfer priced on it (most transfers of a step repeat a few sizes on a few links): the same
// double without the link walk and the division.
void SendRecvPass::BuildLinkMemo() {
  MaskLinks& links = sc.links;
  links.Build(mesh, topo);
  const int nb = links.bits();
  constexpr int kMaskDims = 12;  // the memo below is indexed by mask up to this many bits
  table = nb <= kMaskDims;
  if (table) {
    sc.memo_bytes.assign(size_t{1} << nb, -1);
    sc.memo_us.resize(size_t{1} << nb);    // read only where memo_bytes is not -1
    sc.memo_link.resize(size_t{1} << nb);  // the same
  }
}

// The destinations: those in only_dst, or the points of the grid sc.visit in mesh index order:
// every rank, or, without a byte vector to fill, one rank per translation class
// (TranslationClasses). Zeroes their incoming sums and every rank's outgoing sum.
void SendRecvPass::ChooseDestinations() {
  count = static_cast<int64_t>(only_dst.size());
  if (!some) {
    const int64_t sub = bytes_per_rank != nullptr ? 0 : TranslationClasses(mesh, from, to, h_count, sc);
    if (sub == 0) VisitEveryRank(mesh, sc);
    count = sub > 0 ? sub : n;
  }
  sc.in_us.assign(static_cast<size_t>(count), 0.0);  // per destination priced (the k-th)
  sc.out_us.assign(some ? 0 : static_cast<size_t>(n), 0.0);
}

// Per tensor dim, the non-empty source chunks overlapping the destination's interval: overlap
// lengths and chain coordinates (flat, chain order) from ChunksOverlapping, and per chunk its
// part of the source's mesh index; the interval is a function of the destination's coordinates
// on the target chain (the key, row-major over that chain), so each interval's list is computed
// once per call and kept (store_*, slot). over_mask: per chunk of the current list, its
// differing-dims mask for the current destination.
void SendRecvPass::ResetOverlapStores() {
  std::vector<std::vector<int64_t>>& store_len = sc.store_len;
  std::vector<std::vector<int64_t>>& store_coords = sc.store_coords;
  std::vector<std::vector<int64_t>>& store_index = sc.store_index;
  std::vector<std::vector<int64_t>>& slot = sc.slot;
  if (store_len.size() < static_cast<size_t>(tr)) {
    store_len.resize(static_cast<size_t>(tr));
    store_coords.resize(static_cast<size_t>(tr));
    store_index.resize(static_cast<size_t>(tr));
    slot.resize(static_cast<size_t>(tr));
    sc.over_mask.resize(static_cast<size_t>(tr));
  }
  for (int t = 0; t < tr; ++t) {
    store_len[t].clear();
    store_coords[t].clear();
    store_index[t].clear();
    int64_t keys = 1;
    for (int m : to.chain(t)) keys *= to.mesh_shape[m];
    slot[t].assign(keep ? 2 * static_cast<size_t>(keys) : 0, -1);
  }
  sc.last_key.assign(static_cast<size_t>(tr), -1);
  sc.len_p.assign(static_cast<size_t>(tr), nullptr);
  sc.index_p.assign(static_cast<size_t>(tr), nullptr);
  sc.cur_begin.assign(static_cast<size_t>(tr), 0);
  sc.cur_size.assign(static_cast<size_t>(tr), 0);
  sc.idx.assign(static_cast<size_t>(tr), 0);
}

// The odometer's order: tensor dims whose chains hold the innermost mesh dims vary fastest, so
// that the sources usually come in index order and need no sort.
void SendRecvPass::OrderTensorDims() {
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
}

// The destination's coordinates (all 0: the origin) and the grid odometer. A tensor dim's masks
// depend on the destination's coordinates on its chain's mesh dims: they are recomputed when one
// of those (or the dim's overlaps) changed.
void SendRecvPass::ResetMaskState() {
  sc.c.assign(static_cast<size_t>(nd), 0);
  std::vector<int>& last_dim = sc.last_dim;  // per tensor dim, its chain's highest mesh dim (-1: none)
  last_dim.assign(static_cast<size_t>(tr), -1);
  sc.mask_ok.assign(static_cast<size_t>(tr), 0);
  for (int t = 0; t < tr; ++t) {
    for (int m : from.chain(t)) last_dim[t] = std::max(last_dim[t], m);
  }
  sc.visit_pos.assign(static_cast<size_t>(nd), 0);
  grid_index = 0;
}

// Moves sc.c to the k-th destination's coordinates and clears the masks of the tensor dims whose
// chains changed coordinates.
void SendRecvPass::MoveToDestination(int64_t k) {
  std::vector<int64_t>& c = sc.c;
  std::vector<char>& mask_ok = sc.mask_ok;
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
    std::vector<size_t>& visit_pos = sc.visit_pos;
    int64_t grid_index = this->grid_index;  // a local in the loop (stores to c cannot alias it)
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
    this->grid_index = grid_index;
    for (int t = 0; t < tr; ++t) {
      if (sc.last_dim[t] >= first_changed) mask_ok[t] = 0;
    }
  }
}

// Tensor dim t's overlapping source chunks for the current destination (reused from the stores
// when its target interval was met before) and their masks; false when none overlaps (the
// destination receives nothing).
bool SendRecvPass::UpdateOverlaps(int t) {
  const std::vector<int64_t>& c = sc.c;
  std::vector<int64_t>& cur_begin = sc.cur_begin;
  std::vector<int64_t>& cur_size = sc.cur_size;
  std::vector<std::vector<int64_t>>& store_len = sc.store_len;
  std::vector<std::vector<int64_t>>& store_coords = sc.store_coords;
  std::vector<std::vector<int64_t>>& slot = sc.slot;
  std::vector<char>& mask_ok = sc.mask_ok;
  const std::span<const int> chain = from.chain(t);
  int64_t key = 0;
  for (int m : to.chain(t)) key = key * to.mesh_shape[m] + c[m];
  // Neighbouring ranks often share a tensor dim's target interval: reuse its overlaps.
  if (key != sc.last_key[t]) {
    sc.last_key[t] = key;
    mask_ok[t] = 0;
    if (keep && slot[t][2 * key] >= 0) {
      cur_begin[t] = slot[t][2 * key];
      cur_size[t] = slot[t][2 * key + 1];
    } else {
      Interval target{0, to.shape[t]};
      for (int m : to.chain(t)) target = ChunkOf(target, to.mesh_shape[m], c[m]);
      cur_begin[t] = static_cast<int64_t>(store_len[t].size());
      sc.cc.assign(chain.size(), 0);
      ChunksOverlapping(from.mesh_shape, chain, 0, Interval{0, from.shape[t]}, target, sc.cc, store_len[t],
                        store_coords[t]);
      for (size_t e = static_cast<size_t>(cur_begin[t]); e < store_len[t].size(); ++e) {
        const int64_t* pc = store_coords[t].data() + e * chain.size();
        int64_t index = 0;
        for (size_t j = 0; j < chain.size(); ++j) index += pc[j] * stride[chain[j]];
        sc.store_index[t].push_back(index);
      }
      cur_size[t] = static_cast<int64_t>(store_len[t].size()) - cur_begin[t];
      if (keep) {
        slot[t][2 * key] = cur_begin[t];
        slot[t][2 * key + 1] = cur_size[t];
      }
    }
    // Only this branch changes the list (or reallocates store_*[t]).
    sc.len_p[t] = store_len[t].data() + cur_begin[t];
    sc.index_p[t] = sc.store_index[t].data() + cur_begin[t];
  }
  if (cur_size[t] <= 0) return false;
  if (mask_ok[t]) return true;
  mask_ok[t] = 1;
  std::vector<uint64_t>& over_mask = sc.over_mask[t];
  over_mask.resize(static_cast<size_t>(cur_size[t]));
  for (size_t e = 0; e < over_mask.size(); ++e) {
    const int64_t* pc = store_coords[t].data() + (static_cast<size_t>(cur_begin[t]) + e) * chain.size();
    uint64_t mask = 0;
    for (size_t j = 0; j < chain.size(); ++j) mask |= Differ(chain[j], pc[j] != c[chain[j]]);
    over_mask[e] = mask;
  }
  return true;
}

// Holder coordinates on the Replicate dims of the destination at mesh index i: row-major over them
// of i % h_count; their part of the index and of the mask.
void SendRecvPass::FindHolderPart(int64_t i) {
  rep_index = 0;
  rep_mask = 0;
  int64_t rem = i % h_count;
  for (int j = static_cast<int>(sc.rep.size()) - 1; j >= 0; --j) {
    const int m = sc.rep[j];
    const int64_t h = rem % mesh.dim_size(m);
    rem /= mesh.dim_size(m);
    rep_index += h * stride[m];
    rep_mask |= Differ(m, h != sc.c[m]);
  }
}

// The current destination's transfers into sc.mine, in source rank order (sorted when the
// odometer did not produce them in it); returns their bytes.
int64_t SendRecvPass::CollectTransfers() {
  std::vector<SendRecvIn>& mine = sc.mine;
  std::vector<int64_t>& memo_bytes = sc.memo_bytes;
  std::vector<double>& memo_us = sc.memo_us;
  std::vector<Link>& memo_link = sc.memo_link;
  const MaskLinks& links = sc.links;
  // Locals, not members, in the loops below (stores through the buffers cannot alias them).
  const bool table = this->table;
  const uint64_t rep_mask = this->rep_mask;
  const int64_t rep_index = this->rep_index;
  const int64_t esize = this->esize;
  const int tr = this->tr;
  const DeviceMesh& mesh = this->mesh;
  auto link_of = [&](uint64_t mask) { return links.Of(mask); };
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
    const std::vector<int>& fastest = sc.fastest;
    const std::vector<const int64_t*>& len_p = sc.len_p;
    const std::vector<const int64_t*>& index_p = sc.index_p;
    const std::vector<std::vector<uint64_t>>& over_mask = sc.over_mask;
    const std::vector<int64_t>& cur_size = sc.cur_size;
    std::vector<size_t>& idx = sc.idx;
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
  return bytes_in;
}

// Adds the k-th destination's transfers (mesh index i) to its incoming and their sources'
// outgoing sums; false when the time provably exceeds limit_units (then *gave_up is set).
bool SendRecvPass::Accumulate(int64_t k, int64_t i, int64_t bytes_in) {
  std::vector<double>& in_us = sc.in_us;
  std::vector<double>& out_us = sc.out_us;
  for (const SendRecvIn& x : sc.mine) {
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
      return false;
    }
  }
  return true;
}

// The step's time and busiest rank's bytes from the finished sums.
StepCost SendRecvPass::Result() const {
  StepCost out;
  out.max_bytes_per_rank = max_bytes;
  if (some) {
    for (double x : sc.in_us) out.us = std::max(out.us, x);
    return out;
  }
  // Every source of a priced destination is priced itself (TranslationClasses), and out_us is 0
  // for the ranks outside the sub-grid.
  for (int64_t k = 0; k < count; ++k) out.us = std::max(out.us, sc.in_us[k]);
  for (int64_t i = 0; i < n; ++i) out.us = std::max(out.us, sc.out_us[i]);
  return out;
}

StepCost SendRecvPass::Run() {
  FindHolders();
  BuildLinkMemo();
  ChooseDestinations();
  ResetOverlapStores();
  OrderTensorDims();
  ResetMaskState();
  for (int64_t k = 0; k < count; ++k) {
    MoveToDestination(k);
    const int64_t i = some ? only_dst[static_cast<size_t>(k)] : grid_index;  // the destination's mesh index
    bool any = true;
    for (int t = 0; t < tr && any; ++t) any = UpdateOverlaps(t);
    if (!any) continue;
    FindHolderPart(i);
    const int64_t bytes_in = CollectTransfers();
    if (!Accumulate(k, i, bytes_in)) return StepCost{};
  }
  return Result();
}

// The send_recv pricing pass (SendRecvPass above) of one step.
StepCost SendRecvCostChains(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                            const Topology& topo, std::span<const int64_t> only_dst,
                            std::vector<int64_t>* bytes_per_rank,
                            int64_t limit_units = std::numeric_limits<int64_t>::max(), bool* gave_up = nullptr) {
  SendRecvPass pass(mesh, from, to, esize, topo, only_dst, bytes_per_rank, limit_units, gave_up);
  return pass.Run();
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

// The holder count of the source's blocks and this source's position among its block's holders.
struct HolderPosition {
  int64_t count = 1;
  int64_t pos = 0;
};

// SendRecvOutgoingUsChains' setup: the source's coordinates (s.sc), the mesh dims in some chain of
// each layout (s.in_from, s.in_to) and those in no target chain (s.free_dims), and its holder
// position.
HolderPosition PlaceSource(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t src,
                           OutgoingScratch& s) {
  const int nd = mesh.ndim();
  std::vector<int64_t>& sc = s.sc;
  sc.resize(static_cast<size_t>(nd));
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
  return HolderPosition{h_count, h_pos};
}

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
  dc.resize(static_cast<size_t>(nd));
  const auto [h_count, h_pos] = PlaceSource(mesh, from, to, src, s);
  const std::vector<char>& in_from = s.in_from;
  const std::vector<int>& free_dims = s.free_dims;  // mesh dims in no target chain: every coordinate receives
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

// The destination list of the origin alone (mesh index 0), for SendRecvCostChains' only_dst.
constexpr int64_t kZero = 0;

}  // namespace

std::span<const int64_t> OriginOnly() { return std::span<const int64_t>(&kZero, 1); }

// ModelStep's send_recv time and busiest rank's bytes (see SendRecvCostChains).
StatusOr<StepCost> SendRecvCost(const Layout& from, const Layout& to, int64_t esize, const Topology& topo,
                                std::span<const int64_t> only_dst, std::vector<int64_t>* bytes_per_rank) {
  if (!(from.mesh() == to.mesh()) || from.global_shape() != to.global_shape() || from.HasPartial()) {
    return DirectTransfers(from, to).status();
  }
  FlatChains a, b;
  return SendRecvCostChains(from.mesh(), a.Of(from), b.Of(to), esize, topo, only_dst, bytes_per_rank);
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

}  // namespace meshflow
