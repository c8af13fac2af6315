#include "meshflow/planner/search.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <queue>
#include <tuple>

#include "meshflow/planner/greedy_reference.h"
#include "meshflow/planner/transforms.h"

namespace meshflow {
namespace {

// Non-empty subsets of `elems` (each ascending), in a fixed order.
std::vector<std::vector<int>> Subsets(const std::vector<int>& elems) {
  std::vector<std::vector<int>> out;
  const size_t n = elems.size();
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    std::vector<int> s;
    for (size_t i = 0; i < n; ++i) {
      if (mask & (1u << i)) s.push_back(elems[i]);
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Every ordering of every non-empty subset of `elems`, in a fixed order.
std::vector<std::vector<int>> OrderedSubsets(const std::vector<int>& elems) {
  std::vector<std::vector<int>> out;
  for (std::vector<int> s : Subsets(elems)) {
    std::sort(s.begin(), s.end());
    do {
      out.push_back(s);
    } while (std::next_permutation(s.begin(), s.end()));
  }
  return out;
}

// The target with its Partial dims replaced by Replicate (what send_recv can reach).
StatusOr<Layout> WithoutPartial(const Layout& l) {
  if (!l.HasPartial()) return l;
  Placements ps = l.placements();
  for (Placement& p : ps) {
    if (IsPartial(p)) p = Replicate{};
  }
  return l.WithPlacements(std::move(ps), l.shard_order());
}

Plan EmptyPlan(const Layout& from, const Layout& to, DType dtype, const char* planner) {
  return Plan{from, to, dtype, planner, {}, 0, {}, 0, std::nullopt};
}

// True when, per tensor dim, the mesh dims of `set` sharding it are the innermost suffix of its
// shard order (the all_gather rule).
bool InnermostPerTensorDim(const Layout& state, const std::vector<int>& set) {
  for (int t = 0; t < state.tensor_rank(); ++t) {
    const std::vector<int>& o = state.shard_order()[t];
    size_t k = 0;
    for (int m : set) k += std::count(o.begin(), o.end(), m);
    for (size_t i = o.size() - k; i < o.size(); ++i) {
      if (std::find(set.begin(), set.end(), o[i]) == set.end()) return false;
    }
  }
  return true;
}

// Path cost: (picoseconds, sum of step bytes_per_rank, steps).
using PathCost = std::tuple<int64_t, int64_t, int64_t>;

// a + b for non-negative costs, saturating (a path of huge modelled times must not overflow).
int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

PathCost Extend(const PathCost& c, double us, int64_t bytes) {
  return PathCost{SatAdd(std::get<0>(c), CostUnits(us)), SatAdd(std::get<1>(c), bytes), std::get<2>(c) + 1};
}

// The path cost of a plan whose steps carry modelled_us and bytes_per_rank.
PathCost CostOfSteps(const std::vector<PlanStep>& steps) {
  PathCost c{0, 0, 0};
  for (const PlanStep& s : steps) c = Extend(c, s.modelled_us, s.bytes_per_rank);
  return c;
}

std::string FormatMs(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "nan";
  return std::string(buf, p);
}

}  // namespace

Status SearchBudget::Validate() const {
  if (max_edges < 0) {
    return InvalidArgumentError("search budget max_edges=" + std::to_string(max_edges) +
                                " must be >= 0 (0: unlimited)");
  }
  if (!(max_ms >= 0) || !std::isfinite(max_ms)) {
    return InvalidArgumentError("search budget max_ms=" + FormatMs(max_ms) + " must be >= 0 and finite (0: unlimited)");
  }
  return Status();
}

std::string SearchBudget::ToString() const {
  std::string out = "max_edges=" + std::to_string(max_edges);
  if (max_ms > 0) out += ";max_ms=" + FormatMs(max_ms);
  return out;
}

Status CheckPlannable(const Layout& from, const Layout& to) {
  if (!(from.mesh() == to.mesh())) {
    return InvalidArgumentError("cannot redistribute between different meshes: " + from.mesh().ToString() + " vs " +
                                to.mesh().ToString());
  }
  if (from.global_shape() != to.global_shape()) {
    return InvalidArgumentError("cannot redistribute between different global shapes: " + from.ToString() + " vs " +
                                to.ToString());
  }
  const std::optional<ReduceOp> a = from.partial_op();
  const std::optional<ReduceOp> b = to.partial_op();
  if (a && b && *a != *b) {
    return InvalidArgumentError("Partial(" + std::string(ReduceOpName(*a)) + ") -> Partial(" +
                                std::string(ReduceOpName(*b)) + ") is not supported (" + from.PlacementsString() +
                                " -> " + to.PlacementsString() + ")");
  }
  return Status();
}

namespace {

// The search's edges from `state` towards `target`, in the fixed edge order, without costs. The
// send_recv edge, when there is one, is the last.
StatusOr<std::vector<PlanStep>> Edges(const Layout& state, const Layout& target) {
  std::vector<PlanStep> out;
  const int nd = state.mesh().ndim();
  const int tr = state.tensor_rank();
  std::vector<int> shard_dims, rep_dims, partial_dims, lp_dims, sp_dims;
  for (int m = 0; m < nd; ++m) {
    const Placement& p = state.placement(m);
    if (IsShard(p)) shard_dims.push_back(m);
    if (IsReplicate(p)) rep_dims.push_back(m);
    if (IsPartial(p)) partial_dims.push_back(m);
    if (IsReplicate(p) && IsPartial(target.placement(m))) lp_dims.push_back(m);
    if (IsShard(p) && IsPartial(target.placement(m))) sp_dims.push_back(m);
  }
  auto add = [&](StatusOr<PlanStep> s) -> Status {
    if (!s.ok()) return InternalError("planner edge rejected by its own rule: " + s.status().ToString());
    out.push_back(std::move(s).value());
    return Status();
  };
  // all_gather: sets whose dims per tensor dim form an innermost suffix.
  for (const std::vector<int>& set : Subsets(shard_dims)) {
    if (InnermostPerTensorDim(state, set)) MF_RETURN_IF_ERROR(add(AllGatherStep(state, set)));
  }
  // all_reduce.
  for (const std::vector<int>& set : Subsets(partial_dims)) MF_RETURN_IF_ERROR(add(AllReduceStep(state, set)));
  // reduce_scatter.
  for (const std::vector<int>& set : OrderedSubsets(partial_dims)) {
    for (int t = 0; t < tr; ++t) MF_RETURN_IF_ERROR(add(ReduceScatterStep(state, set, t)));
  }
  // all_to_all: innermost suffixes.
  for (int i = 0; i < tr; ++i) {
    const std::vector<int>& o = state.shard_order()[i];
    for (size_t k = 1; k <= o.size(); ++k) {
      std::vector<int> suffix(o.end() - static_cast<std::ptrdiff_t>(k), o.end());
      std::sort(suffix.begin(), suffix.end());
      for (int j = 0; j < tr; ++j) {
        if (j == i) continue;
        std::vector<int> perm = suffix;
        do {
          MF_RETURN_IF_ERROR(add(AllToAllStep(state, perm, i, j)));
        } while (std::next_permutation(perm.begin(), perm.end()));
      }
    }
  }
  // local_slice.
  for (const std::vector<int>& set : OrderedSubsets(rep_dims)) {
    for (int t = 0; t < tr; ++t) MF_RETURN_IF_ERROR(add(LocalSliceStep(state, set, t)));
  }
  // local_partial (only towards a Partial target).
  if (const std::optional<ReduceOp> op = target.partial_op()) {
    for (const std::vector<int>& set : Subsets(lp_dims)) MF_RETURN_IF_ERROR(add(LocalPartialStep(state, set, *op)));
  }
  // local_shard_to_partial (only towards a Partial(sum|max|min) target): sets of Shard dims on
  // which the target is Partial, innermost per tensor dim (the all_gather rule).
  if (const std::optional<ReduceOp> op = target.partial_op(); op && *op != ReduceOp::kAvg) {
    for (const std::vector<int>& set : Subsets(sp_dims)) {
      if (InnermostPerTensorDim(state, set)) MF_RETURN_IF_ERROR(add(LocalShardToPartialStep(state, set, *op)));
    }
  }
  // send_recv straight to the (Partial-free) target.
  if (!state.HasPartial()) {
    MF_ASSIGN_OR_RETURN(Layout direct_to, WithoutPartial(target));
    if (!(direct_to == state)) MF_RETURN_IF_ERROR(add(SendRecvStep(state, direct_to)));
  }
  return out;
}

}  // namespace

StatusOr<std::vector<PlanStep>> Successors(const Layout& state, const Layout& target, DType dtype,
                                           const Topology& topo) {
  MF_ASSIGN_OR_RETURN(std::vector<PlanStep> out, Edges(state, target));
  // The search needs each edge's time and busiest-rank bytes only (ModelStepCost: no per-rank
  // model); FillPlanCosts models the chosen plan's steps in full.
  for (PlanStep& s : out) {
    MF_ASSIGN_OR_RETURN(StepCost c, ModelStepCost(s, dtype, topo));
    s.modelled_us = c.us;
    s.bytes_per_rank = c.max_bytes_per_rank;
  }
  return out;
}

namespace {

// The fallback of a search stopped at its budget that needs no search: all_reduce every Partial
// dim of the source, then the direct plan (send_recv, then local_partial towards a Partial
// target). Steps priced like the search's edges.
StatusOr<std::vector<PlanStep>> ReduceThenDirect(const Layout& from, const Layout& to, DType dtype,
                                                 const Topology& topo) {
  std::vector<PlanStep> steps;
  Layout cur = from;
  if (from.HasPartial()) {
    std::vector<int> dims;
    for (int m = 0; m < from.mesh().ndim(); ++m) {
      if (IsPartial(from.placement(m))) dims.push_back(m);
    }
    MF_ASSIGN_OR_RETURN(PlanStep s, AllReduceStep(from, dims));
    cur = s.to;
    steps.push_back(std::move(s));
  }
  if (!(cur == to)) {
    MF_ASSIGN_OR_RETURN(Plan direct, PlanDirect(cur, to, dtype, topo));
    for (PlanStep& s : direct.steps) steps.push_back(std::move(s));
  }
  for (PlanStep& s : steps) {
    MF_ASSIGN_OR_RETURN(StepCost c, ModelStepCost(s, dtype, topo));
    s.modelled_us = c.us;
    s.bytes_per_rank = c.max_bytes_per_rank;
  }
  return steps;
}

}  // namespace

namespace {

// The search's compact states (no Layout per edge). A state of an nd-D mesh and rank-tr tensor is
// 2*nd + tr + 1 ints: per mesh dim its placement code (Shard(t) = t, Replicate = -1, Partial =
// -2; every Partial of one search has the same op), then the shard order as concatenated chains
// (tensor dim 0's mesh dims outermost first, then tensor dim 1's, ...; padded with -1 to nd),
// then the tr + 1 chain offsets. The first 2*nd ints determine the state (the offsets follow
// from the codes): they are its key.
class StateSpace {
 public:
  StateSpace(const Layout& like, std::optional<ReduceOp> op)
      : like_(like), op_(op), nd_(like.mesh().ndim()), tr_(like.tensor_rank()), stride_(2 * nd_ + tr_ + 1) {
    table_.assign(64, -1);
  }
  int nd() const { return nd_; }
  int tr() const { return tr_; }
  int stride() const { return stride_; }
  size_t size() const { return pool_.size() / static_cast<size_t>(stride_); }
  const int* state(int id) const { return pool_.data() + static_cast<size_t>(id) * stride_; }

  void Encode(const Layout& l, int* out) const {
    int k = 0;
    for (int m = 0; m < nd_; ++m) {
      const Placement& p = l.placement(m);
      const Shard* sh = std::get_if<Shard>(&p);
      out[m] = sh != nullptr ? sh->dim : (IsReplicate(p) ? -1 : -2);
    }
    int* begin = out + 2 * nd_;
    for (int t = 0; t < tr_; ++t) {
      begin[t] = k;
      for (int m : l.shard_order()[t]) out[nd_ + k++] = m;
    }
    begin[tr_] = k;
    for (; k < nd_; ++k) out[nd_ + k] = -1;
  }

  // `st` with the mesh dims `dims` set to `code`, removed from their chains, and (when
  // append_t >= 0) appended in the order given to tensor dim append_t's chain.
  void Derive(const int* st, std::span<const int> dims, int code, int append_t, int* out) const {
    uint64_t mask = 0;
    for (int m : dims) mask |= uint64_t{1} << m;
    std::copy(st, st + nd_, out);
    for (int m : dims) out[m] = code;
    const int* begin = st + 2 * nd_;
    int* nbegin = out + 2 * nd_;
    int k = 0;
    for (int t = 0; t < tr_; ++t) {
      nbegin[t] = k;
      for (int i = begin[t]; i < begin[t + 1]; ++i) {
        const int m = st[nd_ + i];
        if (!(mask & (uint64_t{1} << m))) out[nd_ + k++] = m;
      }
      if (t == append_t) {
        for (int m : dims) out[nd_ + k++] = m;
      }
    }
    nbegin[tr_] = k;
    for (; k < nd_; ++k) out[nd_ + k] = -1;
  }

  ShardChains Chains(const int* st) const {
    const int* begin = st + 2 * nd_;
    return ShardChains{like_.global_shape(), like_.mesh().shape(),
                       std::span<const int>(st + nd_, static_cast<size_t>(begin[tr_])),
                       std::span<const int>(begin, static_cast<size_t>(tr_ + 1))};
  }

  bool SameKey(const int* a, const int* b) const { return std::equal(a, a + 2 * nd_, b); }

  // The id of `st`, inserting it when new (*inserted says which).
  int FindOrInsert(const int* st, bool* inserted) {
    size_t slot = Hash(st) & (table_.size() - 1);
    while (table_[slot] >= 0) {
      if (SameKey(state(table_[slot]), st)) {
        *inserted = false;
        return table_[slot];
      }
      slot = (slot + 1) & (table_.size() - 1);
    }
    const int id = static_cast<int>(size());
    pool_.insert(pool_.end(), st, st + stride_);
    table_[slot] = id;
    *inserted = true;
    if (size() * 2 > table_.size()) Rehash();
    return id;
  }

 private:
  uint64_t Hash(const int* st) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 2 * nd_; ++i) {
      h ^= static_cast<uint64_t>(static_cast<uint32_t>(st[i])) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return h * 0xff51afd7ed558ccdull;
  }
  void Rehash() {
    std::vector<int> t(table_.size() * 2, -1);
    for (int id = 0; id < static_cast<int>(size()); ++id) {
      size_t slot = Hash(state(id)) & (t.size() - 1);
      while (t[slot] >= 0) slot = (slot + 1) & (t.size() - 1);
      t[slot] = id;
    }
    table_.swap(t);
  }

  const Layout& like_;
  std::optional<ReduceOp> op_;
  int nd_, tr_, stride_;
  std::vector<int> pool_;
  std::vector<int> table_;  // open addressing, state ids, -1 = empty
};

// Calls f(span) for every non-empty subset of `elems` (each in elems' order), in Subsets' order.
template <typename F>
Status ForEachSubset(std::span<const int> elems, std::vector<int>& buf, F&& f) {
  const size_t n = elems.size();
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    buf.clear();
    for (size_t i = 0; i < n; ++i) {
      if (mask & (1u << i)) buf.push_back(elems[i]);
    }
    MF_RETURN_IF_ERROR(f(std::span<const int>(buf)));
  }
  return Status();
}

// Every ordering of every non-empty subset, in OrderedSubsets' order.
template <typename F>
Status ForEachOrderedSubset(std::span<const int> elems, std::vector<int>& buf, F&& f) {
  const size_t n = elems.size();
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    buf.clear();
    for (size_t i = 0; i < n; ++i) {
      if (mask & (1u << i)) buf.push_back(elems[i]);
    }
    std::sort(buf.begin(), buf.end());
    do {
      MF_RETURN_IF_ERROR(f(std::span<const int>(buf)));
    } while (std::next_permutation(buf.begin(), buf.end()));
  }
  return Status();
}

// The all_gather rule on a compact state: per tensor dim, the dims of `set` in its chain are its
// innermost suffix.
bool InnermostPerChain(const StateSpace& sp, const int* st, std::span<const int> set) {
  uint64_t mask = 0;
  for (int m : set) mask |= uint64_t{1} << m;
  const int* begin = st + 2 * sp.nd();
  const int* dims = st + sp.nd();
  for (int t = 0; t < sp.tr(); ++t) {
    int k = 0;
    for (int i = begin[t]; i < begin[t + 1]; ++i) k += (mask >> dims[i]) & 1 ? 1 : 0;
    for (int i = begin[t + 1] - k; i < begin[t + 1]; ++i) {
      if (!((mask >> dims[i]) & 1)) return false;
    }
  }
  return true;
}

// How the search reached a state: enough to rebuild the PlanStep with its builder.
struct Via {
  StepKind kind = StepKind::kSendRecv;
  int dims_off = 0, dims_len = 0;  // into the search's via_dims
  int t = -1, t2 = -1;
  double us = 0;
  int64_t bytes = 0;
};

}  // namespace

StatusOr<Plan> PlanRedistribution(const Layout& from, const Layout& to, DType dtype, const Topology& topo,
                                  const SearchBudget& budget) {
  MF_RETURN_IF_ERROR(topo.ValidateForMesh(from.mesh().ndim()));
  MF_RETURN_IF_ERROR(budget.Validate());
  MF_RETURN_IF_ERROR(CheckPlannable(from, to));
  Plan plan = EmptyPlan(from, to, dtype, "optimal");
  plan.proven_optimal = true;
  if (!(from == to)) {
    // Dijkstra over compact states (StateSpace), with the edges of Edges() generated in the same
    // order and priced with CollectiveStepCost (ModelStepCost's doubles); only the chosen path
    // is rebuilt as PlanSteps. A relaxation carries a stamp (expansion index of its parent, edge
    // index): relaxations happen in stamp order, except the send_recv edges, which are deferred:
    // pricing one needs a pass over the destination ranks (every rank, or one per translation
    // class: SendRecvPricedDestinations), and most are never on a competitive path. At
    // expansion, a send_recv edge only reserves its target's state id (ids, and so the
    // queue's tie order, are what eager relaxation would give) and queues a placeholder keyed by
    // a lower bound of its path cost (the incoming time of the first rank, counted by link in
    // closed form less a rounding slack: SendRecvFirstRankBoundUs), ordered before real entries
    // of equal key. The first time the placeholder pops while its target has a path, its key is
    // raised to the bound of a few ranks' exact terms (SendRecvProbeUs, often the time itself)
    // and, if that is higher, it is queued again; the next time it pops it is priced and
    // relaxed unless its state is done; ties on cost go to the smaller stamp. Every
    // entry popped before it has a key below the edge's true cost, so the result (dist, parent,
    // via of every state popped, and the pop order) equals relaxing every edge eagerly in stamp
    // order, where the first of equal-cost paths wins.
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    const PathCost kUnreached{kMax, kMax, kMax};
    using Stamp = std::pair<int64_t, int>;
    const std::optional<ReduceOp> op = from.partial_op() ? from.partial_op() : to.partial_op();
    const int64_t esize = DTypeSize(dtype);
    StateSpace sp(from, op);
    const int nd = sp.nd();
    const int tr = sp.tr();
    const size_t stride = static_cast<size_t>(sp.stride());
    std::vector<int> cur(stride), cand(stride), target_st(stride), direct_st(stride);
    sp.Encode(to, target_st.data());
    bool inserted = false;
    {
      std::vector<int> s0(stride);
      sp.Encode(from, s0.data());
      sp.FindOrInsert(s0.data(), &inserted);
    }
    MF_ASSIGN_OR_RETURN(const Layout direct_to, WithoutPartial(to));
    sp.Encode(direct_to, direct_st.data());
    std::vector<PathCost> dist{PathCost{0, 0, 0}};
    std::vector<Stamp> stamp{Stamp{-1, 0}};
    std::vector<int> parent{-1};
    std::vector<Via> via{Via{}};
    std::vector<int> via_dims;
    std::vector<bool> done{false};
    // Per state, MaxLocalElements of its layout (-1: not computed yet): every collective edge's
    // time needs both sides', and a state is the side of many edges.
    std::vector<int64_t> max_local{-1};
    auto max_local_of = [&](int state_id, const ShardChains& chains) {
      int64_t& m = max_local[static_cast<size_t>(state_id)];
      if (m < 0) m = MaxLocalElements(chains);
      return m;
    };
    struct Deferred {
      int parent;
      PathCost parent_cost;
      Stamp stamp;
      int target_id;
      bool priced = false;
      bool probed = false;  // its key was raised to SendRecvProbeUs' bound
    };
    std::vector<Deferred> deferred;
    using Entry = std::pair<PathCost, int>;  // id >= 0: a state; id < 0: deferred[-id - 1]
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
    queue.push({dist[0], 0});
    int found = -1;
    // The target's state id once an edge has reached it (-1 before). An edge whose path time
    // exceeds the target's best so far cannot lead to a state popped before the target: it is not
    // relaxed (nor its byte count computed, nor a send_recv placeholder queued), which changes no
    // popped state, parent or pop order.
    int target_id = -1;
    auto beyond_target = [&](int64_t time_units) {
      return target_id >= 0 && time_units > std::get<0>(dist[static_cast<size_t>(target_id)]);
    };
    bool stopped = false;  // the budget ran out before the target was expanded
    int64_t expansions = 0;
    int64_t edges = 0;  // edges generated (and priced or queued): the budget's unit
    const auto started = std::chrono::steady_clock::now();
    auto out_of_budget = [&]() {
      if (budget.max_edges > 0 && edges >= budget.max_edges) return true;
      if (budget.max_ms > 0) {
        const std::chrono::duration<double, std::milli> spent = std::chrono::steady_clock::now() - started;
        if (spent.count() >= budget.max_ms) return true;
      }
      return false;
    };
    auto relax = [&](int nid, const PathCost& c, const Stamp& st, int pid, const Via& v,
                     std::span<const int> dims) {
      if (done[nid]) return;
      if (c < dist[nid] || (c == dist[nid] && st < stamp[nid])) {
        const bool lower = c < dist[nid];
        dist[nid] = c;
        stamp[nid] = st;
        parent[nid] = pid;
        via[nid] = v;
        via[nid].dims_off = static_cast<int>(via_dims.size());
        via[nid].dims_len = static_cast<int>(dims.size());
        via_dims.insert(via_dims.end(), dims.begin(), dims.end());
        if (lower) queue.push({c, nid});
      }
    };
    std::vector<int> all_dims(static_cast<size_t>(nd));
    for (int m = 0; m < nd; ++m) all_dims[m] = m;
    const ShardChains direct_chains = sp.Chains(direct_st.data());
    const std::vector<int64_t> probes = SendRecvProbeRanks(from.mesh());  // empty: no probing
    auto price_deferred = [&](Deferred& d) -> Status {
      // Only a time within dist - parent can relax the target (a higher one makes a strictly
      // higher path cost): the pricing gives up as soon as the time is known to exceed it.
      const int64_t target_time = std::get<0>(dist[d.target_id]);
      const int64_t limit = target_time == kMax ? kMax : target_time - std::get<0>(d.parent_cost);
      const std::optional<StepCost> sc =
          SendRecvStepCostWithin(from.mesh(), sp.Chains(sp.state(d.parent)), direct_chains, esize, topo, limit);
      d.priced = true;
      if (!sc) return Status();  // eager relaxation would change nothing
      Via v{StepKind::kSendRecv, 0, 0, -1, -1, sc->us, sc->max_bytes_per_rank};
      relax(d.target_id, Extend(d.parent_cost, sc->us, sc->max_bytes_per_rank), d.stamp, d.parent, v, all_dims);
      return Status();
    };
    std::vector<int> shard_dims, rep_dims, partial_dims, lp_dims, sp_dims, buf, suffix;
    while (!queue.empty()) {
      // Not a structured binding: clang 14 (the fuzz build) cannot capture one in the lambdas below.
      const PathCost cost = queue.top().first;
      const int id = queue.top().second;
      queue.pop();
      if (id < 0) {
        Deferred& d = deferred[static_cast<size_t>(-id - 1)];
        if (done[d.target_id]) continue;
        if (!d.probed && !probes.empty() && dist[d.target_id] != kUnreached) {
          // Before pricing every rank, a few ranks' exact terms (a lower bound that is often the
          // time itself): when it raises the key, the edge waits in the queue again, and the
          // target is often reached by a cheaper path first. Not while the target has no path
          // yet: then the edge's price is what bounds the rest of the search (its pruning and
          // the give-up limits), and delaying it rarely pays.
          d.probed = true;
          const double probe =
              SendRecvProbeUs(from.mesh(), sp.Chains(sp.state(d.parent)), direct_chains, esize, topo, probes);
          const PathCost key{SatAdd(std::get<0>(d.parent_cost), CostUnits(probe)), std::get<1>(d.parent_cost),
                             std::get<2>(d.parent_cost) + 1};
          if (cost < key) {
            queue.push({key, id});
            continue;
          }
        }
        MF_RETURN_IF_ERROR(price_deferred(d));
        continue;
      }
      if (done[id] || cost != dist[id]) continue;
      if (sp.SameKey(sp.state(id), target_st.data())) {
        done[id] = true;
        found = id;
        break;
      }
      if (out_of_budget()) {
        stopped = true;
        break;
      }
      done[id] = true;
      const int64_t expansion = expansions++;
      std::copy(sp.state(id), sp.state(id) + stride, cur.begin());
      const ShardChains cur_chains = sp.Chains(cur.data());
      int e = 0;  // edge index within this expansion
      // One edge: the state `cand`, reached by `kind` on `dims`.
      auto edge = [&](StepKind kind, std::span<const int> dims, int t, int t2) -> Status {
        const Stamp st{expansion, e++};
        ++edges;
        const int nid = sp.FindOrInsert(cand.data(), &inserted);
        if (inserted && sp.SameKey(cand.data(), target_st.data())) target_id = nid;
        if (inserted) {
          dist.push_back(kUnreached);
          stamp.push_back(st);
          parent.push_back(-1);
          via.emplace_back();
          done.push_back(false);
          max_local.push_back(-1);
        }
        if (done[nid]) return Status();  // eager relaxation would change nothing either
        if (kind == StepKind::kSendRecv) {
          const double lb = SendRecvFirstRankBoundUs(from.mesh(), cur_chains, direct_chains, esize, topo);
          const PathCost key_lb{SatAdd(std::get<0>(cost), CostUnits(lb)), std::get<1>(cost), std::get<2>(cost) + 1};
          if (!(key_lb < dist[nid])) return Status();  // the true cost is no lower: never relaxed
          if (beyond_target(std::get<0>(key_lb))) return Status();
          deferred.push_back(Deferred{id, cost, st, nid});
          queue.push({key_lb, -static_cast<int>(deferred.size())});
          return Status();
        }
        const ShardChains cand_chains = sp.Chains(cand.data());
        StepExtents extents;
        if (!IsLocalStep(kind)) {
          extents = StepExtents{max_local_of(id, cur_chains), max_local_of(nid, cand_chains)};
          // The time alone decides unless it ties: skip the byte count of a losing edge.
          const StepCost time = CollectiveStepCost(kind, dims, cur_chains, cand_chains, extents, esize, topo, true);
          const int64_t time_units = SatAdd(std::get<0>(cost), CostUnits(time.us));
          if (time_units > std::get<0>(dist[nid]) || beyond_target(time_units)) return Status();
        }
        const StepCost sc = CollectiveStepCost(kind, dims, cur_chains, cand_chains, extents, esize, topo);
        relax(nid, Extend(cost, sc.us, sc.max_bytes_per_rank), st, id, Via{kind, 0, 0, t, t2, sc.us, sc.max_bytes_per_rank},
              dims);
        return Status();
      };
      shard_dims.clear();
      rep_dims.clear();
      partial_dims.clear();
      lp_dims.clear();
      sp_dims.clear();
      for (int m = 0; m < nd; ++m) {
        const int c = cur[m];
        const int tc = target_st[m];
        if (c >= 0) shard_dims.push_back(m);
        if (c == -1) rep_dims.push_back(m);
        if (c == -2) partial_dims.push_back(m);
        if (c == -1 && tc == -2) lp_dims.push_back(m);
        if (c >= 0 && tc == -2) sp_dims.push_back(m);
      }
      // all_gather: sets whose dims per tensor dim form an innermost suffix.
      MF_RETURN_IF_ERROR(ForEachSubset(shard_dims, buf, [&](std::span<const int> set) -> Status {
        if (!InnermostPerChain(sp, cur.data(), set)) return Status();
        int single = -2;
        for (int m : set) single = single == -2 || single == cur[m] ? cur[m] : -1;
        sp.Derive(cur.data(), set, -1, -1, cand.data());
        return edge(StepKind::kAllGather, set, single, -1);
      }));
      // all_reduce.
      MF_RETURN_IF_ERROR(ForEachSubset(partial_dims, buf, [&](std::span<const int> set) -> Status {
        sp.Derive(cur.data(), set, -1, -1, cand.data());
        return edge(StepKind::kAllReduce, set, -1, -1);
      }));
      // reduce_scatter.
      MF_RETURN_IF_ERROR(ForEachOrderedSubset(partial_dims, buf, [&](std::span<const int> set) -> Status {
        for (int t = 0; t < tr; ++t) {
          sp.Derive(cur.data(), set, t, t, cand.data());
          MF_RETURN_IF_ERROR(edge(StepKind::kReduceScatter, set, t, -1));
        }
        return Status();
      }));
      // all_to_all: innermost suffixes.
      for (int i = 0; i < tr; ++i) {
        const std::span<const int> o = cur_chains.chain(i);
        for (size_t k = 1; k <= o.size(); ++k) {
          suffix.assign(o.end() - static_cast<std::ptrdiff_t>(k), o.end());
          std::sort(suffix.begin(), suffix.end());
          for (int j = 0; j < tr; ++j) {
            if (j == i) continue;
            buf = suffix;
            do {
              sp.Derive(cur.data(), buf, j, j, cand.data());
              MF_RETURN_IF_ERROR(edge(StepKind::kAllToAll, buf, i, j));
            } while (std::next_permutation(buf.begin(), buf.end()));
          }
        }
      }
      // local_slice.
      MF_RETURN_IF_ERROR(ForEachOrderedSubset(rep_dims, buf, [&](std::span<const int> set) -> Status {
        for (int t = 0; t < tr; ++t) {
          sp.Derive(cur.data(), set, t, t, cand.data());
          MF_RETURN_IF_ERROR(edge(StepKind::kLocalSlice, set, t, -1));
        }
        return Status();
      }));
      // local_partial (only towards a Partial target).
      if (to.partial_op()) {
        MF_RETURN_IF_ERROR(ForEachSubset(lp_dims, buf, [&](std::span<const int> set) -> Status {
          sp.Derive(cur.data(), set, -2, -1, cand.data());
          return edge(StepKind::kLocalPartial, set, -1, -1);
        }));
      }
      // local_shard_to_partial (only towards a Partial(sum|max|min) target).
      if (const std::optional<ReduceOp> top = to.partial_op(); top && *top != ReduceOp::kAvg) {
        MF_RETURN_IF_ERROR(ForEachSubset(sp_dims, buf, [&](std::span<const int> set) -> Status {
          if (!InnermostPerChain(sp, cur.data(), set)) return Status();
          int single = -2;
          for (int m : set) single = single == -2 || single == cur[m] ? cur[m] : -1;
          sp.Derive(cur.data(), set, -2, -1, cand.data());
          return edge(StepKind::kLocalShardToPartial, set, single, -1);
        }));
      }
      // send_recv straight to the (Partial-free) target.
      if (partial_dims.empty() && !sp.SameKey(direct_st.data(), cur.data())) {
        std::copy(direct_st.begin(), direct_st.end(), cand.begin());
        MF_RETURN_IF_ERROR(edge(StepKind::kSendRecv, all_dims, -1, -1));
      }
    }
    plan.search_edges = edges;
    // The steps to state `id`, rebuilt with their builders from `from`, priced as searched.
    auto path_to = [&](int id) -> StatusOr<std::vector<PlanStep>> {
      std::vector<int> ids;
      for (int i = id; parent[i] >= 0; i = parent[i]) ids.push_back(i);
      std::reverse(ids.begin(), ids.end());
      std::vector<PlanStep> steps;
      Layout l = from;
      for (int i : ids) {
        const Via& v = via[i];
        std::vector<int> dims(via_dims.begin() + v.dims_off, via_dims.begin() + v.dims_off + v.dims_len);
        auto build = [&]() -> StatusOr<PlanStep> {
          switch (v.kind) {
            case StepKind::kAllGather: return AllGatherStep(l, dims);
            case StepKind::kAllReduce: return AllReduceStep(l, dims);
            case StepKind::kReduceScatter: return ReduceScatterStep(l, dims, v.t);
            case StepKind::kAllToAll: return AllToAllStep(l, dims, v.t, v.t2);
            case StepKind::kLocalSlice: return LocalSliceStep(l, dims, v.t);
            case StepKind::kLocalPartial: return LocalPartialStep(l, dims, *op);
            case StepKind::kLocalShardToPartial: return LocalShardToPartialStep(l, dims, *op);
            case StepKind::kSendRecv: break;
          }
          return SendRecvStep(l, direct_to);
        };
        StatusOr<PlanStep> s = build();
        if (!s.ok()) return InternalError("planner edge rejected by its own rule: " + s.status().ToString());
        s->modelled_us = v.us;
        s->bytes_per_rank = v.bytes;
        l = s->to;
        steps.push_back(std::move(s).value());
      }
      return steps;
    };
    if (found >= 0) {
      MF_ASSIGN_OR_RETURN(plan.steps, path_to(found));
    } else if (!stopped) {
      return InternalError("no plan found from " + from.ToString() + " to " + to.ToString());
    } else {
      // Out of budget: the cheapest of the best path reaching the target so far (its queued
      // send_recv edges priced first), the greedy plan and reduce-then-direct. Ties keep the
      // first, in that order.
      plan.proven_optimal = false;
      std::optional<std::vector<PlanStep>> best;
      PathCost best_cost = kUnreached;
      if (const int tid = target_id; tid >= 0) {
        for (Deferred& d : deferred) {
          if (d.target_id == tid && !d.priced) MF_RETURN_IF_ERROR(price_deferred(d));
        }
        if (parent[tid] >= 0) {
          MF_ASSIGN_OR_RETURN(best, path_to(tid));
          best_cost = dist[tid];
        }
      }
      if (StatusOr<Plan> greedy = PlanGreedy(from, to, dtype, topo); greedy.ok()) {
        const PathCost c = CostOfSteps(greedy->steps);
        if (!best || c < best_cost) {
          best = std::move(greedy->steps);
          best_cost = c;
        }
      }
      if (StatusOr<std::vector<PlanStep>> rd = ReduceThenDirect(from, to, dtype, topo); rd.ok()) {
        const PathCost c = CostOfSteps(*rd);
        if (!best || c < best_cost) {
          best = std::move(*rd);
          best_cost = c;
        }
      }
      if (!best) {
        return InternalError("search budget (" + budget.ToString() + ") ran out and no fallback plan applies from " +
                             from.ToString() + " to " + to.ToString());
      }
      plan.steps = std::move(*best);
    }
  }
  MF_RETURN_IF_ERROR(FillPlanCostsOfSearch(plan, topo));
  return plan;
}

StatusOr<Plan> PlanDirect(const Layout& from, const Layout& to, DType dtype, const Topology& topo) {
  MF_RETURN_IF_ERROR(topo.ValidateForMesh(from.mesh().ndim()));
  MF_RETURN_IF_ERROR(CheckPlannable(from, to));
  Plan plan = EmptyPlan(from, to, dtype, "direct");
  if (!(from == to)) {
    if (from.HasPartial()) {
      return InvalidArgumentError("the direct planner cannot start from a Partial layout (" + from.PlacementsString() +
                                  "); reduce first or use PlanRedistribution");
    }
    MF_ASSIGN_OR_RETURN(Layout direct_to, WithoutPartial(to));
    if (!(direct_to == from)) {
      MF_ASSIGN_OR_RETURN(PlanStep s, SendRecvStep(from, direct_to));
      plan.steps.push_back(std::move(s));
    }
    if (const std::optional<ReduceOp> op = to.partial_op()) {
      std::vector<int> dims;
      for (int m = 0; m < to.mesh().ndim(); ++m) {
        if (IsPartial(to.placement(m))) dims.push_back(m);
      }
      MF_ASSIGN_OR_RETURN(PlanStep s, LocalPartialStep(direct_to, dims, *op));
      plan.steps.push_back(std::move(s));
    }
  }
  MF_RETURN_IF_ERROR(FillPlanCosts(plan, topo));
  return plan;
}

}  // namespace meshflow
