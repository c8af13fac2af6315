// Property test of redistribution on the MPI backend (the mpirun twin of
// tests/redistribute_property_test.cc), run by tests/mpi/BUILD.bazel under mpirun -np 4 and 8:
//
//   mpi_redistribute_property_test [CASES] [SEED]
//
// Random (mesh, shape, dtype, source layout, target layout) cases on meshes that cover the world
// (4 ranks: 4, 2x2, 1x4; 8 ranks: 8, 2x4, 2x2x2), every planner (cases and checks:
// tests/redistribute_cases.h). Every rank generates the same cases
// from a fixed seed, plans independently (plans must agree: the backend's header check rejects
// ranks that run different collectives) and compares its own result with the reference computed
// from the global tensor alone:
//   - Partial-free targets: the local shard is bit-exact equal to ReferenceLocal;
//   - every target: FullTensor (which reduces Partial values) equals the global tensor;
//   - the bytes this rank received (MPI byte counters) equal the plan's modelled bytes, which are
//     never below the lower bound.
// Failures are combined over the world; rank 0 prints "N passed, M failed". Exit code 0 iff none.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/tests/redistribute_cases.h"

namespace meshflow {
namespace {

using testing::CheckRank;
using testing::PlanCase;
using testing::PlannedCase;
using testing::RedistributeCase;
using testing::RedistributeCaseGenerator;

// Meshes that cover a world of `world_size` ranks.
std::vector<std::vector<int64_t>> MeshShapesFor(int world_size) {
  if (world_size == 4) return {{4}, {2, 2}, {1, 4}};
  if (world_size == 8) return {{8}, {2, 4}, {2, 2, 2}};
  return {{world_size}, {1, world_size}};
}

// Runs one case with one planner on this rank; returns a description of the first failure, or "".
std::string RunCase(const RedistributeCase& c, PlannerKind planner, RankContext& ctx) {
  std::optional<PlannedCase> planned;
  const std::string plan_failure = PlanCase(c, planner, &planned);
  if (!plan_failure.empty() || !planned) return plan_failure;
  StatusOr<std::string> result = CheckRank(c, *planned, ctx);
  if (!result.ok()) return "run failed: " + result.status().ToString();
  return *result;
}

int Main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 300;
  const uint32_t seed = argc > 2 ? static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 20261203u;
  MpiFinalizeGuard finalize;
  auto world_or = MpiWorld();
  if (!world_or.ok()) MpiAbort(world_or.status());
  std::shared_ptr<Communicator> world = *world_or;
  const int me = world->rank();

  std::map<std::string, std::unique_ptr<RankContext>> comms_by_mesh;  // groups are split once per mesh
  RedistributeCaseGenerator gen(seed, MeshShapesFor(world->size()));
  std::vector<std::string> names;
  std::vector<int64_t> failed;
  int printed = 0;
  std::map<std::string, double> seconds;  // wall time per (mesh, planner), printed by rank 0
  for (int i = 0; i < cases; ++i) {
    const RedistributeCase c = gen.Next();
    std::unique_ptr<RankContext>& ctx = comms_by_mesh[c.mesh.ToString()];
    if (ctx == nullptr) {
      auto created = RankContext::Create(world, c.mesh);
      if (!created.ok()) MpiAbort(created.status());
      ctx = std::make_unique<RankContext>(std::move(*created));
    }
    for (PlannerKind planner : {PlannerKind::kOptimal, PlannerKind::kGreedy, PlannerKind::kDirect}) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::string f = RunCase(c, planner, *ctx);
      seconds[c.mesh.ToString() + " " + std::string(PlannerKindName(planner))] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      names.push_back("case " + std::to_string(i) + " " + c.ToString() + " planner " +
                      std::string(PlannerKindName(planner)));
      failed.push_back(f.empty() ? 0 : 1);
      if (!f.empty() && printed++ < 10)
        std::fprintf(stderr, "rank %d: FAILED %s: %s\n", me, names.back().c_str(), f.c_str());
    }
  }
  Status s =
      world->AllReduce(failed.data(), failed.data(), static_cast<int64_t>(failed.size()), DType::kI64, ReduceOp::kMax);
  if (!s.ok()) MpiAbort(s);
  int passed = 0, bad = 0;
  for (size_t i = 0; i < failed.size(); ++i) {
    if (failed[i] == 0) {
      ++passed;
    } else if (++bad <= 20 && me == 0) {
      std::printf("FAILED: %s\n", names[i].c_str());
    }
  }
  if (me == 0) {
    for (const auto& [name, secs] : seconds) std::printf("  %-24s %7.2f s\n", name.c_str(), secs);
    std::printf("mpi redistribute property, %d ranks, %d cases x 3 planners, seed %u: %d passed, %d failed\n",
                world->size(), cases, seed, passed, bad);
    std::fflush(stdout);
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
