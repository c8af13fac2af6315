// The plan executor (runtime/executor.h) on the NCCL backend: device tensors (copied to the rank's
// GPU on its compute stream), plan steps on the CUDA communication stream through the stream-ordered
// collectives (the device-pointer API) and the CUDA runtime's byte operations
// (runtime/cuda/cuda_device.h), results copied back to the host. A set of redistributions
// (all-gather, all-reduce, reduce-scatter, all-to-all, local steps, direct send/recv plans; uneven
// and empty shards) compared bit for bit with the single-rank reference
// (ReferenceLocal of the global tensor), and the counted bytes compared with the plan's model. Uses
// every visible GPU (one rank each); meshes are the 1-D world and, for an even world, a 2-D split.
// Skips without a CUDA device.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/collectives/nccl/nccl_communicator.h"
#include "meshflow/cuda/cuda_test_util.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

TEST(NcclExecutorTest, RedistributionsMatchReference) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  auto created = NcclWorld::Create();
  ASSERT_TRUE(created.ok()) << created.status();
  NcclWorld& world = **created;
  const int n = world.size();
  std::vector<std::vector<int64_t>> meshes = {{n}};
  if (n % 2 == 0 && n >= 2) meshes.push_back({2, n / 2});
  if (n == 1) meshes.push_back({1, 1});
  const std::vector<std::pair<std::vector<int64_t>, std::vector<std::pair<std::string, std::string>>>> cases = {
      {{7, 5}, {{"S(0)", "R"}, {"R", "S(1)"}, {"S(0)", "S(1)"}, {"P(sum)", "R"}, {"P(sum)", "S(0)"}, {"P(max)", "S(1)"}}},
      {{0, 3}, {{"S(0)", "R"}, {"S(1)", "S(0)"}}},
      {{3, 4, 5}, {{"S(2)", "S(0)"}, {"P(avg)", "R"}, {"R", "S(1)"}}},
  };
  int checked = 0;
  for (const auto& mesh_shape : meshes) {
    auto mesh = DeviceMesh::Create(mesh_shape);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    for (const auto& [shape, transitions] : cases) {
      for (const auto& [from_s, to_s] : transitions) {
        for (DType dtype : {DType::kF32, DType::kI32, DType::kBF16}) {
          // Same placement on every mesh dim, plus the 2-D transpose pattern when 2-D.
          std::vector<std::pair<std::string, std::string>> specs;
          std::string f = from_s, t = to_s;
          for (size_t d = 1; d < mesh_shape.size(); ++d) f += "," + from_s, t += "," + to_s;
          specs.push_back({f, t});
          if (mesh_shape.size() == 2 && shape.size() >= 2) specs.push_back({"S(0),S(1)", "S(1),S(0)"});
          for (const auto& [fs, ts] : specs) {
            auto from_p = ParsePlacements(fs);
            auto to_p = ParsePlacements(ts);
            ASSERT_TRUE(from_p.ok() && to_p.ok()) << fs << " " << ts;
            auto from = Layout::Create(shape, *mesh, *from_p);
            auto to = Layout::Create(shape, *mesh, *to_p);
            if (!from.ok() || !to.ok()) continue;
            auto plan = PlanFor(*from, *to, dtype);
            ASSERT_TRUE(plan.ok()) << plan.status();
            Tensor global = Tensor::Iota(dtype, shape);
            world.ResetCounters();
            std::mutex mu;
            Status run = world.Run([&](NcclCommunicator& comm) -> Status {
              MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, *mesh));
              const int rank = comm.world_rank();
              MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, *from, rank));
              MF_ASSIGN_OR_RETURN(Tensor dev, x.local().CopyTo(ctx.device(), ctx.compute_stream_ptr()));
              MF_RETURN_IF_ERROR(ExecutePlan(**plan, ctx, dev));
              if (dev.device() != ctx.device()) return InternalError("result left " + ctx.device().ToString());
              MF_ASSIGN_OR_RETURN(Tensor local, dev.ToHost());
              const bool partial_target =
                  std::any_of(to->placements().begin(), to->placements().end(), [](const Placement& p) { return IsPartial(p); });
              std::lock_guard<std::mutex> lock(mu);
              if (!partial_target) {
                MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, *to, rank));
                EXPECT_EQ(local, want) << fs << " -> " << ts << " " << DTypeName(dtype) << " rank " << rank;
              }
              return Status();
            });
            ASSERT_TRUE(run.ok()) << fs << " -> " << ts << ": " << run;
            const auto& ranks = mesh->ranks();
            for (size_t i = 0; i < ranks.size(); ++i) {
              EXPECT_EQ(world.counters(ranks[i]).bytes_received, (*plan)->bytes_received_per_rank[i])
                  << fs << " -> " << ts << " world rank " << ranks[i];
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace meshflow
