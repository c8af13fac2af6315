// Every example in launch/world.h and launch/supervisor.h is compiled here (the world examples are
// also run: the GPU one is UNAVAILABLE here, this test not linking //launch:cuda_world); keep them
// identical. launch/cuda_world.h's example: launch_cuda_doc_test.cc.
#include <atomic>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/launch/supervisor.h"
#include "meshflow/launch/world.h"

namespace meshflow {
namespace {

// launch/world.h
Status WorldExample() {
  MF_ASSIGN_OR_RETURN(LaunchMode mode, DetectLaunch(SystemEnv, /*nproc=*/4));
  MF_RETURN_IF_ERROR(RunWorld(mode, [&](Communicator& world, const RankInfo& me) -> Status {
    // me.rank, me.size, me.local_rank; world is the world communicator of this rank
    return Status::Ok();
  }));
  return Status::Ok();
}

// launch/world.h, ranks on GPUs (`mode` from DetectLaunch).
Status GpuWorldExample(const LaunchMode& mode) {
  // BUILD: deps = ["//launch:world"] + if_cuda(["//launch:cuda_world"])   (third_party/cuda.bzl)
  const WorldOptions gpus{.device = WorldDevice::kCuda};
  MF_RETURN_IF_ERROR(RunWorld(mode, gpus, [&](Communicator& world, const RankInfo& me) -> Status {
    // me.device: this rank's GPU (cuda:N), world.device() == me.device
    return Status::Ok();
  }));
  return Status::Ok();
}

// launch/supervisor.h (compiled only: it would run ./train)
[[maybe_unused]] Status SupervisorExample() {
  SupervisorOptions o;
  o.command = [](int attempt) { return std::vector<std::string>{"./train", "--ckpt-dir", "ck"}; };
  o.max_restarts = 3;
  MF_ASSIGN_OR_RETURN(SuperviseResult r, Supervise(o));   // r.exit_code: the last attempt's
  (void)r;
  return Status::Ok();
}

TEST(LaunchDocTest, WorldExampleRunsFourThreadRanks) {
  const Status s = WorldExample();
  EXPECT_TRUE(s.ok()) << s;
}

TEST(LaunchDocTest, GpuWorldExampleIsUnavailableWithoutTheCudaWorldTarget) {
  const Status s = GpuWorldExample(InProcess{2});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("link //launch:cuda_world"), std::string::npos) << s;
}

}  // namespace
}  // namespace meshflow
