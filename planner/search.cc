#include "meshflow/planner/search.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
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

// Dijkstra state key: placement codes (S(t) = t, R = -1, P = -2) then the shard order.
std::vector<int> StateKey(const Layout& l) {
  std::vector<int> key;
  for (const Placement& p : l.placements()) {
    if (const auto* s = std::get_if<Shard>(&p)) {
      key.push_back(s->dim);
    } else {
      key.push_back(IsReplicate(p) ? -1 : -2);
    }
  }
  for (const std::vector<int>& o : l.shard_order()) {
    key.push_back(-100);
    key.insert(key.end(), o.begin(), o.end());
  }
  return key;
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

StatusOr<Plan> PlanRedistribution(const Layout& from, const Layout& to, DType dtype, const Topology& topo,
                                  const SearchBudget& budget) {
  MF_RETURN_IF_ERROR(topo.ValidateForMesh(from.mesh().ndim()));
  MF_RETURN_IF_ERROR(budget.Validate());
  MF_RETURN_IF_ERROR(CheckPlannable(from, to));
  Plan plan = EmptyPlan(from, to, dtype, "optimal");
  plan.proven_optimal = true;
  if (!(from == to)) {
    // Dijkstra over states. A relaxation carries a stamp (expansion index of its parent, edge
    // index): relaxations happen in stamp order, except the send_recv edges, which are deferred:
    // pricing one needs a pass over every destination rank, and most are never on a competitive
    // path. At expansion, a send_recv edge only reserves its target's state id (ids, and so the
    // queue's tie order, are what eager relaxation would give) and queues a placeholder keyed by
    // a lower bound of its path cost (the exact incoming time of the first rank, ModelStepCost's
    // sum for it), ordered before real entries of equal key. When the placeholder pops it is
    // priced and relaxed unless its state is done; ties on cost go to the smaller stamp. Every
    // entry popped before it has a key below the edge's true cost, so the result (dist, parent,
    // via of every state popped, and the pop order) equals relaxing every edge eagerly in stamp
    // order, where the first of equal-cost paths wins.
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    const PathCost kUnreached{kMax, kMax, kMax};
    using Stamp = std::pair<int64_t, int>;
    std::vector<Layout> states{from};
    std::map<std::vector<int>, int> ids{{StateKey(from), 0}};
    std::vector<PathCost> dist{PathCost{0, 0, 0}};
    std::vector<Stamp> stamp{Stamp{-1, 0}};
    std::vector<int> parent{-1};
    std::vector<std::optional<PlanStep>> via{std::nullopt};
    std::vector<bool> done{false};
    struct Deferred {
      PlanStep step;
      int parent;
      PathCost parent_cost;
      Stamp stamp;
      int target_id;
      bool priced = false;
    };
    std::vector<Deferred> deferred;
    using Entry = std::pair<PathCost, int>;  // id >= 0: a state; id < 0: deferred[-id - 1]
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
    queue.push({dist[0], 0});
    const std::vector<int> target_key = StateKey(to);
    int found = -1;
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
    auto relax = [&](int nid, const PathCost& c, const Stamp& st, int pid, PlanStep& step) {
      if (done[nid]) return;
      if (c < dist[nid] || (c == dist[nid] && st < stamp[nid])) {
        const bool lower = c < dist[nid];
        dist[nid] = c;
        stamp[nid] = st;
        parent[nid] = pid;
        via[nid] = std::move(step);
        if (lower) queue.push({c, nid});
      }
    };
    auto price_deferred = [&](Deferred& d) -> Status {
      MF_ASSIGN_OR_RETURN(StepCost sc, ModelStepCost(d.step, dtype, topo));
      d.step.modelled_us = sc.us;
      d.step.bytes_per_rank = sc.max_bytes_per_rank;
      d.priced = true;
      PlanStep step = d.step;
      relax(d.target_id, Extend(d.parent_cost, sc.us, sc.max_bytes_per_rank), d.stamp, d.parent, step);
      return Status();
    };
    while (!queue.empty()) {
      const auto [cost, id] = queue.top();
      queue.pop();
      if (id < 0) {
        Deferred& d = deferred[static_cast<size_t>(-id - 1)];
        if (done[d.target_id]) continue;
        MF_RETURN_IF_ERROR(price_deferred(d));
        continue;
      }
      if (done[id] || cost != dist[id]) continue;
      if (StateKey(states[id]) == target_key) {
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
      const Layout state = states[id];
      MF_ASSIGN_OR_RETURN(std::vector<PlanStep> next, Edges(state, to));
      edges += static_cast<int64_t>(next.size());
      for (size_t e = 0; e < next.size(); ++e) {
        PlanStep& step = next[e];
        const Stamp st{expansion, static_cast<int>(e)};
        std::vector<int> key = StateKey(step.to);
        auto [it, inserted] = ids.emplace(std::move(key), static_cast<int>(states.size()));
        const int nid = it->second;
        if (inserted) {
          states.push_back(step.to);
          dist.push_back(kUnreached);
          stamp.push_back(st);
          parent.push_back(-1);
          via.emplace_back(std::nullopt);
          done.push_back(false);
        }
        if (done[nid]) continue;  // eager relaxation would change nothing either
        if (step.kind == StepKind::kSendRecv) {
          MF_ASSIGN_OR_RETURN(StepCost lb, SendRecvFirstRankUs(step, dtype, topo));
          const PathCost key_lb{SatAdd(std::get<0>(cost), CostUnits(lb.us)), std::get<1>(cost), std::get<2>(cost) + 1};
          if (!(key_lb < dist[nid])) continue;  // the true cost is no lower: never relaxed
          deferred.push_back(Deferred{std::move(step), id, cost, st, nid});
          queue.push({key_lb, -static_cast<int>(deferred.size())});
          continue;
        }
        MF_ASSIGN_OR_RETURN(StepCost sc, ModelStepCost(step, dtype, topo));
        step.modelled_us = sc.us;
        step.bytes_per_rank = sc.max_bytes_per_rank;
        relax(nid, Extend(cost, sc.us, sc.max_bytes_per_rank), st, id, step);
      }
    }
    plan.search_edges = edges;
    auto path_to = [&](int id) {
      std::vector<PlanStep> steps;
      for (int i = id; parent[i] >= 0; i = parent[i]) steps.push_back(*via[i]);
      std::reverse(steps.begin(), steps.end());
      return steps;
    };
    if (found >= 0) {
      plan.steps = path_to(found);
    } else if (!stopped) {
      return InternalError("no plan found from " + from.ToString() + " to " + to.ToString());
    } else {
      // Out of budget: the cheapest of the best path reaching the target so far (its queued
      // send_recv edges priced first), the greedy plan and reduce-then-direct. Ties keep the
      // first, in that order.
      plan.proven_optimal = false;
      std::optional<std::vector<PlanStep>> best;
      PathCost best_cost = kUnreached;
      if (auto it = ids.find(target_key); it != ids.end()) {
        const int tid = it->second;
        for (Deferred& d : deferred) {
          if (d.target_id == tid && !d.priced) MF_RETURN_IF_ERROR(price_deferred(d));
        }
        if (parent[tid] >= 0) {
          best = path_to(tid);
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
  MF_RETURN_IF_ERROR(FillPlanCosts(plan, topo));
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
