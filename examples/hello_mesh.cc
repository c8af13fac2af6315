// hello_mesh: the quick-start demo.
//
// Builds a 2x2 in-process world (mesh dims "dp" x "tp"), distributes an uneven 5x6 tensor under
// several layouts (sharded, nested, reordered, replicated, partial), prints every rank's box,
// gathers each DTensor back with FullTensor on all four rank threads and checks it against the
// input. Then redistributes [S(0),S(1)] -> [S(1),S(0)] with the optimal planner and prints the
// plan. Exit code 0 only when every check passes.
//
//   bazel run //examples:hello_mesh
//
// It takes no arguments; --help (-h) prints a short description, any other argument exits 2.
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "meshflow/base/cli.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/planner/plan_format.h"

namespace meshflow {
namespace {

constexpr const char* kUsage =
    "usage: hello_mesh\n"
    "\n"
    "The quick-start demo: distributes a 5x6 tensor under several layouts of a 2x2 in-process mesh,\n"
    "gathers each back, redistributes S(0),S(1) -> S(1),S(0) and checks every result.\n"
    "\n"
    "flags:\n"
    "  -h, --help   print this help and exit\n"
    "\n"
    "exit codes: 0 every check passed, 1 a check or a step failed, 2 bad input (message on stderr).\n";

struct Case {
  const char* placements;
  const char* order;  // ParseShardOrder syntax, "" = default
};

Status Main() {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({2, 2}, {"dp", "tp"}));
  const std::vector<int64_t> shape = {5, 6};
  const Tensor global = Tensor::Iota(DType::kF32, shape);
  std::printf("meshflow hello_mesh: %s, global tensor f32[5,6] = 0..29 (uneven on purpose)\n\n",
              mesh.ToString().c_str());

  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(mesh.size()));
  const std::vector<Case> cases = {
      {"S(0),S(1)", ""}, {"S(0),S(0)", ""}, {"S(0),S(0)", "0:[1,0]"},
      {"R,S(1)", ""},    {"P(sum),S(0)", ""}, {"S(1),P(max)", ""},
  };
  int failures = 0;
  for (const Case& c : cases) {
    MF_ASSIGN_OR_RETURN(Placements placements, ParsePlacements(c.placements));
    MF_ASSIGN_OR_RETURN(ShardOrder order, ParseShardOrder(c.order));
    MF_ASSIGN_OR_RETURN(Layout layout, Layout::Create(shape, mesh, placements, order));
    std::printf("layout %s\n", layout.PlacementsString().c_str());
    for (int r : mesh.ranks()) {
      MF_ASSIGN_OR_RETURN(Box box, layout.LocalBox(r));
      MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, mesh.Coordinate(r));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(global, layout, r));
      std::printf("  rank %d (dp=%lld, tp=%lld): box %-14s local %s\n", r, static_cast<long long>(coord[0]),
                  static_cast<long long>(coord[1]), box.ToString().c_str(), d.local().ToString().c_str());
    }
    std::mutex mu;
    int mismatches = 0;
    Status run = world->Run([&](Communicator& comm) -> Status {
      MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
      MF_ASSIGN_OR_RETURN(DTensor d, Distribute(global, layout, comm.world_rank()));
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(d, ctx));
      if (!(full == global)) {
        std::lock_guard<std::mutex> lock(mu);
        ++mismatches;
      }
      return Status();
    });
    MF_RETURN_IF_ERROR(run);
    std::printf("  full_tensor on all 4 ranks: %s\n\n", mismatches == 0 ? "OK (bit exact)" : "MISMATCH");
    failures += mismatches;
  }

  MF_ASSIGN_OR_RETURN(Layout from, Layout::Create({8, 8}, mesh, {Shard{0}, Shard{1}}));
  MF_ASSIGN_OR_RETURN(Layout to, Layout::Create({8, 8}, mesh, {Shard{1}, Shard{0}}));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, DType::kF32));
  std::printf("redistribute f32[8,8] %s -> %s:\n%s\n", from.PlacementsString().c_str(),
              to.PlacementsString().c_str(), PlanToText(*plan).c_str());
  const Tensor g8 = Tensor::Iota(DType::kF32, {8, 8});
  std::mutex mu;
  int bad = 0;
  MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(DTensor d, Distribute(g8, from, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(DTensor e, Redistribute(d, to, ctx));
    MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(g8, to, comm.world_rank()));
    if (!(e.local() == want)) {
      std::lock_guard<std::mutex> lock(mu);
      ++bad;
    }
    return Status();
  }));
  std::printf("executed on the in-process world: %s\n", bad == 0 ? "every rank's shard matches the reference" : "MISMATCH");
  failures += bad;
  if (failures != 0) return InternalError(std::to_string(failures) + " checks failed");
  std::printf("\nall checks passed\n");
  return Status();
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) {
  if (meshflow::HasHelpFlag(argc, argv)) {
    std::fputs(meshflow::kUsage, stdout);
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "hello_mesh: %s\n", meshflow::UnknownArgumentError("hello_mesh", argv[1]).message().c_str());
    return 2;
  }
  meshflow::Status s = meshflow::Main();
  if (!s.ok()) {
    std::fprintf(stderr, "hello_mesh failed: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
