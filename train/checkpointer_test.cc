#include "meshflow/train/checkpointer.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/checkpoint/format.h"
#include "meshflow/checkpoint/testing_hooks.h"
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

// The saver process of the crash test (a fresh process: this test binary re-executed with
// kCrashChildEnv naming the root, so no thread or lock state is inherited through fork). It
// saves step 5 (w = iota + 1, "five") through a CheckpointManager on 2 thread ranks, then starts the async save of step 6 (w = iota + 100,
// "six"); the test hook kills the whole child with SIGKILL when rank 0 has written its data file
// of step 6 ("save:data-written": inside the save, before the metadata and the commit). Exits
// 0 only if the save of step 6 returned (no crash), 2 on an error before it. Never returns.
[[noreturn]] void SaveThenDieInTheSecondSave(const std::string& root) {
  const DeviceMesh mesh = DeviceMesh::Create({2}, {"dp"}).value();
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(2).value();
  const Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> m, CheckpointManager::Create({.root = root}, comm, mesh));
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({4, 2}, mesh, {Shard{0}}));
    MF_ASSIGN_OR_RETURN(DTensor w5, Distribute(Iota(4, 2, 1.0), l, comm.world_rank()));
    MF_RETURN_IF_ERROR(m->Save(5, {{"w", &w5}}, "five"));
    MF_RETURN_IF_ERROR(m->Wait());
    MF_RETURN_IF_ERROR(comm.Barrier());
    if (comm.world_rank() == 0) {
      SetCheckpointTestHook([](std::string_view point, int world_rank) -> Status {
        if (point == "save:data-written" && world_rank == 0) ::kill(::getpid(), SIGKILL);
        return Status::Ok();
      });
    }
    MF_RETURN_IF_ERROR(comm.Barrier());
    MF_ASSIGN_OR_RETURN(DTensor w6, Distribute(Iota(4, 2, 100.0), l, comm.world_rank()));
    MF_RETURN_IF_ERROR(m->Save(6, {{"w", &w6}}, "six"));
    return m->Wait();
  });
  std::fflush(nullptr);
  ::_exit(s.ok() ? 0 : 2);
}

constexpr char kCrashChildEnv[] = "MF_CHECKPOINTER_TEST_CRASH_ROOT";

// Runs this test alone in a new process (fork + exec of /proc/self/exe) with kCrashChildEnv=root;
// returns its pid, or -1.
pid_t StartCrashChild(const std::string& root) {
  const std::string filter = std::string("--gtest_filter=") +
                             ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "." +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string env_entry = std::string(kCrashChildEnv) + "=" + root;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    // The child reports nothing to the test runner: no XML, no premature-exit marker of its own.
    const std::string_view v(*e);
    if (v.starts_with("XML_OUTPUT_FILE=") || v.starts_with("GTEST_OUTPUT=") ||
        v.starts_with("TEST_PREMATURE_EXIT_FILE=")) {
      continue;
    }
    envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(env_entry.c_str()));
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>("/proc/self/exe"), const_cast<char*>(filter.c_str()), nullptr};
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::execve("/proc/self/exe", argv, envp.data());
    ::_exit(4);  // exec failed
  }
  return child;
}

// A saver process killed (SIGKILL) in the middle of an async save: the previous checkpoint stays
// the newest complete one and loads with its exact contents; the partial save is left in its
// temporary directory (data, no metadata), never taken as a checkpoint; the next save of that
// step removes it and commits.
TEST(CheckpointManagerTest, SaverKilledInTheMiddleOfAnAsyncSaveLeavesThePreviousCheckpoint) {
  if (const char* child_root = std::getenv(kCrashChildEnv)) SaveThenDieInTheSecondSave(child_root);
  const std::string root = FreshRoot("ckpt_crash");
  const pid_t child = StartCrashChild(root);
  ASSERT_GE(child, 0) << "fork failed: " << std::strerror(errno);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child) << std::strerror(errno);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
      << "the saver was not killed inside the save of step 6: "
      << (WIFEXITED(wstatus) ? "exit code " + std::to_string(WEXITSTATUS(wstatus)) : "wait status " + std::to_string(wstatus));

  // What the crash left: step 5 committed; step 6 only as a temporary directory holding rank 0's
  // data file and no metadata.
  // (Its lock file `step-00000006.lock` stays too, released by the kernel.)
  std::vector<std::string> partial;
  std::string names;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    names += " " + name;
    if (name.rfind("step-00000006", 0) == 0 && e.is_directory()) partial.push_back(name);
  }
  ASSERT_EQ(partial.size(), 1u) << "expected one partial directory of step 6 in" << names;
  EXPECT_EQ(partial[0].rfind("step-00000006.tmp-", 0), 0u) << partial[0];
  const std::filesystem::path tmp = std::filesystem::path(root) / partial[0];
  EXPECT_TRUE(std::filesystem::exists(tmp / DataFileName(0))) << tmp;
  EXPECT_FALSE(std::filesystem::exists(tmp / std::string(kMetadataFileName))) << tmp;

  StatusOr<std::vector<TrainCheckpoint>> all = ListCheckpoints(root);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  StatusOr<std::optional<TrainCheckpoint>> latest = LatestCheckpoint(root);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step, 5);
  EXPECT_EQ((*latest)->dir, StepCheckpointDir(root, 5));
  EXPECT_EQ(LoadExtraState((*latest)->dir).value(), "five");

  // The previous checkpoint loads, on another layout, with exactly the values saved; then the
  // save of step 6 is redone: it removes the crashed save's temporary directory and commits.
  const DeviceMesh mesh = DeviceMesh::Create({2}, {"dp"}).value();
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(2).value();
  const Status s = world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(Layout target, Layout::Create({4, 2}, mesh, {Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor back, LoadTensor((*latest)->dir, "w", target, ctx));
    EXPECT_EQ(back.local(), Iota(4, 2, 1.0));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> m, CheckpointManager::Create({.root = root}, comm, mesh));
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({4, 2}, mesh, {Shard{0}}));
    MF_ASSIGN_OR_RETURN(DTensor w6, Distribute(Iota(4, 2, 100.0), l, comm.world_rank()));
    MF_RETURN_IF_ERROR(m->Save(6, {{"w", &w6}}, "six"));
    return m->Wait();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(std::filesystem::exists(tmp));
  latest = LatestCheckpoint(root);
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  EXPECT_EQ((*latest)->step, 6);
  EXPECT_EQ(LoadExtraState((*latest)->dir).value(), "six");
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
