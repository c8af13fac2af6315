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
