// Planner-internal (target //planner:collective_pricing, visible to //planner only): the pricing
// of collective steps (all_gather, reduce_scatter, all_reduce, all_to_all) on shard chains, and the
// per-tensor-dim grid tables it and the plan cost filling (planner/cost_model.cc) walk: per tensor
// dim, the box lengths and overlaps of two layouts tabulated over the grid positions of the mesh
// dims its chains use (ForEachGridPoint), and the torch.chunk length cells (SplitLengths).
#ifndef MESHFLOW_PLANNER_COLLECTIVE_PRICING_H_
#define MESHFLOW_PLANNER_COLLECTIVE_PRICING_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/chains.h"
#include "meshflow/planner/plan.h"
#include "meshflow/planner/step_cost.h"
#include "meshflow/planner/topology.h"

namespace meshflow {

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

// The intervals of tensor dim t's chunks along `chain` (torch.chunk at every level), one per
// combination of the chain's grid positions, row-major in chain order (the last level fastest);
// step[m] is mesh dim m's stride in that order (0 for dims not in the chain).
void ChainIntervals(int64_t extent, std::span<const int64_t> mesh_shape, std::span<const int> chain,
                    const std::vector<std::vector<int64_t>>& grid, std::vector<Interval>& out,
                    std::vector<Interval>& next, std::vector<int64_t>& step);

// Tensor dim t's factor table for ForEachGridPoint: s.table[t] holds (from length, to length,
// overlap) per grid position of the mesh dims its two chains use (row-major, the last fastest),
// and s.stride[t * mesh ndim + m] mesh dim m's stride in it (0 for the other dims).
void TabulateTensorDim(const ShardChains& from, const ShardChains& to, int t, CellScratch& s);

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
  for (int t = 0; t < tr; ++t) TabulateTensorDim(from, to, t, s);
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
void AllCoordinates(const DeviceMesh& mesh, CellScratch& s);

// ModelStepCost of a collective step (all_gather, reduce_scatter, all_reduce, all_to_all; local
// kinds cost 0) from its kind, mesh dims and the two layouts' chains: the same doubles and bytes
// as ModelStepCost (which calls it). Precondition: valid mesh dims; not send_recv. No allocation
// after the first calls on a thread (scratch buffers are reused).
// With time_only, max_bytes_per_rank is left 0 (the time needs no per-rank count; the search
// skips the count for edges whose time alone already loses).
StepCost CollectiveStepCost(StepKind kind, std::span<const int> mesh_dims, const ShardChains& from,
                            const ShardChains& to, int64_t esize, const Topology& topo, bool time_only = false);

// CollectiveStepCost given the sides' MaxLocalElements (`extents` must be those of `from` and
// `to`): the same doubles and bytes.
StepCost CollectiveStepCost(StepKind kind, std::span<const int> mesh_dims, const ShardChains& from,
                            const ShardChains& to, StepExtents extents, int64_t esize, const Topology& topo,
                            bool time_only = false);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_COLLECTIVE_PRICING_H_
