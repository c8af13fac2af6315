// Alpha-beta step formulas of the cost model: the link of a group of mesh dims on a Topology, the
// time of one collective over g ranks, the bytes an all-reduce rank receives, the StepCost the
// search compares and CostUnits (its integer picoseconds). The per-step and per-plan costs built
// on them: planner/cost_model.h.
//
// Collective times (alpha-beta). A group of g ranks spanning mesh dims M uses the slowest link
// of M: alpha = max latency over M, bw = min bandwidth over M. B is the per-rank buffer of the
// busiest rank, in bytes:
//
//   all_gather      (g-1)*alpha + (g-1)/g * B/bw     B = full output (target box)
//   reduce_scatter  (g-1)*alpha + (g-1)/g * B/bw     B = full input (source box)
//   all_reduce     2(g-1)*alpha + 2(g-1)/g * B/bw    B = the buffer (source box)
//   all_to_all      (g-1)*alpha + (g-1)/g * B/bw     B = max(source box, target box)
//   local_slice, local_partial, local_shard_to_partial: 0
//   send_recv (direct): per rank, incoming = sum over its incoming transfers of
//       alpha(path) + bytes/bw(path), path = the mesh dims on which source and destination
//       coordinates differ; outgoing likewise over its sends; step time = max over ranks of
//       max(incoming, outgoing).
#ifndef MESHFLOW_PLANNER_STEP_COST_H_
#define MESHFLOW_PLANNER_STEP_COST_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <span>

#include "meshflow/planner/topology.h"

namespace meshflow {

// The slowest link of a group spanning `mesh_dims`: alpha = max latency, bw = min bandwidth.
// An empty set gives alpha 0 and an infinite bandwidth.
struct Link {
  double alpha_us = 0;
  double bw_gbps = 0;
};
Link LinkOf(const Topology& topo, std::span<const int> mesh_dims);

// The beta term: factor * bytes / bw, in microseconds (1 GB/s = 1e3 bytes per microsecond).
inline double BetaUs(double factor, int64_t bytes, double bw_gbps) {
  // 1 GB/s = 1e3 bytes per microsecond.
  return factor * static_cast<double>(bytes) / (bw_gbps * 1e3);
}

// Alpha-beta times (microseconds) of one collective over g ranks with busiest buffer B bytes.
// Precondition: g >= 1, bytes >= 0. g == 1 costs 0.
double AllGatherUs(int64_t g, int64_t bytes, Link link);
double ReduceScatterUs(int64_t g, int64_t bytes, Link link);
double AllReduceUs(int64_t g, int64_t bytes, Link link);
double AllToAllUs(int64_t g, int64_t bytes, Link link);

// Bytes received by the rank at group position p (0-based) of an all-reduce over g ranks of
// `count` elements (a reduce-scatter + all-gather over g torch.chunk chunks of the count), in
// elements: (g-1)*|chunk p| + (count - |chunk p|).
int64_t AllReduceElementsReceived(int64_t count, int64_t g, int64_t p);

// The search's view of one step (ModelStepCost, planner/cost_model.h): its modelled time and the
// max over ranks of its received bytes.
struct StepCost {
  double us = 0;
  int64_t max_bytes_per_rank = 0;
};

// The modelled time in integer picoseconds: the planner compares and sums these so that ties
// are exact (no floating-point reassociation differences between equal-cost paths).
int64_t CostUnits(double us);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_STEP_COST_H_
