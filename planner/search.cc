#include "meshflow/planner/search.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <queue>
#include <tuple>

#include "meshflow/planner/chains.h"
#include "meshflow/planner/collective_pricing.h"
#include "meshflow/planner/greedy_reference.h"
#include "meshflow/planner/send_recv_pricing.h"
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

Plan EmptyPlan(const Layout& from, const Layout& to, DType dtype, PlannerKind planner) {
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

// Placement codes of a compact state (StateSpace below): Shard(t) is t >= 0, and these.
constexpr int kReplicateCode = -1;
constexpr int kPartialCode = -2;
// Fills a compact state's chain slots past its last sharding mesh dim.
constexpr int kChainPad = -1;

// The search's compact states (no Layout per edge). A state of an nd-D mesh and rank-tr tensor is
// 2*nd + tr + 1 ints: per mesh dim its placement code (Shard(t) = t, kReplicateCode,
// kPartialCode; every Partial of one search has the same op), then the shard order as
// concatenated chains (tensor dim 0's mesh dims outermost first, then tensor dim 1's, ...; padded
// with kChainPad to nd),
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
      out[m] = sh != nullptr ? sh->dim : (IsReplicate(p) ? kReplicateCode : kPartialCode);
    }
    int* begin = out + 2 * nd_;
    for (int t = 0; t < tr_; ++t) {
      begin[t] = k;
      for (int m : l.shard_order()[t]) out[nd_ + k++] = m;
    }
    begin[tr_] = k;
    for (; k < nd_; ++k) out[nd_ + k] = kChainPad;
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
    for (; k < nd_; ++k) out[nd_ + k] = kChainPad;
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

// The tensor dim that every mesh dim of the non-empty `set` shards in the compact state `st`, or
// -1 when they shard different tensor dims (the tensor_dim of an all_gather /
// local_shard_to_partial step).
int SingleShardedTensorDim(const int* st, std::span<const int> set) {
  const int t = st[set[0]];
  for (int m : set) {
    if (st[m] != t) return -1;
  }
  return t;
}

// One optimal search (PlanRedistribution with from != to): Dijkstra over compact states
// (StateSpace), with the edges of Edges() generated in the same order and priced with
// CollectiveStepCost (ModelStepCost's doubles); only the chosen path is rebuilt as PlanSteps. A
// relaxation carries a stamp (expansion index of its parent, edge index): relaxations happen in
// stamp order, except the send_recv edges, which are deferred: pricing one needs a pass over the
// destination ranks (every rank, or one per translation class: SendRecvPricedDestinations), and
// most are never on a competitive path. At expansion, a send_recv edge only reserves its target's
// state id (ids, and so the queue's tie order, are what eager relaxation would give) and queues a
// placeholder keyed by a lower bound of its path cost (the incoming time of the first rank,
// counted by link in closed form less a rounding slack: SendRecvFirstRankBoundUs), ordered before
// real entries of equal key. The first time the placeholder pops while its target has a path, its
// key is raised to the bound of a few ranks' exact terms (SendRecvProbeUs, often the time itself)
// and, if that is higher, it is queued again; the next time it pops it is priced and relaxed
// unless its state is done; ties on cost go to the smaller stamp. Every entry popped before it has
// a key below the edge's true cost, so the result (dist, parent, via of every state popped, and
// the pop order) equals relaxing every edge eagerly in stamp order, where the first of equal-cost
// paths wins.
//
// Phases: Setup (encode the source, target and direct target), Run (pop entries: PopDeferred for
// send_recv placeholders, Expand for states, which generates the edges and Relaxes them), then
// PathTo (rebuild the chosen path) or, when the budget ran out, Fallback.
class Search {
 public:
  Search(const Layout& from, const Layout& to, DType dtype, const Topology& topo, const SearchBudget& budget)
      : from_(from),
        to_(to),
        dtype_(dtype),
        topo_(topo),
        budget_(budget),
        op_(from.partial_op() ? from.partial_op() : to.partial_op()),
        esize_(DTypeSize(dtype)),
        sp_(from, op_),
        nd_(sp_.nd()),
        tr_(sp_.tr()),
        stride_(static_cast<size_t>(sp_.stride())) {}

  // The plan's steps, proven_optimal and search_edges (costs are filled by the caller).
  Status Run(Plan& plan);

 private:
  static constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  static constexpr PathCost kUnreached{kMax, kMax, kMax};
  // "No state" for a state id (a parent, the target before it is reached, the state found).
  static constexpr int kNoState = -1;
  // (expansion index of the parent, edge index within that expansion); the source's is {-1, 0}.
  using Stamp = std::pair<int64_t, int>;
  // A send_recv edge queued under a lower bound of its cost, priced when that bound pops.
  struct Deferred {
    int parent;
    PathCost parent_cost;
    Stamp stamp;
    int target_id;
    bool priced = false;
    bool probed = false;  // its key was raised to SendRecvProbeUs' bound
  };
  // A queue entry: (key, id); id >= 0: a state; id < 0: deferred[DeferredIndex(id)].
  using Entry = std::pair<PathCost, int>;
  static int DeferredEntryId(size_t index) { return -static_cast<int>(index) - 1; }
  static size_t DeferredIndex(int entry_id) { return static_cast<size_t>(-entry_id - 1); }

  Status Setup();
  // Pops entries until the target is expanded (found_) or the budget runs out (stopped_).
  Status Loop();
  Status PopDeferred(const PathCost& cost, int entry_id);
  // Generates (prices or defers, and relaxes) every edge of state `id`, popped at `cost`.
  Status Expand(int id, const PathCost& cost);
  // The dims of the state being expanded, by what their edges may do.
  void ClassifyDims();
  Status ExpandCollectives();
  Status ExpandLocalSteps();
  // One edge of the state being expanded: to the state in cand_, reached by `kind` on `dims`.
  Status AddEdge(StepKind kind, std::span<const int> dims, int t, int t2);
  Status DeferSendRecv(int nid, const Stamp& st);
  Status PriceDeferred(Deferred& d);
  void Relax(int nid, const PathCost& c, const Stamp& st, int pid, const Via& v, std::span<const int> dims);
  // A new state's bookkeeping.
  void AppendState(const Stamp& st);
  bool OutOfBudget() const;
  // An edge whose path time exceeds the target's best so far cannot lead to a state popped
  // before the target: it is not relaxed (nor its byte count computed, nor a send_recv
  // placeholder queued), which changes no popped state, parent or pop order.
  bool BeyondTarget(int64_t time_units) const {
    return target_id_ >= 0 && time_units > std::get<0>(dist_[static_cast<size_t>(target_id_)]);
  }
  // MaxLocalElements of a state's layout, computed once per state: every collective edge's time
  // needs both sides', and a state is the side of many edges.
  int64_t MaxLocalOf(int state_id, const ShardChains& chains);
  // The steps to state `id`, rebuilt with their builders from `from`, priced as searched.
  StatusOr<std::vector<PlanStep>> PathTo(int id) const;
  StatusOr<PlanStep> BuildStep(const Layout& l, const Via& v) const;
  // Out of budget: the cheapest of the best path reaching the target so far (its queued
  // send_recv edges priced first), the greedy plan and reduce-then-direct. Ties keep the first,
  // in that order.
  StatusOr<std::vector<PlanStep>> Fallback();

  const Layout& from_;
  const Layout& to_;
  const DType dtype_;
  const Topology& topo_;
  const SearchBudget& budget_;
  const std::optional<ReduceOp> op_;
  const int64_t esize_;
  StateSpace sp_;
  const int nd_, tr_;
  const size_t stride_;
  std::optional<Layout> direct_to_;  // the target without Partial (set by Setup)
  std::vector<int> cand_, target_st_, direct_st_, all_dims_;
  ShardChains direct_chains_;
  std::vector<int64_t> probes_;  // SendRecvProbeRanks; empty: no probing
  // Per state id.
  std::vector<PathCost> dist_;
  std::vector<Stamp> stamp_;
  std::vector<int> parent_;
  std::vector<Via> via_;
  std::vector<bool> done_;
  std::vector<int64_t> max_local_;  // -1: not computed yet
  std::vector<int> via_dims_;
  std::vector<Deferred> deferred_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;
  int found_ = kNoState;
  int target_id_ = kNoState;  // the target's state id once an edge has reached it
  bool stopped_ = false;      // the budget ran out before the target was expanded
  int64_t expansions_ = 0;
  int64_t edges_ = 0;  // edges generated (and priced or queued): the budget's unit
  std::chrono::steady_clock::time_point started_;
  // The state being expanded: its id, cost, stamp expansion index, next edge index, code and
  // chains; and scratch for the edge generation.
  int cur_id_ = kNoState;
  PathCost cur_cost_{0, 0, 0};
  int64_t expansion_ = 0;
  int edge_index_ = 0;
  std::vector<int> cur_;
  ShardChains cur_chains_;
  std::vector<int> shard_dims_, rep_dims_, partial_dims_, lp_dims_, sp_dims_, buf_, suffix_;
};

Status Search::Setup() {
  cur_.assign(stride_, 0);
  cand_.assign(stride_, 0);
  target_st_.assign(stride_, 0);
  direct_st_.assign(stride_, 0);
  sp_.Encode(to_, target_st_.data());
  bool inserted = false;
  sp_.Encode(from_, cand_.data());
  sp_.FindOrInsert(cand_.data(), &inserted);
  MF_ASSIGN_OR_RETURN(direct_to_, WithoutPartial(to_));
  sp_.Encode(*direct_to_, direct_st_.data());
  dist_ = {PathCost{0, 0, 0}};
  stamp_ = {Stamp{-1, 0}};
  parent_ = {kNoState};
  via_ = {Via{}};
  done_ = {false};
  max_local_ = {-1};
  queue_.push({dist_[0], 0});
  all_dims_.resize(static_cast<size_t>(nd_));
  for (int m = 0; m < nd_; ++m) all_dims_[m] = m;
  direct_chains_ = sp_.Chains(direct_st_.data());
  probes_ = SendRecvProbeRanks(from_.mesh());
  started_ = std::chrono::steady_clock::now();
  return Status();
}

bool Search::OutOfBudget() const {
  if (budget_.max_edges > 0 && edges_ >= budget_.max_edges) return true;
  if (budget_.max_ms > 0) {
    const std::chrono::duration<double, std::milli> spent = std::chrono::steady_clock::now() - started_;
    if (spent.count() >= budget_.max_ms) return true;
  }
  return false;
}

int64_t Search::MaxLocalOf(int state_id, const ShardChains& chains) {
  int64_t& m = max_local_[static_cast<size_t>(state_id)];
  if (m < 0) m = MaxLocalElements(chains);
  return m;
}

void Search::Relax(int nid, const PathCost& c, const Stamp& st, int pid, const Via& v, std::span<const int> dims) {
  if (done_[nid]) return;
  if (c < dist_[nid] || (c == dist_[nid] && st < stamp_[nid])) {
    const bool lower = c < dist_[nid];
    dist_[nid] = c;
    stamp_[nid] = st;
    parent_[nid] = pid;
    via_[nid] = v;
    via_[nid].dims_off = static_cast<int>(via_dims_.size());
    via_[nid].dims_len = static_cast<int>(dims.size());
    via_dims_.insert(via_dims_.end(), dims.begin(), dims.end());
    if (lower) queue_.push({c, nid});
  }
}

Status Search::PriceDeferred(Deferred& d) {
  // Only a time within dist - parent can relax the target (a higher one makes a strictly higher
  // path cost): the pricing gives up as soon as the time is known to exceed it.
  const int64_t target_time = std::get<0>(dist_[d.target_id]);
  const int64_t limit = target_time == kMax ? kMax : target_time - std::get<0>(d.parent_cost);
  const std::optional<StepCost> sc =
      SendRecvStepCostWithin(from_.mesh(), sp_.Chains(sp_.state(d.parent)), direct_chains_, esize_, topo_, limit);
  d.priced = true;
  if (!sc) return Status();  // eager relaxation would change nothing
  Via v{StepKind::kSendRecv, 0, 0, -1, -1, sc->us, sc->max_bytes_per_rank};
  Relax(d.target_id, Extend(d.parent_cost, sc->us, sc->max_bytes_per_rank), d.stamp, d.parent, v, all_dims_);
  return Status();
}

Status Search::Loop() {
  while (!queue_.empty()) {
    const PathCost cost = queue_.top().first;
    const int id = queue_.top().second;
    queue_.pop();
    if (id < 0) {
      MF_RETURN_IF_ERROR(PopDeferred(cost, id));
      continue;
    }
    if (done_[id] || cost != dist_[id]) continue;
    if (sp_.SameKey(sp_.state(id), target_st_.data())) {
      done_[id] = true;
      found_ = id;
      return Status();
    }
    if (OutOfBudget()) {
      stopped_ = true;
      return Status();
    }
    MF_RETURN_IF_ERROR(Expand(id, cost));
  }
  return Status();
}

Status Search::PopDeferred(const PathCost& cost, int entry_id) {
  Deferred& d = deferred_[DeferredIndex(entry_id)];
  if (done_[d.target_id]) return Status();
  if (!d.probed && !probes_.empty() && dist_[d.target_id] != kUnreached) {
    // Before pricing every rank, a few ranks' exact terms (a lower bound that is often the time
    // itself): when it raises the key, the edge waits in the queue again, and the target is often
    // reached by a cheaper path first. Not while the target has no path yet: then the edge's
    // price is what bounds the rest of the search (its pruning and the give-up limits), and
    // delaying it rarely pays.
    d.probed = true;
    const double probe =
        SendRecvProbeUs(from_.mesh(), sp_.Chains(sp_.state(d.parent)), direct_chains_, esize_, topo_, probes_);
    const PathCost key{SatAdd(std::get<0>(d.parent_cost), CostUnits(probe)), std::get<1>(d.parent_cost),
                       std::get<2>(d.parent_cost) + 1};
    if (cost < key) {
      queue_.push({key, entry_id});
      return Status();
    }
  }
  return PriceDeferred(d);
}

void Search::AppendState(const Stamp& st) {
  dist_.push_back(kUnreached);
  stamp_.push_back(st);
  parent_.push_back(kNoState);
  via_.emplace_back();
  done_.push_back(false);
  max_local_.push_back(-1);
}

Status Search::DeferSendRecv(int nid, const Stamp& st) {
  const double lb = SendRecvFirstRankBoundUs(from_.mesh(), cur_chains_, direct_chains_, esize_, topo_);
  const PathCost key_lb{SatAdd(std::get<0>(cur_cost_), CostUnits(lb)), std::get<1>(cur_cost_),
                        std::get<2>(cur_cost_) + 1};
  if (!(key_lb < dist_[nid])) return Status();  // the true cost is no lower: never relaxed
  if (BeyondTarget(std::get<0>(key_lb))) return Status();
  deferred_.push_back(Deferred{cur_id_, cur_cost_, st, nid});
  queue_.push({key_lb, DeferredEntryId(deferred_.size() - 1)});
  return Status();
}

Status Search::AddEdge(StepKind kind, std::span<const int> dims, int t, int t2) {
  const Stamp st{expansion_, edge_index_++};
  ++edges_;
  bool inserted = false;
  const int nid = sp_.FindOrInsert(cand_.data(), &inserted);
  if (inserted && sp_.SameKey(cand_.data(), target_st_.data())) target_id_ = nid;
  if (inserted) AppendState(st);
  if (done_[nid]) return Status();  // eager relaxation would change nothing either
  if (kind == StepKind::kSendRecv) return DeferSendRecv(nid, st);
  const ShardChains cand_chains = sp_.Chains(cand_.data());
  StepExtents extents;
  if (!IsLocalStep(kind)) {
    extents = StepExtents{MaxLocalOf(cur_id_, cur_chains_), MaxLocalOf(nid, cand_chains)};
    // The time alone decides unless it ties: skip the byte count of a losing edge.
    const StepCost time = CollectiveStepCost(kind, dims, cur_chains_, cand_chains, extents, esize_, topo_, true);
    const int64_t time_units = SatAdd(std::get<0>(cur_cost_), CostUnits(time.us));
    if (time_units > std::get<0>(dist_[nid]) || BeyondTarget(time_units)) return Status();
  }
  const StepCost sc = CollectiveStepCost(kind, dims, cur_chains_, cand_chains, extents, esize_, topo_);
  Relax(nid, Extend(cur_cost_, sc.us, sc.max_bytes_per_rank), st, cur_id_,
        Via{kind, 0, 0, t, t2, sc.us, sc.max_bytes_per_rank}, dims);
  return Status();
}

void Search::ClassifyDims() {
  shard_dims_.clear();
  rep_dims_.clear();
  partial_dims_.clear();
  lp_dims_.clear();
  sp_dims_.clear();
  for (int m = 0; m < nd_; ++m) {
    const int c = cur_[m];
    const int tc = target_st_[m];
    if (c >= 0) shard_dims_.push_back(m);
    if (c == kReplicateCode) rep_dims_.push_back(m);
    if (c == kPartialCode) partial_dims_.push_back(m);
    if (c == kReplicateCode && tc == kPartialCode) lp_dims_.push_back(m);
    if (c >= 0 && tc == kPartialCode) sp_dims_.push_back(m);
  }
}

Status Search::Expand(int id, const PathCost& cost) {
  done_[id] = true;
  cur_id_ = id;
  cur_cost_ = cost;
  expansion_ = expansions_++;
  edge_index_ = 0;
  std::copy(sp_.state(id), sp_.state(id) + stride_, cur_.begin());
  cur_chains_ = sp_.Chains(cur_.data());
  ClassifyDims();
  MF_RETURN_IF_ERROR(ExpandCollectives());
  MF_RETURN_IF_ERROR(ExpandLocalSteps());
  // send_recv straight to the (Partial-free) target.
  if (partial_dims_.empty() && !sp_.SameKey(direct_st_.data(), cur_.data())) {
    std::copy(direct_st_.begin(), direct_st_.end(), cand_.begin());
    MF_RETURN_IF_ERROR(AddEdge(StepKind::kSendRecv, all_dims_, -1, -1));
  }
  return Status();
}

Status Search::ExpandCollectives() {
  const int* cur = cur_.data();
  int* cand = cand_.data();
  // all_gather: sets whose dims per tensor dim form an innermost suffix.
  MF_RETURN_IF_ERROR(ForEachSubset(shard_dims_, buf_, [&](std::span<const int> set) -> Status {
    if (!InnermostPerChain(sp_, cur, set)) return Status();
    sp_.Derive(cur, set, kReplicateCode, -1, cand);
    return AddEdge(StepKind::kAllGather, set, SingleShardedTensorDim(cur, set), -1);
  }));
  // all_reduce.
  MF_RETURN_IF_ERROR(ForEachSubset(partial_dims_, buf_, [&](std::span<const int> set) -> Status {
    sp_.Derive(cur, set, kReplicateCode, -1, cand);
    return AddEdge(StepKind::kAllReduce, set, -1, -1);
  }));
  // reduce_scatter.
  MF_RETURN_IF_ERROR(ForEachOrderedSubset(partial_dims_, buf_, [&](std::span<const int> set) -> Status {
    for (int t = 0; t < tr_; ++t) {
      sp_.Derive(cur, set, t, t, cand);
      MF_RETURN_IF_ERROR(AddEdge(StepKind::kReduceScatter, set, t, -1));
    }
    return Status();
  }));
  // all_to_all: innermost suffixes.
  for (int i = 0; i < tr_; ++i) {
    const std::span<const int> o = cur_chains_.chain(i);
    for (size_t k = 1; k <= o.size(); ++k) {
      suffix_.assign(o.end() - static_cast<std::ptrdiff_t>(k), o.end());
      std::sort(suffix_.begin(), suffix_.end());
      for (int j = 0; j < tr_; ++j) {
        if (j == i) continue;
        buf_ = suffix_;
        do {
          sp_.Derive(cur, buf_, j, j, cand);
          MF_RETURN_IF_ERROR(AddEdge(StepKind::kAllToAll, buf_, i, j));
        } while (std::next_permutation(buf_.begin(), buf_.end()));
      }
    }
  }
  return Status();
}

Status Search::ExpandLocalSteps() {
  const int* cur = cur_.data();
  int* cand = cand_.data();
  // local_slice.
  MF_RETURN_IF_ERROR(ForEachOrderedSubset(rep_dims_, buf_, [&](std::span<const int> set) -> Status {
    for (int t = 0; t < tr_; ++t) {
      sp_.Derive(cur, set, t, t, cand);
      MF_RETURN_IF_ERROR(AddEdge(StepKind::kLocalSlice, set, t, -1));
    }
    return Status();
  }));
  // local_partial (only towards a Partial target).
  if (to_.partial_op()) {
    MF_RETURN_IF_ERROR(ForEachSubset(lp_dims_, buf_, [&](std::span<const int> set) -> Status {
      sp_.Derive(cur, set, kPartialCode, -1, cand);
      return AddEdge(StepKind::kLocalPartial, set, -1, -1);
    }));
  }
  // local_shard_to_partial (only towards a Partial(sum|max|min) target).
  if (const std::optional<ReduceOp> top = to_.partial_op(); top && *top != ReduceOp::kAvg) {
    MF_RETURN_IF_ERROR(ForEachSubset(sp_dims_, buf_, [&](std::span<const int> set) -> Status {
      if (!InnermostPerChain(sp_, cur, set)) return Status();
      sp_.Derive(cur, set, kPartialCode, -1, cand);
      return AddEdge(StepKind::kLocalShardToPartial, set, SingleShardedTensorDim(cur, set), -1);
    }));
  }
  return Status();
}

StatusOr<PlanStep> Search::BuildStep(const Layout& l, const Via& v) const {
  const std::vector<int> dims(via_dims_.begin() + v.dims_off, via_dims_.begin() + v.dims_off + v.dims_len);
  switch (v.kind) {
    case StepKind::kAllGather: return AllGatherStep(l, dims);
    case StepKind::kAllReduce: return AllReduceStep(l, dims);
    case StepKind::kReduceScatter: return ReduceScatterStep(l, dims, v.t);
    case StepKind::kAllToAll: return AllToAllStep(l, dims, v.t, v.t2);
    case StepKind::kLocalSlice: return LocalSliceStep(l, dims, v.t);
    case StepKind::kLocalPartial: return LocalPartialStep(l, dims, *op_);
    case StepKind::kLocalShardToPartial: return LocalShardToPartialStep(l, dims, *op_);
    case StepKind::kSendRecv: break;
  }
  return SendRecvStep(l, *direct_to_);
}

StatusOr<std::vector<PlanStep>> Search::PathTo(int id) const {
  std::vector<int> ids;
  for (int i = id; parent_[i] >= 0; i = parent_[i]) ids.push_back(i);
  std::reverse(ids.begin(), ids.end());
  std::vector<PlanStep> steps;
  Layout l = from_;
  for (int i : ids) {
    const Via& v = via_[i];
    StatusOr<PlanStep> s = BuildStep(l, v);
    if (!s.ok()) return InternalError("planner edge rejected by its own rule: " + s.status().ToString());
    s->modelled_us = v.us;
    s->bytes_per_rank = v.bytes;
    l = s->to;
    steps.push_back(std::move(s).value());
  }
  return steps;
}

StatusOr<std::vector<PlanStep>> Search::Fallback() {
  std::optional<std::vector<PlanStep>> best;
  PathCost best_cost = kUnreached;
  if (const int tid = target_id_; tid >= 0) {
    for (Deferred& d : deferred_) {
      if (d.target_id == tid && !d.priced) MF_RETURN_IF_ERROR(PriceDeferred(d));
    }
    if (parent_[tid] >= 0) {
      MF_ASSIGN_OR_RETURN(best, PathTo(tid));
      best_cost = dist_[tid];
    }
  }
  if (StatusOr<Plan> greedy = PlanGreedy(from_, to_, dtype_, topo_); greedy.ok()) {
    const PathCost c = CostOfSteps(greedy->steps);
    if (!best || c < best_cost) {
      best = std::move(greedy->steps);
      best_cost = c;
    }
  }
  if (StatusOr<std::vector<PlanStep>> rd = ReduceThenDirect(from_, to_, dtype_, topo_); rd.ok()) {
    const PathCost c = CostOfSteps(*rd);
    if (!best || c < best_cost) {
      best = std::move(*rd);
      best_cost = c;
    }
  }
  if (!best) {
    return InternalError("search budget (" + budget_.ToString() + ") ran out and no fallback plan applies from " +
                         from_.ToString() + " to " + to_.ToString());
  }
  return std::move(*best);
}

Status Search::Run(Plan& plan) {
  MF_RETURN_IF_ERROR(Setup());
  MF_RETURN_IF_ERROR(Loop());
  plan.search_edges = edges_;
  if (found_ >= 0) {
    MF_ASSIGN_OR_RETURN(plan.steps, PathTo(found_));
    return Status();
  }
  if (!stopped_) return InternalError("no plan found from " + from_.ToString() + " to " + to_.ToString());
  plan.proven_optimal = false;
  MF_ASSIGN_OR_RETURN(plan.steps, Fallback());
  return Status();
}

}  // namespace

StatusOr<Plan> PlanRedistribution(const Layout& from, const Layout& to, DType dtype, const Topology& topo,
                                  const SearchBudget& budget) {
  MF_RETURN_IF_ERROR(topo.ValidateForMesh(from.mesh().ndim()));
  MF_RETURN_IF_ERROR(budget.Validate());
  MF_RETURN_IF_ERROR(CheckPlannable(from, to));
  if (from == to) {
    // Nothing to search, and no per-rank tables: O(mesh dims) on any mesh.
    Plan plan = IdentityPlan(from, dtype, PlannerKind::kOptimal);
    plan.proven_optimal = true;
    return plan;
  }
  Plan plan = EmptyPlan(from, to, dtype, PlannerKind::kOptimal);
  plan.proven_optimal = true;
  MF_RETURN_IF_ERROR(Search(from, to, dtype, topo, budget).Run(plan));
  MF_RETURN_IF_ERROR(FillPlanCostsOfSearch(plan, topo));
  return plan;
}

StatusOr<Plan> PlanDirect(const Layout& from, const Layout& to, DType dtype, const Topology& topo) {
  MF_RETURN_IF_ERROR(topo.ValidateForMesh(from.mesh().ndim()));
  MF_RETURN_IF_ERROR(CheckPlannable(from, to));
  if (from == to) return IdentityPlan(from, dtype, PlannerKind::kDirect);
  Plan plan = EmptyPlan(from, to, dtype, PlannerKind::kDirect);
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
  MF_RETURN_IF_ERROR(FillPlanCosts(plan, topo));
  return plan;
}

}  // namespace meshflow
