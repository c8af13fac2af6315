// The network topology of the cost model: which mesh dims are intra-node (NVLink-like) and which
// inter-node (network), with the bandwidth and latency of each kind, its text form
// (ParseTopology / Topology::ToString) and its validation. The cost model that uses it:
// planner/step_cost.h (alpha-beta step formulas) and planner/cost_model.h (step and plan costs).
//
// Every mesh dim is either intra-node or inter-node. Defaults (documented constants, see Topology
// below): intra 150 GB/s and 2 us per hop; inter 25 GB/s and 10 us per hop; every mesh dim
// intra-node. Text form (ParseTopology / ToString):
//
//   "intra=1,2;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10"
//
// `intra=` lists the intra-node mesh dims (the others are inter-node); `intra=all` (or leaving
// `intra` out) makes every dim intra-node; `intra=` with nothing after it makes every dim
// inter-node. Bandwidths are GB/s (1e9 bytes/s), latencies microseconds.
//
// Example:
//   MF_ASSIGN_OR_RETURN(Topology topo, ParseTopology("intra=1;bw_inter=12.5"));
#ifndef MESHFLOW_PLANNER_TOPOLOGY_H_
#define MESHFLOW_PLANNER_TOPOLOGY_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"

namespace meshflow {

struct Topology {
  // Default constants.
  static constexpr double kDefaultBandwidthIntraGBps = 150.0;  // NVLink-like
  static constexpr double kDefaultBandwidthInterGBps = 25.0;   // 200 Gb/s network
  static constexpr double kDefaultLatencyIntraUs = 2.0;
  static constexpr double kDefaultLatencyInterUs = 10.0;
  // Limits (Validate, ParseTopology): bandwidths >= 1e-6 GB/s (1 kB/s), latencies <= 1e9 us, so
  // that every modelled time of a valid layout stays finite (a denormal bandwidth such as 1e-320
  // made every time inf, printed as `"modelled_us": null`).
  static constexpr double kMinBandwidthGBps = 1e-6;
  static constexpr double kMaxLatencyUs = 1e9;

  // Intra-node mesh dims; nullopt = every mesh dim is intra-node (the default).
  std::optional<std::vector<int>> intra_dims;
  double bw_intra_gbps = kDefaultBandwidthIntraGBps;
  double bw_inter_gbps = kDefaultBandwidthInterGBps;
  double lat_intra_us = kDefaultLatencyIntraUs;
  double lat_inter_us = kDefaultLatencyInterUs;

  bool IsIntra(int mesh_dim) const;
  double BandwidthGBps(int mesh_dim) const { return IsIntra(mesh_dim) ? bw_intra_gbps : bw_inter_gbps; }
  double LatencyUs(int mesh_dim) const { return IsIntra(mesh_dim) ? lat_intra_us : lat_inter_us; }

  // "intra=all;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10" (numbers round-trip exactly).
  std::string ToString() const;

  // OK when every bandwidth is finite and >= kMinBandwidthGBps, every latency finite and in
  // [0, kMaxLatencyUs] and no intra dim negative (what ParseTopology guarantees); else
  // INVALID_ARGUMENT naming the field, e.g. "topology bw_inter=0 must be > 0 and finite". The
  // propagation pass checks it, since a Topology built in code could otherwise make every
  // modelled cost inf or negative.
  Status Validate() const;
  // Validate, plus every intra dim < mesh_ndim ("topology intra= names mesh dim 7 but the mesh
  // has 2 dims (0..1)"). Every planner checks this against the layouts' mesh.
  Status ValidateForMesh(int mesh_ndim) const;

  friend bool operator==(const Topology&, const Topology&) = default;
};

// Parses the text form above; keys may come in any order and be left out (defaults). Errors
// (INVALID_ARGUMENT, naming the bad item): unknown key, missing '=', a bad number, a bandwidth
// <= 0, a negative latency, a negative or repeated mesh dim.
StatusOr<Topology> ParseTopology(std::string_view text);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_TOPOLOGY_H_
