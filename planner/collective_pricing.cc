#include "meshflow/planner/collective_pricing.h"

#include <algorithm>
#include <vector>

namespace meshflow {
namespace {

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

}  // namespace

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

void TabulateTensorDim(const ShardChains& from, const ShardChains& to, int t, CellScratch& s) {
  const int nd = static_cast<int>(from.mesh_shape.size());
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

void AllCoordinates(const DeviceMesh& mesh, CellScratch& s) {
  if (s.grid.size() < static_cast<size_t>(mesh.ndim())) s.grid.resize(static_cast<size_t>(mesh.ndim()));
  for (int m = 0; m < mesh.ndim(); ++m) {
    s.grid[m].resize(static_cast<size_t>(mesh.dim_size(m)));
    for (int64_t c = 0; c < mesh.dim_size(m); ++c) s.grid[m][c] = c;
  }
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

}  // namespace meshflow
