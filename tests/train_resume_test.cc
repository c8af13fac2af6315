// End-to-end resume: a "training" state (a sharded parameter) and the data loader's position are
// saved in one checkpoint on a 2x2 (dp x tp) world, then loaded on a 4-rank 1-D world with
// another layout and on 2 ranks, and the loader continues with exactly the batches an
// uninterrupted run would have produced.
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/data/dataset.h"
#include "meshflow/data/loader.h"
#include "meshflow/dtensor/dtensor.h"

namespace meshflow {
namespace {

constexpr int64_t kSamples = 37;
constexpr int64_t kBatch = 6;
constexpr int kStepsBeforeSave = 4;

std::shared_ptr<const Dataset> MakeDataset() {
  return std::move(InMemoryDataset::FromTensor(Tensor::Iota(DType::kI64, {kSamples, 2})).value());
}

DataLoaderOptions Options() {
  DataLoaderOptions o;
  o.dp_dims = {MeshDimRef{0}};
  o.global_batch_size = kBatch;
  o.seed = 7;
  return o;
}

// Global sample indices of the next `steps` batches as seen by the union of dp ranks 0..dp-1.
std::vector<std::set<int64_t>> Stream(const DeviceMesh& mesh, const std::vector<int>& dp_reps,
                                      const std::string& state_text, int steps) {
  std::vector<std::set<int64_t>> out(static_cast<size_t>(steps));
  for (int r : dp_reps) {
    auto loader = std::move(DataLoader::Create(MakeDataset(), mesh, r, Options()).value());
    if (!state_text.empty()) {
      EXPECT_TRUE(loader->Restore(*LoaderState::Parse(state_text)).ok());
    }
    for (int s = 0; s < steps; ++s) {
      Batch b = std::move(loader->NextBatch().value());
      out[s].insert(b.sample_indices.begin(), b.sample_indices.end());
    }
  }
  return out;
}

TEST(TrainResumeTest, ParameterAndLoaderStateRoundTripAcrossWorldSizes) {
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/resume_ckpt";
  DeviceMesh mesh = *DeviceMesh::Create({2, 2}, {"dp", "tp"});
  const Tensor param = Tensor::Iota(DType::kF32, {7, 5});
  Layout param_layout = *Layout::Create({7, 5}, mesh, {Replicate{}, Shard{1}});

  // Uninterrupted reference stream on the 2x2 mesh (dp ranks are 0 and 2).
  const std::vector<std::set<int64_t>> full = Stream(mesh, {0, 2}, "", kStepsBeforeSave + 5);

  // Train for a few steps, then save parameter + loader state.
  auto world = std::move(ThreadWorld::Create(4).value());
  std::mutex mu;
  std::string saved_state;
  ASSERT_TRUE(world
                  ->Run([&](Communicator& comm) -> Status {
                    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
                    MF_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(MakeDataset(), mesh, comm.world_rank(), Options()));
                    for (int s = 0; s < kStepsBeforeSave; ++s) MF_RETURN_IF_ERROR(loader->Next().status());
                    MF_ASSIGN_OR_RETURN(DTensor p, Distribute(param, param_layout, comm.world_rank()));
                    SaveOptions opts;
                    opts.extra_state = loader->state().ToString();
                    {
                      std::lock_guard<std::mutex> lock(mu);
                      saved_state = opts.extra_state;
                    }
                    return SaveCheckpoint(dir, {{"w", &p}}, ctx, opts);
                  })
                  .ok());

  // Resume: the loader state read back equals what was saved, and continues the stream.
  StatusOr<std::string> extra = LoadExtraState(dir);
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(*extra, saved_state);
  for (int dp : {1, 2, 4}) {
    DeviceMesh m = *DeviceMesh::Create({dp});
    std::vector<int> reps;
    for (int r = 0; r < dp; ++r) reps.push_back(r);
    const std::vector<std::set<int64_t>> rest = Stream(m, reps, *extra, 5);
    for (int s = 0; s < 5; ++s) EXPECT_EQ(rest[s], full[kStepsBeforeSave + s]) << "dp=" << dp << " step " << s;
  }

  // The parameter loads on 4 ranks of a 1-D mesh, row-sharded.
  DeviceMesh flat = *DeviceMesh::Create({4});
  Layout target = *Layout::Create({7, 5}, flat, {Shard{0}});
  auto world4 = std::move(ThreadWorld::Create(4).value());
  ASSERT_TRUE(world4
                  ->Run([&](Communicator& comm) -> Status {
                    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, flat));
                    MF_ASSIGN_OR_RETURN(DTensor w, LoadTensor(dir, "w", target, ctx));
                    MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(param, target, comm.world_rank()));
                    if (!(w.local() == want)) return InternalError("rank " + std::to_string(comm.world_rank()) + " differs");
                    return Status();
                  })
                  .ok());
}

}  // namespace
}  // namespace meshflow
