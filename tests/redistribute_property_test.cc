// Property test: random (mesh, shape, dtype, source layout, target layout) cases, every planner,
// executed on the in-process world (cases and checks: tests/redistribute_cases.h). Every rank's
// result is compared with the reference computed from the global tensor alone:
//   - Partial-free targets: the local shard is bit-exact equal to the global tensor's box slice;
//   - Partial targets: FullTensor (which reduces) equals the global tensor;
// and the bytes each rank received (backend byte counters) equal the plan's modelled bytes, which
// are never below the lower bound.
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/test_cases.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/tests/redistribute_cases.h"

namespace meshflow {
namespace {

using testing::CheckRank;
using testing::PlanCase;
using testing::PlannedCase;
using testing::PropertyTestCases;
using testing::RedistributeCase;
using testing::RedistributeCaseGenerator;

// Mesh shapes of the random cases.
const std::vector<std::vector<int64_t>> kMeshShapes = {
    {1}, {2}, {3}, {4}, {5}, {8}, {1, 2}, {2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}, {1, 4},
    {2, 2, 2}, {2, 1, 3}, {1, 2, 2}, {2, 2, 1}};

ThreadWorld& WorldOf(int n) {
  static std::map<int, std::unique_ptr<ThreadWorld>>* worlds = new std::map<int, std::unique_ptr<ThreadWorld>>();
  auto& w = (*worlds)[n];
  if (!w) w = std::move(ThreadWorld::Create(n).value());
  return *w;
}

// Fills a rank's step-buffer pool with buffers of 0xA5 bytes, larger than any buffer of a case
// (dims <= 9, rank <= 4, 8-byte dtypes: 52 KiB): a step that reads a pooled byte it did not write
// gives a wrong result.
void PoisonPool(BufferPool& pool) {
  for (size_t bytes : {size_t{64}, size_t{1} << 10, size_t{1} << 13, size_t{1} << 17}) {
    TensorBuffer b(bytes);
    std::memset(b.data(), 0xA5, b.size());
    pool.Give(std::move(b));
  }
}

// Runs one case with one planner; returns a description of the first failure, or "". With
// `stale_pool`, every rank runs the case twice on the same RankContext, each time from a poisoned
// step-buffer pool (the second run also reuses the first run's buffers).
std::string RunCase(const RedistributeCase& c, PlannerKind planner, bool stale_pool = false) {
  std::optional<PlannedCase> planned;
  const std::string plan_failure = PlanCase(c, planner, &planned);
  if (!plan_failure.empty() || !planned) return plan_failure;
  ThreadWorld& world = WorldOf(c.mesh.size());
  world.ResetCounters();
  std::mutex mu;
  std::string failure;
  Status run = world.Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, c.mesh));
    for (int run = 0; run < (stale_pool ? 2 : 1); ++run) {
      if (stale_pool) PoisonPool(ctx.buffers());
      MF_ASSIGN_OR_RETURN(std::string err, CheckRank(c, *planned, ctx));
      if (!err.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) failure = "rank " + std::to_string(comm.world_rank()) + " run " + std::to_string(run) + " " + err;
      }
    }
    return Status();
  });
  if (!run.ok()) return "run failed: " + run.ToString();
  return failure;
}

TEST(RedistributePropertyTest, RandomCasesMatchReference) {
  RedistributeCaseGenerator gen(20261203, kMeshShapes);
  const int cases = PropertyTestCases(1500);
  int failures = 0;
  for (int i = 0; i < cases && failures < 10; ++i) {
    const RedistributeCase c = gen.Next();
    for (PlannerKind planner : {PlannerKind::kOptimal, PlannerKind::kGreedy, PlannerKind::kDirect}) {
      const std::string f = RunCase(c, planner);
      if (!f.empty()) {
        ++failures;
        ADD_FAILURE() << "case " << i << " " << c.ToString() << " planner " << PlannerKindName(planner) << ": " << f;
      }
    }
  }
}

// Step buffers come from a per-rank pool whose bytes are stale: the same properties must hold when
// the pool is full of garbage and when it holds an earlier run's buffers.
TEST(RedistributePropertyTest, RandomCasesWithStalePooledBuffersMatchReference) {
  RedistributeCaseGenerator gen(20261204, kMeshShapes);
  const int cases = PropertyTestCases(300);
  int failures = 0;
  for (int i = 0; i < cases && failures < 10; ++i) {
    const RedistributeCase c = gen.Next();
    for (PlannerKind planner : {PlannerKind::kOptimal, PlannerKind::kGreedy, PlannerKind::kDirect}) {
      const std::string f = RunCase(c, planner, /*stale_pool=*/true);
      if (!f.empty()) {
        ++failures;
        ADD_FAILURE() << "case " << i << " " << c.ToString() << " planner " << PlannerKindName(planner) << ": " << f;
      }
    }
  }
}

TEST(RedistributePropertyTest, PartialToOtherPartialIsAnError) {
  DeviceMesh mesh = *DeviceMesh::Create({2});
  Layout from = *Layout::Create({4}, mesh, {Partial{ReduceOp::kSum}});
  Layout to = *Layout::Create({4}, mesh, {Partial{ReduceOp::kMax}});
  auto plan = PlanFor(from, to, DType::kF32);
  EXPECT_FALSE(plan.ok());
}

// A global tensor with the extremes of its dtype (lowest/highest, -inf/inf, -0.0, NaN), so that
// a wrong identity for max/min/sum shows.
Tensor ExtremeGlobal(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t = testing::GlobalFor(dtype, shape);
  VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    std::span<T> d = t.data<T>();
    std::vector<T> special;
    if constexpr (std::is_same_v<T, BFloat16>) {
      special = {BFloat16(-std::numeric_limits<float>::infinity()), BFloat16(std::numeric_limits<float>::infinity()),
                 BFloat16(-0.0f), BFloat16(-3.0f)};
    } else if constexpr (std::is_floating_point_v<T>) {
      special = {-std::numeric_limits<T>::infinity(), std::numeric_limits<T>::infinity(), -T{0},
                 std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max()};
    } else {
      special = {std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max(), T{-1}, T{1000001}};
    }
    for (size_t i = 0; i < special.size() && i < d.size(); ++i) d[d.size() - 1 - 2 * i % d.size()] = special[i];
  });
  return t;
}

// The identity of op as the one element of a tensor of `dtype`.
Tensor IdentityOf(DType dtype, ReduceOp op) {
  Tensor t = Tensor::Zeros(dtype, {1});
  VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, BFloat16>) {
      const float inf = std::numeric_limits<float>::infinity();
      t.data<T>()[0] = BFloat16(op == ReduceOp::kSum ? -0.0f : op == ReduceOp::kMax ? -inf : inf);
    } else if constexpr (std::is_floating_point_v<T>) {
      const T inf = std::numeric_limits<T>::infinity();
      t.data<T>()[0] = op == ReduceOp::kSum ? -T{0} : op == ReduceOp::kMax ? -inf : inf;
    } else {
      t.data<T>()[0] = op == ReduceOp::kSum   ? T{0}
                       : op == ReduceOp::kMax ? std::numeric_limits<T>::lowest()
                                              : std::numeric_limits<T>::max();
    }
  });
  return t;
}

TEST(RedistributePropertyTest, ShardToPartialIsOneLocalStepAndExact) {
  struct Case {
    std::vector<int64_t> mesh;
    std::vector<int64_t> shape;
    const char* from;
    const char* to;  // "P" is replaced by P(op)
  };
  const std::vector<Case> cases = {
      {{2}, {5, 3}, "S(0)", "P"},
      {{3}, {7, 2}, "S(0)", "P"},            // uneven: 3, 3, 1 rows
      {{3}, {2, 3}, "S(0)", "P"},            // 1, 1, 0 rows: rank 2 holds only identity values
      {{2, 2}, {3, 2}, "S(0),S(0)", "P,P"},  // rows 0 | 1 | 2 | empty
      {{2, 2}, {3, 2}, "S(0),S(0)", "S(0),P"},
      {{2, 2}, {3, 5}, "S(0),S(1)", "P,S(1)"},
      {{2, 2}, {3, 5}, "S(1),S(0)", "P,P"},
  };
  for (const Case& c : cases) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      for (DType dtype : {DType::kF32, DType::kI32, DType::kI64, DType::kF64, DType::kBF16}) {
        std::string to_text = c.to;
        for (size_t p = to_text.find('P'); p != std::string::npos; p = to_text.find('P', p + 1)) {
          to_text.insert(p + 1, "(" + std::string(ReduceOpName(op)) + ")");
        }
        const DeviceMesh mesh = *DeviceMesh::Create(c.mesh);
        const Layout from = *Layout::Create(c.shape, mesh, *ParsePlacements(c.from));
        const Layout to = *Layout::Create(c.shape, mesh, *ParsePlacements(to_text));
        SCOPED_TRACE(from.ToString() + " -> " + to.PlacementsString() + " " + std::string(DTypeName(dtype)));
        StatusOr<std::shared_ptr<const Plan>> plan = PlanFor(from, to, dtype);
        ASSERT_TRUE(plan.ok()) << plan.status();
        const Plan& p = **plan;
        ASSERT_EQ(p.steps.size(), 1u);
        EXPECT_EQ(p.steps[0].kind, StepKind::kLocalShardToPartial);
        EXPECT_EQ(p.max_bytes_received_per_rank, 0);
        EXPECT_EQ(p.lower_bound_bytes_per_rank, std::optional<int64_t>(0));
        const Tensor global = ExtremeGlobal(dtype, c.shape);
        const Tensor identity = IdentityOf(dtype, op);
        const int64_t es = DTypeSize(dtype);
        ThreadWorld& world = WorldOf(mesh.size());
        std::mutex mu;
        std::vector<std::string> failures;
        Status run = world.Run([&](Communicator& comm) -> Status {
          MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
          const int r = comm.world_rank();
          MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, r));
          Tensor local = x.local();
          comm.ResetCounters();
          MF_RETURN_IF_ERROR(ExecutePlan(p, ctx, local));
          const ByteCounters counted = comm.counters();
          std::string err;
          if (counted.bytes_sent != 0 || counted.bytes_received != 0) err += "communicated; ";
          // Own shard in place, the identity of op elsewhere, bit for bit.
          MF_ASSIGN_OR_RETURN(Box fb, from.LocalBox(r));
          MF_ASSIGN_OR_RETURN(Box tb, to.LocalBox(r));
          if (local.shape() != tb.shape) err += "wrong local shape; ";
          for (int64_t i = 0; err.empty() && i < local.NumElements(); ++i) {
            std::vector<int64_t> idx(tb.shape.size());
            for (int64_t d = static_cast<int64_t>(idx.size()) - 1, k = i; d >= 0; --d) {
              idx[d] = tb.offset[d] + k % tb.shape[d];
              k /= tb.shape[d];
            }
            const std::byte* want = fb.Contains(idx) ? global.raw() + global.FlatIndex(idx) * es : identity.raw();
            if (std::memcmp(local.raw() + i * es, want, static_cast<size_t>(es)) != 0) {
              err += "element " + std::to_string(i) + " is " + FormatElement(local, i) + "; ";
            }
          }
          MF_ASSIGN_OR_RETURN(DTensor y, DTensor::FromLocal(local, to, r));
          MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
          if (!(full == global)) err += "FullTensor " + full.ToString() + " != " + global.ToString();
          if (!err.empty()) {
            std::lock_guard<std::mutex> lock(mu);
            failures.push_back("rank " + std::to_string(r) + ": " + err);
          }
          return Status();
        });
        ASSERT_TRUE(run.ok()) << run;
        for (const std::string& f : failures) ADD_FAILURE() << f;
      }
    }
  }
}

TEST(RedistributePropertyTest, ShardToPartialAvgGathers) {
  // avg has no identity: S -> P(avg) is no local edge (it would not be exact), the plan gathers.
  const DeviceMesh mesh = *DeviceMesh::Create({3});
  const Layout from = *Layout::Create({7, 2}, mesh, {Shard{0}});
  const Layout to = *Layout::Create({7, 2}, mesh, {Partial{ReduceOp::kAvg}});
  StatusOr<std::shared_ptr<const Plan>> plan = PlanFor(from, to, DType::kF32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const PlanStep& s : (*plan)->steps) EXPECT_NE(s.kind, StepKind::kLocalShardToPartial);
  const RedistributeCase c{mesh, {7, 2}, DType::kF32, {Shard{0}}, {Partial{ReduceOp::kAvg}}, {}, {}};
  EXPECT_EQ(RunCase(c, PlannerKind::kOptimal), "");
}

}  // namespace
}  // namespace meshflow
