// Plan executor with pooled step buffers: results stay exact when buffers are reused and when the
// pool holds stale bytes, and a repeated redistribution allocates nothing in steady state. (The
// random-case property test is tests/redistribute_property_test.cc.)
#include "meshflow/runtime/executor.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/runtime/buffer_pool.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/planner/planner.h"

namespace meshflow {
namespace {

// Gives `pool` buffers of several sizes filled with a non-zero byte pattern: a step that reads a
// pooled byte it did not write (a buffer not zeroed where it must be) yields a wrong result.
void Poison(BufferPool& pool) {
  // Larger than any buffer of Cases() (64 x 48 f32 = 12 KiB), so that every Take gets stale bytes.
  for (size_t bytes : {size_t{64}, size_t{1} << 10, size_t{1} << 13, size_t{1} << 16}) {
    TensorBuffer b(bytes);
    std::memset(b.data(), 0xA5, b.size());
    pool.Give(std::move(b));
  }
}

// The global tensor of repetition `rep`: element i holds i + 1 + rep (never 0).
Tensor GlobalFor(DType dtype, const std::vector<int64_t>& shape, int rep) {
  Tensor t = Tensor::Iota(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i + 1 + rep) % 200));
  return t;
}

struct Case {
  std::vector<int64_t> mesh;
  std::vector<int64_t> shape;
  Placements from, to;
  PlannerKind planner = PlannerKind::kOptimal;
  DType dtype = DType::kF32;
};

std::string Describe(const Case& c, const Layout& from, const Layout& to) {
  return from.ToString() + " -> " + to.ToString() + " planner " + std::string(PlannerKindName(c.planner));
}

// Runs `c` kReps times on one RankContext per rank (so later reps reuse the pool), each rep on new
// data and starting from a poisoned pool when `poison`; checks every rank's result bit-exactly
// against ReferenceLocal. Returns the pool allocations per rank made after the first two reps.
std::vector<int64_t> RunRepeated(const Case& c, bool poison) {
  constexpr int kReps = 5;
  DeviceMesh mesh = *DeviceMesh::Create(c.mesh);
  Layout from = *Layout::Create(c.shape, mesh, c.from);
  Layout to = *Layout::Create(c.shape, mesh, c.to);
  RedistributeOptions options;
  options.planner = c.planner;
  StatusOr<std::shared_ptr<const Plan>> plan = PlanFor(from, to, c.dtype, options);
  EXPECT_TRUE(plan.ok()) << Describe(c, from, to) << ": " << plan.status().ToString();
  std::vector<int64_t> late_allocations(static_cast<size_t>(mesh.size()), -1);
  if (!plan.ok()) return late_allocations;
  auto world = std::move(ThreadWorld::Create(mesh.size()).value());
  std::mutex mu;
  Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.world_rank();
    Tensor local;
    int64_t allocations_after_warmup = 0;
    for (int rep = 0; rep < kReps; ++rep) {
      const Tensor global = GlobalFor(c.dtype, c.shape, rep);
      MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, rank));
      if (poison && rep % 2 == 0) Poison(ctx.buffers());
      local = x.local();  // copy-assign into the capacity local already holds
      MF_RETURN_IF_ERROR(ExecutePlan(**plan, ctx, local));
      MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, to, rank));
      if (!(local == want)) {
        std::lock_guard<std::mutex> lock(mu);
        ADD_FAILURE() << Describe(c, from, to) << " rep " << rep << " rank " << rank << ": got "
                      << local.ToString() << " want " << want.ToString();
      }
      if (rep == 1) allocations_after_warmup = ctx.buffers().allocations();
    }
    std::lock_guard<std::mutex> lock(mu);
    late_allocations[static_cast<size_t>(rank)] = ctx.buffers().allocations() - allocations_after_warmup;
    return Status();
  });
  EXPECT_TRUE(s.ok()) << Describe(c, from, to) << ": " << s.ToString();
  return late_allocations;
}

std::vector<Case> Cases() {
  const Placements s0 = {Shard{0}}, s1 = {Shard{1}}, r = {Replicate{}}, psum = {Partial{ReduceOp::kSum}};
  std::vector<Case> cases;
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{64, 48}, {3, 5}, {5, 3}, {0, 4}, {7, 9}}) {
    for (const auto& [f, t] : std::vector<std::pair<Placements, Placements>>{
             {s0, r}, {s0, s1}, {s1, s0}, {r, s1}, {s1, r}, {r, psum}, {psum, r}, {psum, s0}, {psum, s1}}) {
      for (PlannerKind p : {PlannerKind::kOptimal, PlannerKind::kGreedy, PlannerKind::kDirect}) {
        if (p == PlannerKind::kDirect && f == psum) continue;  // direct needs a Partial-free source
        cases.push_back(Case{{4}, shape, f, t, p});
      }
    }
  }
  // 2-D meshes: multi-step plans, sub-group communicators, send/recv.
  const Placements s0s1 = {Shard{0}, Shard{1}}, s1s0 = {Shard{1}, Shard{0}}, s0r = {Shard{0}, Replicate{}},
                   rs1 = {Replicate{}, Shard{1}}, ps0 = {Partial{ReduceOp::kSum}, Shard{0}},
                   s1r = {Shard{1}, Replicate{}}, rr = {Replicate{}, Replicate{}};
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{8, 12}, {3, 5}}) {
    for (const auto& [f, t] : std::vector<std::pair<Placements, Placements>>{
             {s0s1, s1s0}, {s0r, rs1}, {ps0, s1r}, {s0s1, rr}, {rr, s0s1}}) {
      for (PlannerKind p : {PlannerKind::kOptimal, PlannerKind::kGreedy, PlannerKind::kDirect}) {
        if (p == PlannerKind::kDirect && f == ps0) continue;
        cases.push_back(Case{{2, 2}, shape, f, t, p});
      }
    }
  }
  cases.push_back(Case{{4}, {6, 10}, {Shard{0}}, {Shard{1}}, PlannerKind::kOptimal, DType::kBF16});
  cases.push_back(Case{{4}, {6, 10}, {Shard{1}}, {Replicate{}}, PlannerKind::kOptimal, DType::kI64});
  return cases;
}

TEST(ExecutorTest, RepeatedRedistributionWithReusedBuffersIsExact) {
  for (const Case& c : Cases()) RunRepeated(c, /*poison=*/false);
}

TEST(ExecutorTest, StalePooledBytesNeverReachTheResult) {
  // Every second rep starts with pooled buffers full of 0xA5 bytes: empty shards, uneven shapes
  // and Partial(sum) targets (zeros on every rank but one) must still be exact.
  for (const Case& c : Cases()) RunRepeated(c, /*poison=*/true);
}

TEST(ExecutorTest, SteadyStateAllocatesNothing) {
  const Placements s0 = {Shard{0}}, s1 = {Shard{1}}, r = {Replicate{}};
  for (const auto& [f, t] : std::vector<std::pair<Placements, Placements>>{{s0, r}, {s0, s1}, {s1, s0}, {r, s1}}) {
    for (PlannerKind p : {PlannerKind::kOptimal, PlannerKind::kDirect}) {
      const Case c{{4}, {256, 64}, f, t, p};
      const std::vector<int64_t> late = RunRepeated(c, /*poison=*/false);
      for (size_t rank = 0; rank < late.size(); ++rank) {
        EXPECT_EQ(late[rank], 0) << "rank " << rank << " case " << c.mesh.size() << "-D planner "
                                 << PlannerKindName(p);
      }
    }
  }
}

TEST(ExecutorTest, ReplicateToPartialSumAfterLargeDataGivesZeros) {
  // A large all-gather fills the pool with non-zero data; the Partial(sum) step that follows must
  // hand every rank but coordinate 0 exact zeros, and reducing back must give the tensor.
  DeviceMesh mesh = *DeviceMesh::Create({4});
  const std::vector<int64_t> shape = {512, 64};
  Layout s0 = *Layout::Create(shape, mesh, {Shard{0}});
  Layout r = *Layout::Create(shape, mesh, {Replicate{}});
  Layout p = *Layout::Create(shape, mesh, {Partial{ReduceOp::kSum}});
  Layout ps1 = *Layout::Create(shape, mesh, {Shard{1}});
  const Tensor global = GlobalFor(DType::kF32, shape, 7);
  auto world = std::move(ThreadWorld::Create(4).value());
  Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.world_rank();
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, s0, rank));
    Tensor local = x.local();
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> gather, PlanFor(s0, r, DType::kF32));
    MF_RETURN_IF_ERROR(ExecutePlan(*gather, ctx, local));
    EXPECT_EQ(local, global);
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> to_partial, PlanFor(r, p, DType::kF32));
    MF_RETURN_IF_ERROR(ExecutePlan(*to_partial, ctx, local));
    if (rank == 0) {
      EXPECT_EQ(local, global);
    } else {
      EXPECT_EQ(local, Tensor::Zeros(DType::kF32, shape)) << "rank " << rank;
    }
    // Partial(sum) -> S(1) reduce-scatters into pooled buffers holding the gathered data.
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> scatter, PlanFor(p, ps1, DType::kF32));
    MF_RETURN_IF_ERROR(ExecutePlan(*scatter, ctx, local));
    MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, ps1, rank));
    EXPECT_EQ(local, want) << "rank " << rank;
    return Status();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(ExecutorTest, SendRecvBookkeepingIsCachedPerStepNotPerPlanObject) {
  // Direct plans are not cached by the planner: every PlanFor below returns a new Plan object, freed
  // at the end of its iteration, so a later one may sit at the same address while holding another
  // step. The schedule cache is keyed on the step's layouts: equal steps hit, different ones never do.
  DeviceMesh mesh = *DeviceMesh::Create({2, 3});
  const std::vector<int64_t> shape = {7, 10};
  const Layout a = *Layout::Create(shape, mesh, {Shard{0}, Shard{1}});
  const Layout b = *Layout::Create(shape, mesh, {Shard{1}, Shard{0}});
  const Layout c = *Layout::Create(shape, mesh, {Replicate{}, Shard{0}});
  RedistributeOptions direct;
  direct.planner = PlannerKind::kDirect;
  auto world = std::move(ThreadWorld::Create(mesh.size()).value());
  std::mutex mu;
  Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.world_rank();
    for (int rep = 0; rep < 6; ++rep) {
      const Layout& to = rep % 2 == 0 ? b : c;
      MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(a, to, DType::kF32, direct));
      EXPECT_EQ(plan->steps.size(), 1u);
      EXPECT_EQ(plan->steps.front().kind, StepKind::kSendRecv);
      const Tensor global = GlobalFor(DType::kF32, shape, rep);
      MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, a, rank));
      Tensor local = x.local();
      MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, local));
      MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, to, rank));
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(local, want) << "rep " << rep << " rank " << rank;
    }
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(ctx.send_recv_cache().size(), 2u) << "rank " << rank;
    EXPECT_EQ(ctx.send_recv_cache().misses(), 2) << "rank " << rank;
    EXPECT_EQ(ctx.send_recv_cache().hits(), 4) << "rank " << rank;
    return Status();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace meshflow

namespace meshflow {
namespace {

Status OnWorld4(const std::function<Status(RankContext&)>& body) {
  static ThreadWorld* world = ThreadWorld::Create(4).value().release();
  const DeviceMesh mesh = *DeviceMesh::Create({4}, {"dp"});
  return world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return body(ctx);
  });
}

// A Partial(sum) tensor whose rank-r part is a deterministic function of r.
StatusOr<DTensor> PartialOf(int64_t n, int seed, RankContext& ctx) {
  Tensor t = Tensor::Zeros(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) {
    t.SetFromDouble(i, 0.1 * static_cast<double>((i * 13 + seed * 7 + ctx.world_rank() * 5) % 29) - 1.3);
  }
  MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({n}, ctx.mesh(), {Partial{ReduceOp::kSum}}));
  return DTensor::FromLocal(std::move(t), l, ctx.world_rank());
}

// A bucket of all-reduces runs as one fused collective and gives every tensor the bits of its own
// Redistribute; a mixed bucket runs its plans one by one.
TEST(ExecutePlansAsyncTest, FusedAllReduceEqualsOneAllReduceEach) {
  const Status s = OnWorld4([](RankContext& ctx) -> Status {
    MF_ASSIGN_OR_RETURN(Layout r3, Layout::Create({3}, ctx.mesh(), {Replicate{}}));
    MF_ASSIGN_OR_RETURN(Layout r1000, Layout::Create({1000}, ctx.mesh(), {Replicate{}}));
    MF_ASSIGN_OR_RETURN(Layout r77, Layout::Create({77}, ctx.mesh(), {Replicate{}}));
    for (bool mixed : {false, true}) {
      std::vector<DTensor> xs;
      MF_ASSIGN_OR_RETURN(DTensor a, PartialOf(3, 1, ctx));
      MF_ASSIGN_OR_RETURN(DTensor b, PartialOf(1000, 2, ctx));
      MF_ASSIGN_OR_RETURN(DTensor c, PartialOf(77, 3, ctx));
      std::vector<Layout> targets = {r3, r1000, r77};
      if (mixed) {  // c: S(0) -> R, an all-gather
        MF_ASSIGN_OR_RETURN(Layout s77, Layout::Create({77}, ctx.mesh(), {Shard{0}}));
        MF_ASSIGN_OR_RETURN(DTensor cs, Redistribute(c, s77, ctx));
        c = std::move(cs);
      }
      std::vector<DTensor> want;
      for (int i = 0; i < 3; ++i) {
        const DTensor& x = i == 0 ? a : i == 1 ? b : c;
        MF_ASSIGN_OR_RETURN(DTensor w, Redistribute(x, targets[static_cast<size_t>(i)], ctx));
        want.push_back(std::move(w));
      }
      ctx.comm_stream().set_record_timeline(true);
      (void)ctx.comm_stream().TakeTimeline();
      MF_ASSIGN_OR_RETURN(std::vector<PendingDTensor> pending, RedistributeBucketAsync({a, b, c}, targets, ctx));
      for (size_t i = 0; i < pending.size(); ++i) {
        MF_ASSIGN_OR_RETURN(DTensor got, pending[i].Wait());
        if (!(got.local() == want[i].local()) || !(got.layout() == targets[i])) {
          return InternalError("bucket tensor " + std::to_string(i) + (mixed ? " (mixed)" : ""));
        }
      }
      const std::vector<StreamRecord> t = ctx.comm_stream().TakeTimeline();
      ctx.comm_stream().set_record_timeline(false);
      const std::string want_label = mixed ? "bucket" : "bucket (fused all_reduce)";
      if (t.size() != 1 || t[0].label != want_label) return InternalError("expected one '" + want_label + "' item");
    }
    // Errors: counts.
    MF_ASSIGN_OR_RETURN(DTensor a, PartialOf(3, 1, ctx));
    if (RedistributeBucketAsync({a}, {}, ctx).status().code() != StatusCode::kInvalidArgument) {
      return InternalError("count mismatch accepted");
    }
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A prefetch serves exactly one use of exactly the tensor (and storage) it was made from.
TEST(PrefetchCacheTest, ServesOneUseOfTheSameTensor) {
  const Status s = OnWorld4([](RankContext& ctx) -> Status {
    MF_ASSIGN_OR_RETURN(Layout sharded, Layout::Create({8, 4}, ctx.mesh(), {Shard{0}}));
    MF_ASSIGN_OR_RETURN(Layout full, Layout::Create({8, 4}, ctx.mesh(), {Replicate{}}));
    const Tensor global = Tensor::Iota(DType::kF32, {8, 4});
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(global, sharded, ctx.world_rank()));
    PrefetchCache& cache = ctx.prefetches();
    MF_RETURN_IF_ERROR(PrefetchRedistribute(w, full, ctx));
    MF_RETURN_IF_ERROR(PrefetchRedistribute(w, full, ctx));  // the same: not started twice
    if (!cache.Contains(w, full) || cache.size() != 1) return InternalError("contains");
    DTensor other = w;  // another tensor, same values: not served
    if (cache.Take(other, full).has_value()) return InternalError("served another tensor");
    std::optional<StatusOr<DTensor>> got = cache.Take(w, full);
    if (!got.has_value() || !got->ok() || !((*got)->local() == global)) return InternalError("take");
    if (cache.Take(w, full).has_value()) return InternalError("served twice");
    // Redistribute itself finds it too; an untaken one is dropped by Clear.
    MF_RETURN_IF_ERROR(PrefetchRedistribute(w, full, ctx));
    MF_RETURN_IF_ERROR(cache.Clear());
    if (cache.size() != 0 || cache.stats().dropped != 1 || cache.stats().hits != 1 || cache.stats().issued != 2) {
      return InternalError("stats");
    }
    // Already in the target: nothing to start.
    MF_RETURN_IF_ERROR(PrefetchRedistribute(w, sharded, ctx));
    return cache.size() == 0 ? Status::Ok() : InternalError("identity prefetch");
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshflow
