// Property test: random (mesh, shape, dtype, source layout, target layout) cases, every planner,
// executed on the in-process world (cases and checks: tests/redistribute_cases.h). Every rank's
// result is compared with the reference computed from the global tensor alone:
//   - Partial-free targets: the local shard is bit-exact equal to the global tensor's box slice;
//   - Partial targets: FullTensor (which reduces) equals the global tensor;
// and the bytes each rank received (backend byte counters) equal the plan's modelled bytes, which
// are never below the lower bound.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/test_cases.h"
#include "meshflow/collectives/dtensor_api.h"
#include "meshflow/collectives/executor.h"
#include "meshflow/collectives/mesh_comms.h"
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
// `stale_pool`, every rank runs the case twice on the same MeshComms, each time from a poisoned
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
    MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, c.mesh));
    for (int run = 0; run < (stale_pool ? 2 : 1); ++run) {
      if (stale_pool) PoisonPool(comms.buffers());
      MF_ASSIGN_OR_RETURN(std::string err, CheckRank(c, *planned, comms));
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
  const int cases = PropertyTestCases(400);
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

}  // namespace
}  // namespace meshflow
