// Planner-internal (target //planner:send_recv_pricing, visible to //planner only; no public header
// includes it): the pricing of send_recv (direct) steps. Per destination, the source chunks that
// overlap its box on each tensor dim give its incoming transfers, summed in source-rank order as
// ModelStep sums them (planner/cost_model.h); outgoing times likewise per source. Also the
// search's bounds and probes of a send_recv edge (first-rank bound, probe ranks, early stop past a
// cost limit) and the translation classes that let the full pass price one rank per class.
#ifndef MESHFLOW_PLANNER_SEND_RECV_PRICING_H_
#define MESHFLOW_PLANNER_SEND_RECV_PRICING_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/planner/chains.h"
#include "meshflow/planner/step_cost.h"
#include "meshflow/planner/topology.h"

namespace meshflow {

// ModelStep's send_recv time and busiest rank's bytes between two layouts (the pass of
// SendRecvStepCost on their chains). With a non-empty `only_dst` (mesh indices, each at most
// once), only those destinations are priced and `us` is the max of their incoming times; with
// bytes_per_rank (mesh().ranks() order, sized by the caller), also every rank's received bytes.
// Errors: those of DirectTransfers (different meshes or shapes, a Partial source).
StatusOr<StepCost> SendRecvCost(const Layout& from, const Layout& to, int64_t esize, const Topology& topo,
                                std::span<const int64_t> only_dst = {},
                                std::vector<int64_t>* bytes_per_rank = nullptr);

// The destination list of the origin alone (mesh index 0), for SendRecvCost's only_dst.
std::span<const int64_t> OriginOnly();

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

}  // namespace meshflow

#endif  // MESHFLOW_PLANNER_SEND_RECV_PRICING_H_
