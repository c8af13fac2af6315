// The example of launch/cuda_world.h is compiled and run here; keep them identical. With a GPU it
// runs 2 ranks (NCCL on 2+ GPUs, staged on one); without one it must be UNAVAILABLE naming
// cudaGetDeviceCount.
#include <string>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/launch/cuda_world.h"
#include "meshflow/launch/world.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/runtime/rank_context.h"

namespace meshflow {
namespace {

// launch/cuda_world.h
Status CudaWorldExample() {
  // BUILD: deps = ["//launch:world", "//launch:cuda_world", "//runtime:rank_context", ...]
  MF_ASSIGN_OR_RETURN(LaunchMode mode, DetectLaunch(SystemEnv, /*nproc=*/2));
  const WorldOptions gpus{.device = WorldDevice::kCuda};
  MF_RETURN_IF_ERROR(RunWorld(mode, gpus, [&](Communicator& world, const RankInfo& me) -> Status {
    MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({me.size}));
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world, mesh));
    // ctx.device() == me.device: "nccl" on 2+ GPUs, "threads+staged" on one (world.backend())
    return Status::Ok();
  }));
  return Status::Ok();
}

TEST(LaunchCudaDocTest, CudaWorldExampleRunsOnGpusOrIsUnavailable) {
  const Status s = CudaWorldExample();
  if (NoCudaDeviceReason().empty()) {
    EXPECT_TRUE(s.ok()) << s;
  } else {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("cudaGetDeviceCount"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace meshflow
