// Fuzz target: planner + executor on the in-process threads world.
//
// The input decodes (FuzzInput, one byte per decision, 0 once used up) to a redistribution:
//   mesh        1..3 dims, at most 8 ranks           ndim = 1 + b%3, size = 1 + b%(8/ranks so far)
//   shape       rank 0..3, sizes 0..6 (zero-size dims included)
//   dtype       f32, f64, bf16, i32, i64             planner  optimal, greedy, direct
//   flags       b%16: 1 target on another shape, 2 target on another mesh, 3 one rank passes a
//               local tensor of the wrong shape, 4 one rank passes the wrong dtype, 5 inter-node
//               topology on mesh dim 0; anything else: a plain case
//   from, to    per mesh dim b%5: 0,1 S(b%(rank+1)) (rank itself is out of range), 2 R,
//               3 P(sum), 4 P(op b%4) (mixed ops in one layout are invalid)
//   orders      b%4: 1 a permutation of each tensor dim's shard dims, 2 nonsense lists, else default
//   more hops   structure-aware tail: while bytes remain (at most kMaxExtraHops), one more target
//               layout on the target mesh and shape: planner b%3, placements, order as above. The
//               case becomes a chain from -> to -> hop1 -> hop2 ..., planned hop by hop and executed
//               in one Run, each hop checked like the first. So a longer input is a longer chain
//               (new plans from every reachable layout, Partial and nested sources included)
//               instead of ignored bytes: the old decoder read at most 26 bytes, and libFuzzer's
//               inputs never grew past that. The first 26 bytes decode exactly as before, so the
//               seeds keep their meaning.
// Contract checked:
//   - every failure is a non-OK, non-INTERNAL Status with a non-empty message;
//   - the optimal planner plans every pair of valid layouts CheckPlannable accepts;
//   - a plan starts at `from`, ends at `to`, its steps chain, its bytes are >= the lower bound;
//   - executing it on a ThreadWorld gives every rank exactly ReferenceLocal(global, to, rank)
//     (Partial targets: FullTensor equals the global tensor), and each rank's counted received
//     bytes equal the plan's model;
//   - a rank with a wrong local tensor makes Run fail (no hang, no crash).
// Seeds: tests/fuzz/corpus/planner_executor/ (tests/fuzz/make_seeds.py writes the hand-made ones).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/base/strings.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/planner/plan_cache.h"
#include "meshflow/planner/search.h"
#include "meshflow/tests/fuzz/fuzz_input.h"

namespace meshflow::fuzz {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
constexpr PlannerKind kPlanners[] = {PlannerKind::kOptimal, PlannerKind::kGreedy, PlannerKind::kDirect};

constexpr int kMaxExtraHops = 6;

enum Flag { kPlain = 0, kOtherShape = 1, kOtherMesh = 2, kBadLocalShape = 3, kBadLocalDType = 4, kInterNode = 5 };

void CheckErrorStatus(const Status& s, const std::string& what) {
  FUZZ_CHECK(!s.ok(), what);
  FUZZ_CHECK(!s.message().empty(), what << ": error without a message (" << StatusCodeName(s.code()) << ")");
  FUZZ_CHECK(s.code() != StatusCode::kInternal, what << ": internal error " << s);
}

Placements DecodePlacements(FuzzInput& in, int ndim, int rank) {
  Placements p;
  for (int m = 0; m < ndim; ++m) {
    switch (in.Below(5)) {
      case 0:
      case 1: p.push_back(Shard{in.Below(rank + 1)}); break;
      case 2: p.push_back(Replicate{}); break;
      case 3: p.push_back(Partial{ReduceOp::kSum}); break;
      default: p.push_back(Partial{kOps[in.Below(4)]}); break;
    }
  }
  return p;
}

ShardOrder DecodeOrder(FuzzInput& in, const Placements& p, int ndim, int rank) {
  ShardOrder order;
  switch (in.Below(4)) {
    case 1: {  // a permutation of the mesh dims sharding each tensor dim
      order.resize(static_cast<size_t>(rank));
      for (int m = 0; m < ndim; ++m) {
        if (IsShard(p[m]) && std::get<Shard>(p[m]).dim < rank) order[std::get<Shard>(p[m]).dim].push_back(m);
      }
      for (auto& dims : order) {
        for (int i = static_cast<int>(dims.size()) - 1; i > 0; --i) std::swap(dims[i], dims[in.Below(i + 1)]);
      }
      break;
    }
    case 2: {  // nonsense: any lists of any mesh dims, possibly one tensor dim too many
      order.resize(static_cast<size_t>(in.Below(rank + 2)));
      for (auto& dims : order) {
        const int n = in.Below(ndim + 1);
        for (int i = 0; i < n; ++i) dims.push_back(in.Below(ndim + 1));
      }
      break;
    }
    default: break;
  }
  return order;
}

// Small integers: every sum, average, max and min is exact in every dtype (bf16 holds integers up
// to 256 exactly; a sum of at most 8 values of magnitude <= 40 stays below that).
Tensor GlobalFor(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i * 7) % 81) - 40);
  return t;
}

void CheckPlanShape(const Plan& plan, const Layout& from, const Layout& to, const std::string& what) {
  FUZZ_CHECK(plan.from == from && plan.to == to, what << ": plan endpoints differ from the request");
  const Layout* cur = &from;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    FUZZ_CHECK(plan.steps[i].from == *cur, what << ": step " << i << " does not start where the previous ended");
    cur = &plan.steps[i].to;
  }
  FUZZ_CHECK(*cur == to, what << ": the last step does not end at the target");
  if (plan.lower_bound_bytes_per_rank) {
    FUZZ_CHECK(plan.max_bytes_received_per_rank >= *plan.lower_bound_bytes_per_rank,
               what << ": plan bytes " << plan.max_bytes_received_per_rank << " below the lower bound "
                    << *plan.lower_bound_bytes_per_rank);
  }
}

void RunCase(FuzzInput& in) {
  // Mesh.
  const int ndim = 1 + in.Below(3);
  std::vector<int64_t> mesh_shape;
  int64_t ranks = 1;
  for (int d = 0; d < ndim; ++d) {
    const int64_t s = 1 + in.Below(static_cast<int>(8 / ranks));
    mesh_shape.push_back(s);
    ranks *= s;
  }
  // Shape, dtype, planner, flags.
  const int rank = in.Below(4);
  std::vector<int64_t> shape;
  for (int d = 0; d < rank; ++d) shape.push_back(in.Below(7));
  const DType dtype = kTypes[in.Below(5)];
  const PlannerKind planner = kPlanners[in.Below(3)];
  const int flag = in.Byte() % 16;
  const int bad_rank = in.Below(static_cast<int>(ranks));
  // Layouts.
  const Placements fp = DecodePlacements(in, ndim, rank);
  const ShardOrder fo = DecodeOrder(in, fp, ndim, rank);
  const Placements tp = DecodePlacements(in, ndim, rank);
  const ShardOrder to_o = DecodeOrder(in, tp, ndim, rank);

  StatusOr<DeviceMesh> mesh = DeviceMesh::Create(mesh_shape);
  FUZZ_CHECK(mesh.ok(), mesh.status());
  DeviceMesh to_mesh = *mesh;
  std::vector<int64_t> to_shape = shape;
  if (flag == kOtherShape) {
    if (to_shape.empty()) to_shape.push_back(1); else ++to_shape[0];
  }
  if (flag == kOtherMesh) {
    std::vector<int64_t> other(mesh_shape.rbegin(), mesh_shape.rend());
    std::vector<std::string> names;
    for (int d = 0; d < ndim; ++d) names.push_back("m" + std::to_string(d));
    to_mesh = *DeviceMesh::Create(other, names);
  }
  const std::string what = mesh->ToString() + " shape " + ListString(shape) + " " + std::string(DTypeName(dtype)) +
                           " " + ToString(std::span<const Placement>(fp)) + " -> " +
                           ToString(std::span<const Placement>(tp)) + " planner " +
                           std::string(PlannerKindName(planner)) + " flag " + std::to_string(flag);

  StatusOr<Layout> from = Layout::Create(shape, *mesh, fp, fo);
  if (!from.ok()) return CheckErrorStatus(from.status(), what + ": Layout::Create(from)");
  StatusOr<Layout> to = Layout::Create(to_shape, to_mesh, tp, to_o);
  if (!to.ok()) return CheckErrorStatus(to.status(), what + ": Layout::Create(to)");

  PlanCache cache;  // per input: the process-wide cache would grow without bound while fuzzing
  RedistributeOptions options;
  options.planner = planner;
  options.cache = &cache;
  if (flag == kInterNode) options.topology.intra_dims = std::vector<int>{};
  StatusOr<std::shared_ptr<const Plan>> plan = PlanFor(*from, *to, dtype, options);
  if (!plan.ok()) {
    CheckErrorStatus(plan.status(), what + ": PlanFor");
    FUZZ_CHECK(planner != PlannerKind::kOptimal || !CheckPlannable(*from, *to).ok(),
               what << ": the optimal planner refused a plannable pair: " << plan.status());
    return;
  }
  FUZZ_CHECK(CheckPlannable(*from, *to).ok(), what << ": planned an unplannable pair");
  CheckPlanShape(**plan, *from, *to, what);

  // The chain: hop 0 is from -> to; later hops continue from the previous target. A hop whose
  // layout or plan is refused (checked like the first) ends the chain there.
  struct Hop {
    Layout target;
    std::shared_ptr<const Plan> plan;
  };
  std::vector<Hop> hops = {{*to, *plan}};
  std::string chain = what;
  const bool corrupt = flag == kBadLocalShape || flag == kBadLocalDType;
  const int to_rank = static_cast<int>(to_shape.size());
  while (!corrupt && !in.empty() && static_cast<int>(hops.size()) <= kMaxExtraHops) {
    const PlannerKind hop_planner = kPlanners[in.Below(3)];
    const Placements hp = DecodePlacements(in, to_mesh.ndim(), to_rank);
    const ShardOrder ho = DecodeOrder(in, hp, to_mesh.ndim(), to_rank);
    chain += " -> " + ToString(std::span<const Placement>(hp)) + " (" + std::string(PlannerKindName(hop_planner)) + ")";
    StatusOr<Layout> next = Layout::Create(to_shape, to_mesh, hp, ho);
    if (!next.ok()) {
      CheckErrorStatus(next.status(), chain + ": Layout::Create(hop " + std::to_string(hops.size()) + ")");
      break;
    }
    const Layout& prev = hops.back().target;
    RedistributeOptions hop_options = options;
    hop_options.planner = hop_planner;
    StatusOr<std::shared_ptr<const Plan>> hop_plan = PlanFor(prev, *next, dtype, hop_options);
    if (!hop_plan.ok()) {
      CheckErrorStatus(hop_plan.status(), chain + ": PlanFor");
      FUZZ_CHECK(hop_planner != PlannerKind::kOptimal || !CheckPlannable(prev, *next).ok(),
                 chain << ": the optimal planner refused a plannable pair: " << hop_plan.status());
      break;
    }
    FUZZ_CHECK(CheckPlannable(prev, *next).ok(), chain << ": planned an unplannable pair");
    CheckPlanShape(**hop_plan, prev, *next, chain);
    hops.push_back({*next, *hop_plan});
  }

  // Execute on the threads world and compare with the single-rank reference after every hop.
  const Tensor global = GlobalFor(dtype, shape);
  ThreadWorldOptions wopts;
  wopts.timeout = std::chrono::milliseconds(20000);
  StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(mesh->size(), wopts);
  FUZZ_CHECK(world.ok(), world.status());
  std::mutex mu;
  std::string mismatch;
  const Status run = (*world)->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, *mesh));
    const int r = comm.world_rank();
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, *from, r));
    Tensor local = x.local();
    if (corrupt && r == bad_rank) {
      std::vector<int64_t> s = local.shape();
      if (flag == kBadLocalShape) {
        if (s.empty()) s.push_back(1); else ++s[0];
      }
      const DType t = flag == kBadLocalDType ? (dtype == DType::kF32 ? DType::kI32 : DType::kF32) : dtype;
      local = Tensor::Zeros(t, s);
    }
    for (size_t k = 0; k < hops.size(); ++k) {
      const Layout& target = hops[k].target;
      const Plan& hop_plan = *hops[k].plan;
      comm.ResetCounters();
      MF_RETURN_IF_ERROR(ExecutePlan(hop_plan, ctx, local));
      const int64_t counted = comm.counters().bytes_received;
      std::string err;
      if (!target.HasPartial()) {
        MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, target, r));
        if (!(local == want)) err = "got " + local.ToString() + " want " + want.ToString();
      }
      const int64_t modelled =
          hop_plan.bytes_received_per_rank.empty() ? 0 : hop_plan.bytes_received_per_rank[*mesh->IndexOf(r)];
      if (err.empty() && counted != modelled) {
        err = "received " + std::to_string(counted) + " bytes, the plan models " + std::to_string(modelled);
      }
      MF_ASSIGN_OR_RETURN(DTensor y, DTensor::FromLocal(local, target, r));
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
      if (err.empty() && !(full == global)) err = "FullTensor differs: " + full.ToString();
      if (!err.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        // Recorded, not returned: every rank keeps to the same collectives (no hang).
        if (mismatch.empty()) mismatch = "rank " + std::to_string(r) + " after hop " + std::to_string(k) + ": " + err;
      }
    }
    return Status();
  });
  if (corrupt) {
    CheckErrorStatus(run, what + ": a rank with a wrong local tensor did not fail the run");
    return;
  }
  FUZZ_CHECK(run.ok(), chain << ": execution failed: " << run);
  FUZZ_CHECK(mismatch.empty(), chain << ": " << mismatch);
}

}  // namespace
}  // namespace meshflow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshflow::fuzz::FuzzInput in(data, size);
  meshflow::fuzz::RunCase(in);
  return 0;
}
