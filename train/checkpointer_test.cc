#include "meshflow/train/checkpointer.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"

namespace meshflow {
namespace {

std::string FreshRoot(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(root);
  return root;
}

Tensor Iota(int64_t rows, int64_t cols, double offset) {
  Tensor t = Tensor::Zeros(DType::kF32, {rows, cols});
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, offset + static_cast<double>(i));
  return t;
}

// 2 ranks, w [6, 4] Shard(0): saves at steps 10, 20, 30 with w = iota + step (changed after
// each Save returns, while the write may still run), keep_last 2.
TEST(CheckpointManagerTest, AsyncSavesKeepTheLastTwoAndLoadTheSnapshot) {
  const std::string root = FreshRoot("ckpt_async");
  const DeviceMesh mesh = DeviceMesh::Create({2}, {"dp"}).value();
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(2).value();
  const Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> m, CheckpointManager::Create({.root = root, .keep_last = 2}, comm, mesh));
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({6, 4}, mesh, {Shard{0}}));
    for (int64_t step : {10, 20, 30}) {
      MF_ASSIGN_OR_RETURN(DTensor w, Distribute(Iota(6, 4, static_cast<double>(step)), l, comm.world_rank()));
      MF_RETURN_IF_ERROR(m->Save(step, {{"w", &w}}, "state at " + std::to_string(step)));
      // Training goes on: the snapshot, not the live tensor, is written.
      w.mutable_local().SetFromDouble(0, -1.0);
      EXPECT_TRUE(m->options().async);
    }
    MF_RETURN_IF_ERROR(m->Wait());
    EXPECT_EQ(m->stats().saves, 3);
    EXPECT_EQ(m->stats().last_committed_step, 30);
    EXPECT_FALSE(m->in_flight());
    {
      const Status again = m->Save(30, {}, "");
      EXPECT_EQ(again.code(), StatusCode::kInvalidArgument) << again;
      EXPECT_NE(again.message().find("step 30 is not above the previous save's step 30"), std::string::npos) << again;
    }
    MF_ASSIGN_OR_RETURN(Layout target, Layout::Create({6, 4}, mesh, {Replicate{}}));
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(DTensor back, LoadTensor(StepCheckpointDir(root, 30), "w", target, ctx));
    EXPECT_EQ(back.local(), Iota(6, 4, 30.0));
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s;
  StatusOr<std::vector<TrainCheckpoint>> all = ListCheckpoints(root);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].step, 20);
  EXPECT_EQ((*all)[1].step, 30);
  EXPECT_FALSE(std::filesystem::exists(StepCheckpointDir(root, 10)));
  StatusOr<std::string> extra = LoadExtraState(StepCheckpointDir(root, 30));
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(*extra, "state at 30");
}

// A save that dies after writing its data (before the commit) leaves the previous checkpoint the
// newest complete one, loadable; the failure is returned by Wait on every rank.
TEST(CheckpointManagerTest, CrashInTheMiddleOfAnAsyncSaveLeavesThePreviousCheckpoint) {
  const std::string root = FreshRoot("ckpt_crash");
  const DeviceMesh mesh = DeviceMesh::Create({2}, {"dp"}).value();
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(2).value();
  const Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> m, CheckpointManager::Create({.root = root}, comm, mesh));
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({4, 2}, mesh, {Shard{0}}));
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(Iota(4, 2, 1.0), l, comm.world_rank()));
    MF_RETURN_IF_ERROR(m->Save(5, {{"w", &w}}, "five"));
    MF_RETURN_IF_ERROR(m->Wait());
    MF_RETURN_IF_ERROR(comm.Barrier());
    if (comm.world_rank() == 0) {
      SetCheckpointTestHook([](std::string_view point, int) -> Status {
        if (point == "save:data-written") return AbortedError("simulated crash in the middle of the save");
        return Status::Ok();
      });
    }
    MF_RETURN_IF_ERROR(comm.Barrier());
    MF_RETURN_IF_ERROR(m->Save(6, {{"w", &w}}, "six"));
    const Status failed = m->Wait();
    EXPECT_FALSE(failed.ok());
    EXPECT_NE(failed.ToString().find("simulated crash"), std::string::npos) << failed;
    MF_RETURN_IF_ERROR(comm.Barrier());
    if (comm.world_rank() == 0) SetCheckpointTestHook({});
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s;
  StatusOr<std::optional<TrainCheckpoint>> latest = LatestCheckpoint(root);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step, 5);
  EXPECT_EQ(LoadExtraState((*latest)->dir).value(), "five");
}

TEST(CheckpointManagerTest, LatestIgnoresIncompleteAndForeignDirectories) {
  const std::string root = FreshRoot("ckpt_list");
  StatusOr<std::optional<TrainCheckpoint>> none = LatestCheckpoint(root);  // no root at all
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  std::filesystem::create_directories(root + "/step-00000009");  // no metadata: incomplete
  std::filesystem::create_directories(root + "/step-00000007.tmp-123");
  std::filesystem::create_directories(root + "/step-abc");
  std::filesystem::create_directories(root + "/other");
  none = LatestCheckpoint(root);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(StepCheckpointDir("r", 42), "r/step-00000042");
}

TEST(CheckpointManagerTest, CreateRejectsBadOptions) {
  const DeviceMesh mesh = DeviceMesh::Create({1}).value();
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(1).value();
  const Status s = world->Run([&](Communicator& comm) -> Status {
    StatusOr<std::unique_ptr<CheckpointManager>> m = CheckpointManager::Create({.root = ""}, comm, mesh);
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    m = CheckpointManager::Create({.root = FreshRoot("ckpt_bad"), .keep_last = 0}, comm, mesh);
    EXPECT_NE(m.status().message().find("keep_last must be >= 1, got 0"), std::string::npos) << m.status();
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshflow
