// ModelStepCost (the search's per-edge time and busiest-rank bytes, computed from a few
// representative ranks and, for send_recv, per-destination overlaps) against the per-rank model
// ModelStep: the same double for the time and the same max bytes, on every edge the search
// generates from random layouts (1-D to 4-D meshes, uneven and zero sizes, empty shards, explicit
// shard orders, Partial), plus send_recv between random Partial-free layouts and permuted rank
// lists. MaxLocalElements against AllLocalBoxes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <tuple>
#include <numeric>
#include <random>

#include "meshflow/planner/chains.h"
#include "meshflow/planner/collective_pricing.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/direct.h"
#include "meshflow/planner/search.h"
#include "meshflow/planner/send_recv_pricing.h"
#include "meshflow/planner/transforms.h"

namespace meshflow {
namespace {

struct Gen {
  std::mt19937 rng;
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

  DeviceMesh Mesh() {
    static const std::vector<std::vector<int64_t>> kMeshes = {
        {1},    {2},       {3},       {5},       {8},          {2, 2},       {2, 3},      {3, 2},
        {4, 3}, {1, 4},    {5, 2},    {2, 2, 2}, {2, 1, 3},    {3, 2, 2},    {2, 2, 2, 2}, {2, 3, 1, 2},
        {4, 2}, {3, 3},    {2, 4, 2}, {1, 2, 3, 2},
        // 20-32 ranks with dims of 4-8: more length cells per mesh dim than the small meshes give.
        {4, 8}, {6, 5},    {2, 3, 4}};
    const std::vector<int64_t>& shape = kMeshes[Uniform(0, static_cast<int>(kMeshes.size()) - 1)];
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<int> ranks(static_cast<size_t>(n));
    std::iota(ranks.begin(), ranks.end(), 0);
    if (Uniform(0, 3) == 0) {
      std::shuffle(ranks.begin(), ranks.end(), rng);  // world ranks not in mesh order
      return *DeviceMesh::CreateWithRanks(shape, ranks);
    }
    return *DeviceMesh::Create(shape);
  }
  std::vector<int64_t> Shape() {
    std::vector<int64_t> s(static_cast<size_t>(Uniform(0, 4)));
    for (int64_t& d : s) d = Uniform(0, 9) == 0 ? 0 : Uniform(1, 13);
    return s;
  }
  Layout RandomLayout(const std::vector<int64_t>& shape, const DeviceMesh& mesh, bool allow_partial) {
    while (true) {
      Placements ps;
      const int tmax = static_cast<int>(shape.size()) - 1;
      const int tcap = Uniform(0, 1) ? std::min(1, tmax) : tmax;
      for (int m = 0; m < mesh.ndim(); ++m) {
        const int k = Uniform(0, 5);
        if (k <= 1 && allow_partial) {
          ps.push_back(Partial{ReduceOp::kSum});
        } else if (k <= 2 || tmax < 0) {
          ps.push_back(Replicate{});
        } else {
          ps.push_back(Shard{Uniform(0, tcap)});
        }
      }
      StatusOr<Layout> l = Layout::Create(shape, mesh, ps);
      if (!l.ok()) continue;
      if (Uniform(0, 1) == 0) {
        ShardOrder order = l->shard_order();
        for (auto& o : order) std::shuffle(o.begin(), o.end(), rng);
        StatusOr<Layout> lo = Layout::Create(shape, mesh, ps, order);
        if (lo.ok()) return *lo;
      }
      return *l;
    }
  }
  // Intra dims only among the mesh's dims (the planners reject others); the same draws for
  // every ndim, so the random cases do not depend on it.
  Topology Topo(int ndim) {
    Topology t;
    if (Uniform(0, 1) == 0) {
      std::vector<int> intra;
      for (int m = 0; m < 4; ++m) {
        if (Uniform(0, 1) && m < ndim) intra.push_back(m);
      }
      t.intra_dims = intra;
      t.bw_inter_gbps = 12.5;
      t.lat_inter_us = 7.0;
    }
    return t;
  }
};

// The per-rank model as it was before (every (destination, block) pair for send_recv, every group
// member for all_to_all): the reference ModelStep and ModelStepCost must equal.
std::vector<int64_t> CoordOf(const DeviceMesh& mesh, int64_t i) {
  std::vector<int64_t> c(static_cast<size_t>(mesh.ndim()));
  for (int d = mesh.ndim() - 1; d >= 0; --d) {
    c[d] = i % mesh.dim_size(d);
    i /= mesh.dim_size(d);
  }
  return c;
}

int64_t IndexOf(const DeviceMesh& mesh, const std::vector<int64_t>& c) {
  int64_t i = 0;
  for (int d = 0; d < mesh.ndim(); ++d) i = i * mesh.dim_size(d) + c[d];
  return i;
}

std::vector<int64_t> GroupOf(const DeviceMesh& mesh, const std::vector<int>& dims, int64_t i, int64_t* pos) {
  const std::vector<int64_t> base = CoordOf(mesh, i);
  int64_t g = 1;
  for (int d : dims) g *= mesh.dim_size(d);
  std::vector<int64_t> out;
  std::vector<int64_t> c = base;
  for (int64_t k = 0; k < g; ++k) {
    int64_t rem = k;
    for (int j = static_cast<int>(dims.size()) - 1; j >= 0; --j) {
      c[dims[j]] = rem % mesh.dim_size(dims[j]);
      rem /= mesh.dim_size(dims[j]);
    }
    out.push_back(IndexOf(mesh, c));
  }
  int64_t p = 0;
  for (int d : dims) p = p * mesh.dim_size(d) + base[d];
  if (pos != nullptr) *pos = p;
  return out;
}

StatusOr<StepModel> ReferenceModel(const PlanStep& step, DType dtype, const Topology& topo) {
  const DeviceMesh& mesh = step.from.mesh();
  const int64_t n = mesh.size();
  const int64_t esize = DTypeSize(dtype);
  StepModel out;
  out.bytes_per_rank.assign(static_cast<size_t>(n), 0);
  for (int d : step.mesh_dims) {
    if (d < 0 || d >= mesh.ndim()) return OutOfRangeError("mesh dim");
  }
  if (IsLocalStep(step.kind)) return out;
  if (step.kind == StepKind::kSendRecv) {
    MF_ASSIGN_OR_RETURN(std::vector<Transfer> transfers, DirectTransfers(step.from, step.to));
    std::vector<double> in_us(static_cast<size_t>(n), 0.0), out_us(static_cast<size_t>(n), 0.0);
    for (const Transfer& t : transfers) {
      MF_ASSIGN_OR_RETURN(int si, mesh.IndexOf(t.src_rank));
      MF_ASSIGN_OR_RETURN(int di, mesh.IndexOf(t.dst_rank));
      const std::vector<int64_t> sc = CoordOf(mesh, si), dc = CoordOf(mesh, di);
      std::vector<int> path;
      for (int d = 0; d < mesh.ndim(); ++d) {
        if (sc[d] != dc[d]) path.push_back(d);
      }
      const Link link = LinkOf(topo, path);
      const int64_t bytes = t.box.NumElements() * esize;
      const double us = link.alpha_us + static_cast<double>(bytes) / (link.bw_gbps * 1e3);
      in_us[di] += us;
      out_us[si] += us;
      out.bytes_per_rank[di] += bytes;
    }
    for (int64_t i = 0; i < n; ++i) out.us = std::max(out.us, std::max(in_us[i], out_us[i]));
    return out;
  }
  const std::vector<Box> from = step.from.AllLocalBoxes();
  const std::vector<Box> to = step.to.AllLocalBoxes();
  int64_t g = 1;
  for (int d : step.mesh_dims) g *= mesh.dim_size(d);
  const Link link = LinkOf(topo, step.mesh_dims);
  int64_t max_from = 0, max_to = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_from = std::max(max_from, from[i].NumElements());
    max_to = std::max(max_to, to[i].NumElements());
  }
  switch (step.kind) {
    case StepKind::kAllGather:
      for (int64_t i = 0; i < n; ++i) {
        out.bytes_per_rank[i] = (to[i].NumElements() - Intersect(from[i], to[i]).NumElements()) * esize;
      }
      out.us = AllGatherUs(g, max_to * esize, link);
      break;
    case StepKind::kReduceScatter:
      for (int64_t i = 0; i < n; ++i) out.bytes_per_rank[i] = (g - 1) * to[i].NumElements() * esize;
      out.us = ReduceScatterUs(g, max_from * esize, link);
      break;
    case StepKind::kAllReduce:
      for (int64_t i = 0; i < n; ++i) {
        int64_t pos = 0;
        GroupOf(mesh, step.mesh_dims, i, &pos);
        out.bytes_per_rank[i] = AllReduceElementsReceived(from[i].NumElements(), g, pos) * esize;
      }
      out.us = AllReduceUs(g, max_from * esize, link);
      break;
    case StepKind::kAllToAll:
      for (int64_t i = 0; i < n; ++i) {
        int64_t elems = 0;
        for (int64_t q : GroupOf(mesh, step.mesh_dims, i, nullptr)) {
          if (q != i) elems += Intersect(from[q], to[i]).NumElements();
        }
        out.bytes_per_rank[i] = elems * esize;
      }
      out.us = AllToAllUs(g, std::max(max_from, max_to) * esize, link);
      break;
    default:
      break;
  }
  return out;
}

void ExpectSame(const PlanStep& step, DType dtype, const Topology& topo, int* checked) {
  StatusOr<StepModel> full = ReferenceModel(step, dtype, topo);
  StatusOr<StepModel> model = ModelStep(step, dtype, topo);
  StatusOr<StepCost> fast = ModelStepCost(step, dtype, topo);
  ASSERT_EQ(full.ok(), fast.ok()) << step.from.ToString() << " -> " << step.to.ToString();
  ASSERT_EQ(full.ok(), model.ok()) << step.from.ToString() << " -> " << step.to.ToString();
  if (!full.ok()) return;
  EXPECT_EQ(model->us, full->us) << StepKindName(step.kind) << " " << step.from.ToString() << " -> "
                                 << step.to.PlacementsString();
  EXPECT_EQ(model->bytes_per_rank, full->bytes_per_rank)
      << StepKindName(step.kind) << " " << step.from.ToString() << " -> " << step.to.PlacementsString();
  int64_t max_bytes = 0;
  for (int64_t b : full->bytes_per_rank) max_bytes = std::max(max_bytes, b);
  EXPECT_EQ(fast->us, full->us) << StepKindName(step.kind) << " " << step.from.ToString() << " -> "
                                << step.to.PlacementsString();
  EXPECT_EQ(fast->max_bytes_per_rank, max_bytes)
      << StepKindName(step.kind) << " " << step.from.ToString() << " -> " << step.to.PlacementsString();
  ++*checked;
}

TEST(StepCostTest, MaxLocalElementsMatchesEnumeration) {
  Gen gen{std::mt19937(7)};
  for (int i = 0; i < 3000; ++i) {
    const DeviceMesh mesh = gen.Mesh();
    const Layout l = gen.RandomLayout(gen.Shape(), mesh, true);
    int64_t best = 0;
    for (const Box& b : l.AllLocalBoxes()) best = std::max(best, b.NumElements());
    ASSERT_EQ(MaxLocalElements(l), best) << l.ToString();
    FlatChains chains;
    ASSERT_EQ(MaxLocalElements(chains.Of(l)), best) << l.ToString();
  }
}

TEST(StepCostTest, EverySearchEdgeMatchesThePerRankModel) {
  Gen gen{std::mt19937(2024)};
  static const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kI64};
  int checked = 0;
  int kinds[8] = {};
  for (int i = 0; i < 1500; ++i) {
    const DeviceMesh mesh = gen.Mesh();
    const std::vector<int64_t> shape = gen.Shape();
    const Layout from = gen.RandomLayout(shape, mesh, true);
    const Layout to = gen.RandomLayout(shape, mesh, true);
    if (from.partial_op() && to.partial_op() && *from.partial_op() != *to.partial_op()) continue;
    const Topology topo = gen.Topo(mesh.ndim());
    const DType dtype = kTypes[gen.Uniform(0, 2)];
    StatusOr<std::vector<PlanStep>> next = Successors(from, to, dtype, topo);
    ASSERT_TRUE(next.ok()) << next.status();
    for (const PlanStep& s : *next) {
      ++kinds[static_cast<int>(s.kind)];
      ExpectSame(s, dtype, topo, &checked);
      // Successors fills exactly these numbers.
      StatusOr<StepCost> c = ModelStepCost(s, dtype, topo);
      ASSERT_TRUE(c.ok());
      EXPECT_EQ(s.modelled_us, c->us);
      EXPECT_EQ(s.bytes_per_rank, c->max_bytes_per_rank);
    }
  }
  EXPECT_GT(checked, 10000);
  for (StepKind k : {StepKind::kAllGather, StepKind::kReduceScatter, StepKind::kAllReduce, StepKind::kAllToAll,
                     StepKind::kSendRecv}) {
    EXPECT_GT(kinds[static_cast<int>(k)], 200) << StepKindName(k);
  }
}

TEST(StepCostTest, SendRecvBetweenRandomLayoutsMatchesThePerRankModel) {
  Gen gen{std::mt19937(99)};
  int checked = 0;
  for (int i = 0; i < 4000; ++i) {
    const DeviceMesh mesh = gen.Mesh();
    const std::vector<int64_t> shape = gen.Shape();
    const Layout from = gen.RandomLayout(shape, mesh, false);
    const Layout to = gen.RandomLayout(shape, mesh, false);
    StatusOr<PlanStep> s = SendRecvStep(from, to);
    if (!s.ok()) continue;
    ExpectSame(*s, DType::kF32, gen.Topo(mesh.ndim()), &checked);
  }
  EXPECT_GT(checked, 3000);
}

// SendRecvStepCostWithin: the full cost when its time is within the limit, nullopt above it (it
// may stop early, but never on a time the limit admits).
TEST(StepCostTest, SendRecvWithinALimitGivesUpOnlyAboveIt) {
  Gen gen{std::mt19937(5)};
  int checked = 0;
  for (int i = 0; i < 1500; ++i) {
    const DeviceMesh mesh = gen.Mesh();
    const std::vector<int64_t> shape = gen.Shape();
    const Layout from = gen.RandomLayout(shape, mesh, false);
    const Layout to = gen.RandomLayout(shape, mesh, false);
    const Topology topo = gen.Topo(mesh.ndim());
    FlatChains fa, fb;
    const ShardChains a = fa.Of(from), b = fb.Of(to);
    const StepCost full = SendRecvStepCost(mesh, a, b, 4, topo, false);
    const int64_t units = CostUnits(full.us);
    for (int64_t limit : {units, units + 1, std::numeric_limits<int64_t>::max()}) {
      const std::optional<StepCost> c = SendRecvStepCostWithin(mesh, a, b, 4, topo, limit);
      ASSERT_TRUE(c.has_value()) << from.ToString() << " -> " << to.ToString() << " limit " << limit;
      EXPECT_EQ(c->us, full.us);
      EXPECT_EQ(c->max_bytes_per_rank, full.max_bytes_per_rank);
    }
    if (units > 0) {
      EXPECT_FALSE(SendRecvStepCostWithin(mesh, a, b, 4, topo, units - 1).has_value())
          << from.ToString() << " -> " << to.ToString();
      ++checked;
    }
  }
  EXPECT_GT(checked, 400);
}

// Meshes with more than 64 dims (all but three of size 1): the send_recv pricing keeps one mask
// bit per mesh dim that can differ, so dims past bit 63 are fine.
TEST(StepCostTest, SendRecvOnAMeshWithManyUnitDims) {
  Gen gen{std::mt19937(7)};
  std::vector<int64_t> shape(70, 1);
  shape[3] = 2;
  shape[66] = 3;
  shape[69] = 2;
  const DeviceMesh mesh = *DeviceMesh::Create(shape);
  int checked = 0;
  for (int i = 0; i < 40; ++i) {
    Placements pf(70, Replicate{}), pt(70, Replicate{});
    for (int m : {3, 66, 69}) {
      pf[static_cast<size_t>(m)] = gen.Uniform(0, 2) == 0 ? Placement{Replicate{}} : Placement{Shard{gen.Uniform(0, 1)}};
      pt[static_cast<size_t>(m)] = gen.Uniform(0, 2) == 0 ? Placement{Replicate{}} : Placement{Shard{gen.Uniform(0, 1)}};
    }
    const Layout from = *Layout::Create({7, 12}, mesh, pf);
    const Layout to = *Layout::Create({7, 12}, mesh, pt);
    StatusOr<PlanStep> s = SendRecvStep(from, to);
    if (!s.ok()) continue;
    Topology topo;
    topo.intra_dims = std::vector<int>{66};
    ExpectSame(*s, DType::kF32, topo, &checked);
  }
  EXPECT_GT(checked, 20);
}

// Every rank's incoming and outgoing send_recv times as the per-rank reference sums them
// (DirectTransfers' order), indexed by mesh index.
void ReferenceRankTimes(const Layout& from, const Layout& to, int64_t esize, const Topology& topo,
                        std::vector<double>* in_us, std::vector<double>* out_us) {
  const DeviceMesh& mesh = from.mesh();
  in_us->assign(static_cast<size_t>(mesh.size()), 0.0);
  out_us->assign(static_cast<size_t>(mesh.size()), 0.0);
  const StatusOr<std::vector<Transfer>> transfers = DirectTransfers(from, to);
  ASSERT_TRUE(transfers.ok()) << transfers.status();
  for (const Transfer& t : *transfers) {
    const int si = *mesh.IndexOf(t.src_rank), di = *mesh.IndexOf(t.dst_rank);
    const std::vector<int64_t> sc = CoordOf(mesh, si), dc = CoordOf(mesh, di);
    std::vector<int> path;
    for (int d = 0; d < mesh.ndim(); ++d) {
      if (sc[d] != dc[d]) path.push_back(d);
    }
    const Link link = LinkOf(topo, path);
    const double us = link.alpha_us + static_cast<double>(t.box.NumElements() * esize) / (link.bw_gbps * 1e3);
    (*in_us)[di] += us;
    (*out_us)[si] += us;
  }
}

// The ranks SendRecvProbeUs reads (mesh indices), by its rule: coordinates 0 or 1 on the dims of
// size >= 2 (every corner up to 4 such dims; else the origin, one 1 per dim, all ones) and the
// last rank; none on meshes with fewer than 8 ranks per probe.
std::vector<int64_t> ProbeRanks(const DeviceMesh& mesh) {
  std::vector<std::vector<int64_t>> coords;
  std::vector<int> wide;
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (mesh.dim_size(d) >= 2) wide.push_back(d);
  }
  std::vector<int64_t> zero(static_cast<size_t>(mesh.ndim()), 0);
  if (wide.size() <= 4) {
    for (int bits = 0; bits < (1 << wide.size()); ++bits) {
      std::vector<int64_t> c = zero;
      for (size_t j = 0; j < wide.size(); ++j) c[wide[j]] = bits >> j & 1;
      coords.push_back(c);
    }
  } else {
    coords.push_back(zero);
    std::vector<int64_t> all = zero;
    for (int d : wide) {
      std::vector<int64_t> c = zero;
      c[d] = 1;
      all[d] = 1;
      coords.push_back(c);
    }
    coords.push_back(all);
  }
  std::vector<int64_t> out;
  for (const auto& c : coords) out.push_back(IndexOf(mesh, c));
  out.push_back(mesh.size() - 1);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (mesh.size() < 8 * static_cast<int64_t>(coords.size() + 1)) return {};
  return out;
}

// SendRecvIncomingUs / SendRecvOutgoingUs: every rank's terms, the same doubles as the per-rank
// reference; the incoming max over several destinations; SendRecvProbeUs equal to the max over
// its probe ranks' terms, and at most the step's time.
TEST(StepCostTest, SendRecvRankTermsMatchThePerRankReference) {
  Gen gen{std::mt19937(123)};
  int checked = 0, probed = 0, probe_exact = 0;
  auto check = [&](const Layout& from, const Layout& to, const Topology& topo) {
    const DeviceMesh& mesh = from.mesh();
    std::vector<double> ref_in, ref_out;
    ReferenceRankTimes(from, to, 4, topo, &ref_in, &ref_out);
    FlatChains fa, fb;
    const ShardChains a = fa.Of(from), b = fb.Of(to);
    double all_max = 0;
    for (int64_t i = 0; i < mesh.size(); ++i) {
      const int64_t one[] = {i};
      ASSERT_EQ(SendRecvIncomingUs(mesh, a, b, 4, topo, one), ref_in[i])
          << from.ToString() << " -> " << to.PlacementsString() << " rank index " << i;
      ASSERT_EQ(SendRecvOutgoingUs(mesh, a, b, 4, topo, i), ref_out[i])
          << from.ToString() << " -> " << to.PlacementsString() << " rank index " << i;
      all_max = std::max({all_max, ref_in[i], ref_out[i]});
    }
    const int64_t some[] = {0, mesh.size() - 1, mesh.size() / 2};
    const std::span<const int64_t> dst(some, mesh.size() >= 3 ? 3 : 1);
    double some_max = 0;
    for (int64_t i : dst) some_max = std::max(some_max, ref_in[i]);
    EXPECT_EQ(SendRecvIncomingUs(mesh, a, b, 4, topo, dst), some_max);
    EXPECT_EQ(SendRecvIncomingUs(mesh, a, b, 4, topo, {}), 0.0);
    const std::vector<int64_t> probes = ProbeRanks(mesh);
    ASSERT_EQ(SendRecvProbeRanks(mesh), probes) << mesh.ToString();
    const double probe = SendRecvProbeUs(mesh, a, b, 4, topo, probes.empty() ? std::vector<int64_t>{0} : probes);
    const double full = SendRecvStepCost(mesh, a, b, 4, topo, false).us;
    EXPECT_EQ(full, all_max);
    EXPECT_LE(probe, full) << from.ToString() << " -> " << to.PlacementsString();
    double probe_max = probes.empty() ? std::max(ref_in[0], ref_out[0]) : 0.0;
    for (int64_t i : probes) probe_max = std::max({probe_max, ref_in[i], ref_out[i]});
    EXPECT_EQ(probe, probe_max) << from.ToString() << " -> " << to.PlacementsString();
    if (!probes.empty()) {
      ++probed;
      if (probe == full) ++probe_exact;
    }
    ++checked;
  };
  for (int i = 0; i < 1500; ++i) {
    const DeviceMesh mesh = gen.Mesh();
    const std::vector<int64_t> shape = gen.Shape();
    const Layout from = gen.RandomLayout(shape, mesh, false);
    const Layout to = gen.RandomLayout(shape, mesh, false);
    check(from, to, gen.Topo(mesh.ndim()));
  }
  // Meshes large enough to probe more than the origin: every corner of 2-D to 4-D meshes, and
  // past 4 dims of size >= 2 the origin, one 1 per dim, all ones (and the last rank each time).
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {8, 8}, {16, 5}, {4, 4, 4, 4}, {2, 2, 2, 2, 2, 2, 2, 2}, {3, 2, 2, 1, 2, 2, 2}}) {
    const DeviceMesh mesh = *DeviceMesh::Create(shape);
    for (int i = 0; i < 12; ++i) {
      const std::vector<int64_t> tshape{gen.Uniform(1, 40), gen.Uniform(1, 40), gen.Uniform(1, 9)};
      check(gen.RandomLayout(tshape, mesh, false), gen.RandomLayout(tshape, mesh, false),
            gen.Topo(mesh.ndim()));
    }
  }
  EXPECT_GT(checked, 1500);
  EXPECT_EQ(probed, 60);
  EXPECT_GT(probe_exact, probed / 2);  // the probes usually find the busiest rank
}

// SendRecvStepCost prices one rank per translation class (SendRecvPricedDestinations) and still
// returns the max over every rank of the per-rank reference's terms, the same double, and the
// busiest rank's bytes. Meshes with long dims (many coordinates per chunk-length cell); targets
// that keep some of the source's chains (so some mesh dims are passive) and move one mesh dim, or
// that share only a chain prefix, or random ones; uneven and empty shapes; Replicate sources (the
// holder rule); ascending non-contiguous and shuffled rank lists.
TEST(StepCostTest, SendRecvTranslationClassesKeepTheExactTime) {
  Gen gen{std::mt19937(31)};
  static const std::vector<std::vector<int64_t>> kMeshes = {{16, 3}, {12, 2, 2}, {3, 10}, {2, 9, 2},
                                                            {7, 7},  {5, 4, 3},  {4, 2, 6}};
  int checked = 0, reduced = 0, reduced_with_holders = 0, unsorted = 0;
  int64_t priced = 0, ranks = 0;
  for (int i = 0; i < 700; ++i) {
    const std::vector<int64_t>& mshape = kMeshes[gen.Uniform(0, static_cast<int>(kMeshes.size()) - 1)];
    int64_t n = 1;
    for (int64_t d : mshape) n *= d;
    std::vector<int> rl(static_cast<size_t>(n));
    std::iota(rl.begin(), rl.end(), 0);
    const int kind = gen.Uniform(0, 3);
    if (kind == 0) {
      for (int& r : rl) r = 3 * r + 1;  // ascending, not 0..n-1
    } else if (kind == 1) {
      std::shuffle(rl.begin(), rl.end(), gen.rng);
    }
    const DeviceMesh mesh = kind >= 2 ? *DeviceMesh::Create(mshape) : *DeviceMesh::CreateWithRanks(mshape, rl);
    std::vector<int64_t> shape(static_cast<size_t>(gen.Uniform(1, 3)));
    for (int64_t& d : shape) d = gen.Uniform(0, 12) == 0 ? 0 : gen.Uniform(1, 60);
    const Layout from = gen.RandomLayout(shape, mesh, false);
    Layout to = gen.RandomLayout(shape, mesh, false);
    if (gen.Uniform(0, 3) > 0) {
      // The source with one mesh dim re-placed: the chains it does not touch stay (passive dims).
      Placements ps = from.placements();
      ShardOrder order = from.shard_order();
      const int m = gen.Uniform(0, mesh.ndim() - 1);
      for (auto& o : order) o.erase(std::remove(o.begin(), o.end(), m), o.end());
      const int t = gen.Uniform(-1, static_cast<int>(shape.size()) - 1);
      if (t < 0) {
        ps[m] = Replicate{};
      } else {
        ps[m] = Shard{t};
        // Innermost, or outermost (then the chain shares no prefix with the source's).
        if (gen.Uniform(0, 1)) {
          order[t].push_back(m);
        } else {
          order[t].insert(order[t].begin(), m);
        }
      }
      StatusOr<Layout> l = Layout::Create(shape, mesh, ps, order);
      if (l.ok()) to = *l;
    }
    const Topology topo = gen.Topo(mesh.ndim());
    std::vector<double> ref_in, ref_out;
    ReferenceRankTimes(from, to, 4, topo, &ref_in, &ref_out);
    double ref = 0;
    for (int64_t r = 0; r < n; ++r) ref = std::max({ref, ref_in[r], ref_out[r]});
    FlatChains fa, fb;
    const ShardChains a = fa.Of(from), b = fb.Of(to);
    const StepCost c = SendRecvStepCost(mesh, a, b, 4, topo, false);
    ASSERT_EQ(c.us, ref) << from.ToString() << " -> " << to.PlacementsString() << " order "
                         << to.ToString();
    StatusOr<PlanStep> step = SendRecvStep(from, to);
    ASSERT_TRUE(step.ok()) << step.status();
    StatusOr<StepModel> full = ModelStep(*step, DType::kF32, topo);  // every rank, with its byte vector
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_EQ(full->us, ref);
    EXPECT_EQ(c.max_bytes_per_rank, *std::max_element(full->bytes_per_rank.begin(), full->bytes_per_rank.end()))
        << from.ToString() << " -> " << to.ToString();
    const int64_t p = SendRecvPricedDestinations(mesh, a, b);
    ASSERT_GE(p, 1);
    ASSERT_LE(p, n);
    if (kind == 1 && !std::is_sorted(rl.begin(), rl.end())) {
      EXPECT_EQ(p, n) << "a shuffled rank list keeps every rank";
      ++unsorted;
    }
    if (p < n) {
      ++reduced;
      if (a.dims.size() < static_cast<size_t>(mesh.ndim())) ++reduced_with_holders;  // a Replicate dim
    }
    priced += p;
    ranks += n;
    ++checked;
  }
  EXPECT_EQ(checked, 700);
  // Hand-picked cases where the busiest rank is not the first of its class along a passive dim.
  // 1. S(0)^3 -> S(0),R,S(0) of length 58 on 4x2x6, mesh dims 0 and 1 slow: mesh dim 0 keeps its
  //    chunks (15, 15, 15, 13) in both layouts; inside a chunk the source splits by 2 then 6 and
  //    the target by 6, and only the chunk of 13 gives the busiest rank (at coordinate 3 on dim 0).
  // 2. A Replicate source dim (0) of 2 with a dim of stride 1 (2) that keeps its chunks (2 each):
  //    each destination takes its block from the holder at its index modulo 2, so neighbours along
  //    dim 2 read across the slow dim 0 or not, and dim 2 folds only modulo 2: coordinates 0 and 1
  //    are priced, and the busiest ranks sit at 1 and 3.
  {
    auto busiest = [](const Layout& from, const Layout& to, const Topology& topo, auto&& keep) {
      std::vector<double> ref_in, ref_out;
      ReferenceRankTimes(from, to, 4, topo, &ref_in, &ref_out);
      double m = 0;
      for (size_t r = 0; r < ref_in.size(); ++r) {
        if (keep(CoordOf(from.mesh(), static_cast<int64_t>(r)))) m = std::max({m, ref_in[r], ref_out[r]});
      }
      return m;
    };
    auto all = [](const std::vector<int64_t>&) { return true; };
    Topology slow01;
    slow01.intra_dims = std::vector<int>{2};
    slow01.bw_inter_gbps = 12.5;
    slow01.lat_inter_us = 7.0;
    const DeviceMesh m1 = *DeviceMesh::Create({4, 2, 6});
    const Layout f1 = *Layout::Create({58}, m1, {Shard{0}, Shard{0}, Shard{0}});
    const Layout t1 = *Layout::Create({58}, m1, {Shard{0}, Replicate{}, Shard{0}});
    Topology two_speeds;
    two_speeds.intra_dims = std::vector<int>{1, 2};
    const DeviceMesh m2 = *DeviceMesh::Create({2, 2, 4});
    const Layout f2 = *Layout::Create({8, 3}, m2, {Replicate{}, Shard{1}, Shard{0}});
    const Layout t2 = *Layout::Create({8, 3}, m2, {Shard{1}, Replicate{}, Shard{0}});
    FlatChains fa, fb;
    const double ref1 = busiest(f1, t1, slow01, all);
    EXPECT_EQ(SendRecvStepCost(m1, fa.Of(f1), fb.Of(t1), 4, slow01, false).us, ref1);
    EXPECT_EQ(SendRecvPricedDestinations(m1, fa.Of(f1), fb.Of(t1)), 24);  // coordinates 0 and 3 on dim 0
    EXPECT_GT(ref1, busiest(f1, t1, slow01, [](const std::vector<int64_t>& c) { return c[0] == 0; }));
    const double ref2 = busiest(f2, t2, two_speeds, all);
    EXPECT_EQ(SendRecvStepCost(m2, fa.Of(f2), fb.Of(t2), 4, two_speeds, false).us, ref2);
    EXPECT_EQ(SendRecvPricedDestinations(m2, fa.Of(f2), fb.Of(t2)), 8);
    EXPECT_GT(ref2, busiest(f2, t2, two_speeds, [](const std::vector<int64_t>& c) { return c[2] == 0; }));
  }
  // The benchmark's `S(0),S(1),S(2)` -> `S(2),S(1),S(0)` of [3000,2500,100] on 16x16x8: mesh dim 1
  // keeps tensor dim 1's chunks (15 of 157, then 145), so 16 x 2 x 8 ranks are priced; the time
  // and bytes are those of the pass over all 2048 ranks.
  {
    const DeviceMesh mesh = *DeviceMesh::Create({16, 16, 8});
    const Layout from = *Layout::Create({3000, 2500, 100}, mesh, {Shard{0}, Shard{1}, Shard{2}});
    const Layout to = *Layout::Create({3000, 2500, 100}, mesh, {Shard{2}, Shard{1}, Shard{0}});
    FlatChains fa, fb;
    const Topology topo;
    EXPECT_EQ(SendRecvPricedDestinations(mesh, fa.Of(from), fb.Of(to)), 256);
    const StepCost c = SendRecvStepCost(mesh, fa.Of(from), fb.Of(to), 4, topo, false);
    StatusOr<StepModel> full = ModelStep(*SendRecvStep(from, to), DType::kF32, topo);
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_EQ(c.us, full->us);
    EXPECT_EQ(c.max_bytes_per_rank, *std::max_element(full->bytes_per_rank.begin(), full->bytes_per_rank.end()));
  }
  EXPECT_GT(reduced, 120);
  EXPECT_GT(reduced_with_holders, 50);
  EXPECT_GT(unsorted, 100);
  EXPECT_LT(priced, ranks * 9 / 10);
  std::printf("translation classes: %d of %d steps priced fewer ranks (%d with Replicate sources), %lld of %lld "
              "ranks priced\n",
              reduced, checked, reduced_with_holders, static_cast<long long>(priced), static_cast<long long>(ranks));
}

// SendRecvFirstRankBoundUs: never above the first rank's exact incoming time, and within 1e-9
// relative of it (the closed-form count differs only by rounding), on random layouts of small
// meshes, of meshes with hundreds to thousands of ranks (an all-to-all's first rank has a source
// per rank), and of a mesh with 70 dims.
TEST(StepCostTest, SendRecvFirstRankBoundIsTight) {
  Gen gen{std::mt19937(77)};
  int checked = 0, nonzero = 0;
  auto check = [&](const Layout& from, const Layout& to, const Topology& topo) {
    FlatChains fa, fb;
    const ShardChains a = fa.Of(from), b = fb.Of(to);
    for (int64_t esize : {2, 8}) {
      const double exact = SendRecvStepCost(from.mesh(), a, b, esize, topo, true).us;
      const double bound = SendRecvFirstRankBoundUs(from.mesh(), a, b, esize, topo);
      EXPECT_LE(bound, exact) << from.ToString() << " -> " << to.PlacementsString();
      EXPECT_GE(bound, exact * (1 - 1e-9)) << from.ToString() << " -> " << to.PlacementsString();
      if (exact > 0) ++nonzero;
    }
    ++checked;
  };
  for (int i = 0; i < 3000; ++i) {
    const DeviceMesh mesh = gen.Mesh();
    const std::vector<int64_t> shape = gen.Shape();
    check(gen.RandomLayout(shape, mesh, false), gen.RandomLayout(shape, mesh, false), gen.Topo(mesh.ndim()));
  }
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{16, 16, 8}, {8, 8, 8}, {2, 4, 4, 8}}) {
    const DeviceMesh mesh = *DeviceMesh::Create(shape);
    for (int i = 0; i < 20; ++i) {
      const std::vector<int64_t> tshape{gen.Uniform(1, 3000), gen.Uniform(1, 2500), gen.Uniform(1, 100)};
      check(gen.RandomLayout(tshape, mesh, false), gen.RandomLayout(tshape, mesh, false), gen.Topo(mesh.ndim()));
    }
  }
  std::vector<int64_t> wide(70, 1);
  wide[3] = 2;
  wide[66] = 3;
  wide[69] = 2;
  const DeviceMesh many = *DeviceMesh::Create(wide);
  for (int i = 0; i < 20; ++i) {
    Placements pf(70, Replicate{}), pt(70, Replicate{});
    for (int m : {3, 66, 69}) {
      pf[static_cast<size_t>(m)] = gen.Uniform(0, 2) == 0 ? Placement{Replicate{}} : Placement{Shard{gen.Uniform(0, 1)}};
      pt[static_cast<size_t>(m)] = gen.Uniform(0, 2) == 0 ? Placement{Replicate{}} : Placement{Shard{gen.Uniform(0, 1)}};
    }
    Topology topo;
    topo.intra_dims = std::vector<int>{66};
    check(*Layout::Create({7, 12}, many, pf), *Layout::Create({7, 12}, many, pt), topo);
  }
  // A chain over 14 mesh dims of size 2 (16384 ranks): 2^14 masks, past the closed form's cap, so
  // the first rank is priced exactly (an all-to-all: one source per rank).
  const DeviceMesh deep = *DeviceMesh::Create(std::vector<int64_t>(14, 2));
  const Layout rows = *Layout::Create({16384, 3}, deep, Placements(14, Shard{0}));
  const Layout cols = *Layout::Create({16384, 3}, deep, Placements(14, Shard{1}));
  check(rows, cols, Topology());
  check(cols, rows, Topology());
  // 8 mesh dims of size 3 over 154184 rows: uneven chunks give 5392 groups before equal masks
  // merge into 2^8, so the list is cut at the cap and must not be used merged.
  const DeviceMesh threes = *DeviceMesh::Create(std::vector<int64_t>(8, 3));
  check(*Layout::Create({154184, 2}, threes, Placements(8, Shard{0})),
        *Layout::Create({154184, 2}, threes, Placements(8, Shard{1})), Topology());
  EXPECT_EQ(checked, 3083);
  EXPECT_GT(nonzero, 1500);
}

// The search as it was before send_recv edges were deferred: every edge relaxed eagerly at
// expansion, a strictly better path replaces, ties go to the first path found.
std::vector<PlanStep> EagerDijkstra(const Layout& from, const Layout& to, DType dtype, const Topology& topo) {
  using PathCost = std::tuple<int64_t, int64_t, int64_t>;
  auto key = [](const Layout& l) { return l.PlacementsString(); };
  std::vector<Layout> states{from};
  std::map<std::string, int> ids{{key(from), 0}};
  std::vector<PathCost> dist{PathCost{0, 0, 0}};
  std::vector<int> parent{-1};
  std::vector<std::optional<PlanStep>> via{std::nullopt};
  std::vector<bool> done{false};
  using Entry = std::pair<PathCost, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  queue.push({dist[0], 0});
  int found = -1;
  while (!queue.empty()) {
    const auto [cost, id] = queue.top();
    queue.pop();
    if (done[id] || cost != dist[id]) continue;
    done[id] = true;
    if (key(states[id]) == key(to)) {
      found = id;
      break;
    }
    std::vector<PlanStep> next = *Successors(states[id], to, dtype, topo);
    for (PlanStep& step : next) {
      const PathCost c{std::get<0>(cost) + CostUnits(step.modelled_us), std::get<1>(cost) + step.bytes_per_rank,
                       std::get<2>(cost) + 1};
      auto [it, inserted] = ids.emplace(key(step.to), static_cast<int>(states.size()));
      const int nid = it->second;
      if (inserted) {
        states.push_back(step.to);
        dist.push_back(c);
        parent.push_back(id);
        via.emplace_back(std::move(step));
        done.push_back(false);
        queue.push({c, nid});
      } else if (!done[nid] && c < dist[nid]) {
        dist[nid] = c;
        parent[nid] = id;
        via[nid] = std::move(step);
        queue.push({c, nid});
      }
    }
  }
  std::vector<PlanStep> steps;
  for (int id = found; id >= 0 && parent[id] >= 0; id = parent[id]) steps.push_back(*via[id]);
  std::reverse(steps.begin(), steps.end());
  return steps;
}

// PlanRedistribution against EagerDijkstra on `cases` random layout pairs over meshes from
// `mesh_of`: the same steps, costs and bytes. Counts compared cases and send_recv steps.
template <typename MeshOf>
void CompareWithEagerSearch(Gen& gen, int cases, MeshOf mesh_of, int* compared, int* with_send_recv) {
  for (int i = 0; i < cases; ++i) {
    const DeviceMesh mesh = mesh_of();
    const std::vector<int64_t> shape = gen.Shape();
    const Layout from = gen.RandomLayout(shape, mesh, true);
    const Layout to = gen.RandomLayout(shape, mesh, true);
    if (!CheckPlannable(from, to).ok()) continue;
    const Topology topo = gen.Topo(mesh.ndim());
    // Unlimited budget: the eager reference always searches to the end.
    StatusOr<Plan> plan = PlanRedistribution(from, to, DType::kF32, topo, SearchBudget{.max_edges = 0});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->proven_optimal);
    const std::vector<PlanStep> ref = EagerDijkstra(from, to, DType::kF32, topo);
    ASSERT_EQ(plan->steps.size(), ref.size()) << from.ToString() << " -> " << to.PlacementsString();
    for (size_t k = 0; k < ref.size(); ++k) {
      EXPECT_EQ(plan->steps[k].kind, ref[k].kind) << from.ToString() << " -> " << to.PlacementsString();
      EXPECT_EQ(plan->steps[k].mesh_dims, ref[k].mesh_dims);
      EXPECT_EQ(plan->steps[k].tensor_dim, ref[k].tensor_dim);
      EXPECT_EQ(plan->steps[k].dst_tensor_dim, ref[k].dst_tensor_dim);
      EXPECT_EQ(plan->steps[k].to, ref[k].to);
      EXPECT_EQ(plan->steps[k].modelled_us, ref[k].modelled_us);
      EXPECT_EQ(plan->steps[k].bytes_per_rank, ref[k].bytes_per_rank);
      if (ref[k].kind == StepKind::kSendRecv) ++*with_send_recv;
    }
    ++*compared;
  }
}

TEST(StepCostTest, SearchWithDeferredSendRecvEqualsEagerSearch) {
  Gen gen{std::mt19937(31337)};
  int with_send_recv = 0, compared = 0;
  CompareWithEagerSearch(gen, 400, [&] { return gen.Mesh(); }, &compared, &with_send_recv);
  EXPECT_GT(compared, 250);
  EXPECT_GT(with_send_recv, 8);
}

// The same on meshes large enough for the search to probe deferred send_recv edges
// (SendRecvProbeRanks non-empty) before pricing them over every rank.
TEST(StepCostTest, SearchWithProbedSendRecvEqualsEagerSearch) {
  Gen gen{std::mt19937(2718)};
  static const std::vector<std::vector<int64_t>> kMeshes = {{8, 8}, {16, 5}, {4, 4, 8}, {32, 4}};
  int with_send_recv = 0, compared = 0;
  CompareWithEagerSearch(
      gen, 200,
      [&] {
        const DeviceMesh mesh = *DeviceMesh::Create(kMeshes[gen.Uniform(0, static_cast<int>(kMeshes.size()) - 1)]);
        EXPECT_FALSE(SendRecvProbeRanks(mesh).empty()) << mesh.ToString();
        return mesh;
      },
      &compared, &with_send_recv);
  EXPECT_GT(compared, 120);
  EXPECT_GT(with_send_recv, 10);
  std::printf("probed search cases: %d compared, %d send_recv steps\n", compared, with_send_recv);
}

// The plan's costs (FillPlanCosts: box sizes per rank from per-tensor-dim tables, the lower bound
// without Partial target dims from the same tables; the search's FillPlanCostsOfSearch keeps the
// send_recv times it priced) against the per-rank reference summed over the steps and
// LowerBoundElementsPerRank, on optimal and direct plans of random layouts.
TEST(StepCostTest, PlanCostsMatchThePerRankReference) {
  Gen gen{std::mt19937(4242)};
  int compared = 0, with_send_recv = 0;
  for (int i = 0; i < 500; ++i) {
    const DeviceMesh mesh = gen.Mesh();
    const std::vector<int64_t> shape = gen.Shape();
    const bool partial = gen.Uniform(0, 1) == 0;
    const Layout from = gen.RandomLayout(shape, mesh, partial);
    const Layout to = gen.RandomLayout(shape, mesh, true);
    if (!CheckPlannable(from, to).ok()) continue;
    const Topology topo = gen.Topo(mesh.ndim());
    if (from == to) continue;  // the identity plan has no per-rank tables (SearchTest.Identity*)
    std::vector<Plan> plans;
    StatusOr<Plan> optimal = PlanRedistribution(from, to, DType::kI64, topo);
    ASSERT_TRUE(optimal.ok()) << optimal.status();
    plans.push_back(*optimal);
    if (StatusOr<Plan> direct = PlanDirect(from, to, DType::kI64, topo); direct.ok()) plans.push_back(*direct);
    for (const Plan& plan : plans) {
      std::vector<int64_t> per_rank(static_cast<size_t>(mesh.size()), 0);
      double us = 0;
      for (const PlanStep& step : plan.steps) {
        StatusOr<StepModel> ref = ReferenceModel(step, DType::kI64, topo);
        ASSERT_TRUE(ref.ok()) << ref.status();
        int64_t max_bytes = 0;
        for (size_t r = 0; r < per_rank.size(); ++r) {
          per_rank[r] += ref->bytes_per_rank[r];
          max_bytes = std::max(max_bytes, ref->bytes_per_rank[r]);
        }
        EXPECT_EQ(step.modelled_us, ref->us) << StepKindName(step.kind) << " " << step.from.ToString();
        EXPECT_EQ(step.bytes_per_rank, max_bytes) << StepKindName(step.kind) << " " << step.from.ToString();
        us += ref->us;
        if (step.kind == StepKind::kSendRecv) ++with_send_recv;
      }
      EXPECT_EQ(plan.bytes_received_per_rank, per_rank) << from.ToString() << " -> " << to.PlacementsString();
      EXPECT_EQ(plan.modelled_us, us);
      if (from.HasPartial()) {
        EXPECT_FALSE(plan.lower_bound_bytes_per_rank.has_value());
      } else {
        int64_t lb = 0;
        for (int64_t e : LowerBoundElementsPerRank(from, to)) lb = std::max(lb, e);
        ASSERT_TRUE(plan.lower_bound_bytes_per_rank.has_value());
        EXPECT_EQ(*plan.lower_bound_bytes_per_rank, lb * 8) << from.ToString() << " -> " << to.PlacementsString();
      }
      Plan again = plan;
      ASSERT_TRUE(FillPlanCostsOfSearch(again, topo).ok());
      EXPECT_EQ(again.bytes_received_per_rank, plan.bytes_received_per_rank);
      EXPECT_EQ(again.modelled_us, plan.modelled_us);
      EXPECT_EQ(again.lower_bound_bytes_per_rank, plan.lower_bound_bytes_per_rank);
      ++compared;
    }
  }
  EXPECT_GT(compared, 400);
  EXPECT_GT(with_send_recv, 50);
}

TEST(StepCostTest, ErrorsMatch) {
  const DeviceMesh mesh = *DeviceMesh::Create({2, 2});
  const Layout a = *Layout::Create({4, 4}, mesh, {Shard{0}, Replicate{}});
  PlanStep s = *AllGatherStep(a, {0});
  s.mesh_dims = {5};
  EXPECT_EQ(ModelStepCost(s, DType::kF32, Topology()).status().code(), StatusCode::kOutOfRange);
  PlanStep d = *SendRecvStep(a, *Layout::Create({4, 4}, mesh, {Replicate{}, Shard{1}}));
  d.from = *Layout::Create({4, 4}, mesh, {Partial{ReduceOp::kSum}, Replicate{}});
  EXPECT_EQ(ModelStepCost(d, DType::kF32, Topology()).status().code(),
            ModelStep(d, DType::kF32, Topology()).status().code());
}

}  // namespace
}  // namespace meshflow
