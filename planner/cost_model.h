// Cost model of the redistribution planner: topology, alpha-beta collective times, bytes moved.
//
// Topology. Every mesh dim is either intra-node (NVLink-like) or inter-node (network). Defaults
// (documented constants, see Topology below): intra 150 GB/s and 2 us per hop; inter 25 GB/s and
// 10 us per hop; every mesh dim intra-node. Text form (ParseTopology / ToString):
//
//   "intra=1,2;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10"
//
// `intra=` lists the intra-node mesh dims (the others are inter-node); `intra=all` (or leaving
// `intra` out) makes every dim intra-node; `intra=` with nothing after it makes every dim
// inter-node. Bandwidths are GB/s (1e9 bytes/s), latencies microseconds.
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
//
// Bytes received per rank (exactly what the in-process backend counts, so measured == modelled),
// in elements times the dtype size:
//   all_gather      elements of the new box not in the old box
//   reduce_scatter  (g-1) * elements of the rank's new box
//   all_to_all      sum over the other group members q of |Intersect(from_box(q), to_box(p))|
//   all_reduce      a reduce-scatter + all-gather over g torch.chunk chunks of the count
//                   (chunk = ceil(count/g), chunk c = [c*chunk, min(count, (c+1)*chunk))):
//                   the rank at group position p receives (g-1)*|chunk p| + (count - |chunk p|)
//   local steps     0
//   send_recv       the sum of its incoming DirectTransfers (planner/direct.h)
//
// Example:
//   MF_ASSIGN_OR_RETURN(Topology topo, ParseTopology("intra=1;bw_inter=12.5"));
//   MF_ASSIGN_OR_RETURN(StepModel m, ModelStep(step, DType::kF32, topo));
#ifndef MESHFLOW_PLANNER_COST_MODEL_H_
#define MESHFLOW_PLANNER_COST_MODEL_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/planner/plan.h"

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

// The slowest link of a group spanning `mesh_dims`: alpha = max latency, bw = min bandwidth.
// An empty set gives alpha 0 and an infinite bandwidth.
struct Link {
  double alpha_us = 0;
  double bw_gbps = 0;
};
Link LinkOf(const Topology& topo, std::span<const int> mesh_dims);

// Alpha-beta times (microseconds) of one collective over g ranks with busiest buffer B bytes.
// Precondition: g >= 1, bytes >= 0. g == 1 costs 0.
double AllGatherUs(int64_t g, int64_t bytes, Link link);
double ReduceScatterUs(int64_t g, int64_t bytes, Link link);
double AllReduceUs(int64_t g, int64_t bytes, Link link);
double AllToAllUs(int64_t g, int64_t bytes, Link link);

// Bytes received by the rank at group position p (0-based) of an all-reduce over g ranks of
// `count` elements (see the header comment), in elements.
int64_t AllReduceElementsReceived(int64_t count, int64_t g, int64_t p);

struct StepModel {
  std::vector<int64_t> bytes_per_rank;  // mesh().ranks() order
  double us = 0;
};

// Models one step (its kind, mesh_dims, from and to). Errors: a mesh dim out of range; for
// send_recv, the errors of DirectTransfers.
StatusOr<StepModel> ModelStep(const PlanStep& step, DType dtype, const Topology& topo);

// The search's view of one step: ModelStep's `us` (the same double) and the max over ranks of
// its bytes_per_rank, without the per-rank model of collectives. Collectives: per mesh dim, the
// coordinates split into a few cells (torch.chunk gives at most three lengths per level: full
// chunk, remainder, empty) within which every chain of both layouts yields the same interval
// lengths, so one representative rank per cell combination gives every per-rank count that
// depends only on lengths; the number of cells depends on the shapes and mesh dims, not on the
// rank count. send_recv: the exact per-rank sums of ModelStep (same transfers, same summation
// order), found per destination from the source chunks overlapping its box on each tensor dim
// (no pass over every (destination, block) pair). Errors: as ModelStep.
struct StepCost {
  double us = 0;
  int64_t max_bytes_per_rank = 0;
};
StatusOr<StepCost> ModelStepCost(const PlanStep& step, DType dtype, const Topology& topo);

// A lower bound of a send_recv step's ModelStepCost: `us` is the incoming time of the rank at
// mesh index 0, summed exactly as ModelStep sums it (so never above ModelStep's us, which is the
// max over ranks of max(incoming, outgoing)); max_bytes_per_rank is that rank's bytes. One
// destination's overlaps instead of every destination's. Errors: not a send_recv step; as ModelStep.
StatusOr<StepCost> SendRecvFirstRankUs(const PlanStep& step, DType dtype, const Topology& topo);

// Max over ranks of the local box's element count: the box at mesh coordinate (0,...,0) (the
// first torch.chunk at every level is the longest, and tensor dims use disjoint mesh dims). O(dims).
int64_t MaxLocalElements(const Layout& layout);

// Planner-internal: a layout's sharding without the Layout (the search's compact states, see
// search.cc): the global shape, the mesh dim sizes, and the shard order as concatenated chains,
// tensor dim t's chain being dims[begin[t] .. begin[t+1]) (outermost first). Views only; nothing
// is allocated to build one.
struct ShardChains {
  std::span<const int64_t> shape;       // global shape, one per tensor dim
  std::span<const int64_t> mesh_shape;  // mesh dim sizes
  std::span<const int> dims;
  std::span<const int> begin;           // tensor rank + 1 offsets into dims
  int tensor_rank() const { return static_cast<int>(shape.size()); }
  std::span<const int> chain(int t) const { return dims.subspan(begin[t], begin[t + 1] - begin[t]); }
};

// A Layout's shard order as chains: Of() returns views into this object's `dims` / `begin` (valid
// until the next Of() or its destruction) and into the layout's shape and mesh.
struct FlatChains {
  std::vector<int> dims, begin;
  ShardChains Of(const Layout& l);
};

// ModelStepCost of a collective step (all_gather, reduce_scatter, all_reduce, all_to_all; local
// kinds cost 0) from its kind, mesh dims and the two layouts' chains: the same doubles and bytes
// as ModelStepCost (which calls it). Precondition: valid mesh dims; not send_recv. No allocation
// after the first calls on a thread (scratch buffers are reused).
// With time_only, max_bytes_per_rank is left 0 (the time needs no per-rank count; the search
// skips the count for edges whose time alone already loses).
StepCost CollectiveStepCost(StepKind kind, std::span<const int> mesh_dims, const ShardChains& from,
                            const ShardChains& to, int64_t esize, const Topology& topo, bool time_only = false);

// MaxLocalElements of the layout these chains describe.
int64_t MaxLocalElements(const ShardChains& chains);

// The two sides' MaxLocalElements of a step: all a collective's time depends on besides its
// kind, group and link. The search computes them once per state, not once per edge.
struct StepExtents {
  int64_t from = 0;
  int64_t to = 0;
};

// CollectiveStepCost given the sides' MaxLocalElements (`extents` must be those of `from` and
// `to`): the same doubles and bytes.
StepCost CollectiveStepCost(StepKind kind, std::span<const int> mesh_dims, const ShardChains& from,
                            const ShardChains& to, StepExtents extents, int64_t esize, const Topology& topo,
                            bool time_only = false);

// ModelStepCost of the send_recv step between the layouts these chains describe on `mesh`
// (first_rank_only: SendRecvFirstRankUs), the same doubles and bytes. Precondition: `from` is
// Partial-free (its Replicate dims are the mesh dims in none of its chains), same shape.
StepCost SendRecvStepCost(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                          const Topology& topo, bool first_rank_only);

// SendRecvStepCost (all ranks) when CostUnits of its time is at most `limit_units`, else nullopt,
// found as soon as the ranks priced so far prove it (each finished destination's incoming time and
// the partial outgoing sums, which only grow, bound the time from below): the search's exact
// pricing of a send_recv edge that cannot beat its target's path stops early.
std::optional<StepCost> SendRecvStepCostWithin(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to,
                                               int64_t esize, const Topology& topo, int64_t limit_units);

// How many destinations SendRecvStepCost (all ranks) and SendRecvStepCostWithin price: one rank
// per translation class of the step's per-rank terms, at most mesh.size(). A mesh dim that sits at
// the same level of the same tensor dim's chain in both layouts, under the same outer levels,
// moves a rank and all its partners together; its coordinates whose chunks have equal lengths
// (torch.chunk cells: full, remainder, empty) give every rank the same terms, the same doubles
// summed in the same order, when mesh index order is world rank order and the Replicate holder
// choice does not move (coordinates congruent modulo holder count / gcd(the dim's stride, holder
// count)). The search's exact pricing of `S(0),S(1),S(2)` -> `S(2),S(1),S(0)` of [3000,2500,100]
// on 16x16x8 prices 256 of the 2048 ranks (mesh dim 1 keeps tensor dim 1's chunks: 15 of 157,
// one of 145).
int64_t SendRecvPricedDestinations(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to);

// The per-rank terms of SendRecvStepCost's time (the max over ranks of max(incoming, outgoing)),
// each the same double as in that max: the max of the incoming times of the destinations at the
// mesh indices `dst` (each at most once; 0 when empty), and the outgoing time of the source at
// mesh index `src` (found from the target chunks that overlap its block, summed in destination
// order). Either is a lower bound of the step's time; each costs the rank's own transfers.
// Preconditions: SendRecvStepCost's; indices in [0, mesh.size()).
double SendRecvIncomingUs(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                          const Topology& topo, std::span<const int64_t> dst);
double SendRecvOutgoingUs(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                          const Topology& topo, int64_t src);

// A lower bound of the incoming time of the rank at mesh index 0 in SendRecvStepCost (what
// SendRecvStepCost with first_rank_only returns), within a relative 2^-50 per transfer of it: its
// transfers counted by groups of equal link (the mesh dims where source and destination differ)
// in closed form, from the torch.chunk structure of each tensor dim's overlapping source chunks,
// instead of one by one. So its cost does not grow with the number of sources (an all-to-all's
// first rank has one per rank), only with the number of link groups (past 4096 groups or group
// combinations it prices the rank exactly). The search keys deferred send_recv edges with it.
double SendRecvFirstRankBoundUs(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to,
                                int64_t esize, const Topology& topo);

// A few ranks whose send_recv terms often include the busiest: those whose coordinates are all 0
// or 1 on the mesh dims of size >= 2 (with more than 4 such dims: the origin, a 1 on one dim, a 1
// on all) and the last rank, as ascending mesh indices; empty when the mesh has fewer than 8
// ranks per probe (pricing every rank costs little more).
std::vector<int64_t> SendRecvProbeRanks(const DeviceMesh& mesh);

// A lower bound of SendRecvStepCost's time: the max of the incoming and outgoing times of the
// ranks at the mesh indices `probes` (ascending, each at most once; 0 when empty). With
// SendRecvProbeRanks it often equals the step's time (torch.chunk puts the remainder in the
// leading chunks, so corner ranks tend to be the busiest). The search raises a deferred send_recv
// edge's key to it before pricing the edge over every rank.
double SendRecvProbeUs(const DeviceMesh& mesh, const ShardChains& from, const ShardChains& to, int64_t esize,
                       const Topology& topo, std::span<const int64_t> probes);

// Fills every step's bytes_per_rank and modelled_us, and the plan's modelled_us,
// bytes_received_per_rank, max_bytes_received_per_rank and lower_bound_bytes_per_rank.
Status FillPlanCosts(Plan& plan, const Topology& topo);

// FillPlanCosts for a plan whose send_recv steps carry ModelStepCost's modelled_us (the search's
// steps): keeps those times instead of pricing the steps again over every rank, so the result
// equals FillPlanCosts' at O(ranks x tensor rank) per step.
Status FillPlanCostsOfSearch(Plan& plan, const Topology& topo);

// The modelled time in integer picoseconds: the planner compares and sums these so that ties
// are exact (no floating-point reassociation differences between equal-cost paths).
int64_t CostUnits(double us);

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_COST_MODEL_H_
