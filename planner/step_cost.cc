#include "meshflow/planner/step_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace meshflow {

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

int64_t CostUnits(double us) {
  // Saturates: huge modelled times (slow links, huge tensors) must not overflow the conversion.
  constexpr double kMaxUnits = 4.0e18;  // below INT64_MAX, with headroom for sums
  const double ps = us * 1e6;
  if (!(ps < kMaxUnits)) return static_cast<int64_t>(kMaxUnits);
  if (ps <= 0) return 0;
  return std::llround(ps);
}

}  // namespace meshflow
