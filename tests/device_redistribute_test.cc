// The executor on a GPU-like device: random redistributions (tests/redistribute_cases.h) on ranks
// whose device is the fake GPU of runtime/fake_device.h (host memory, every stream asynchronous,
// the compute stream included). Inputs are copied to the device on the compute stream, the plan
// runs on the communication stream (synchronous API: the compute stream waits for it by event;
// asynchronous API: PendingTensor::Wait), and the result is copied back on the compute stream. A
// missing cross-stream wait anywhere on that path reads a buffer before it is written and fails
// the bit-exact comparison with the reference.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/test_cases.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/fake_device.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/tests/redistribute_cases.h"

namespace meshflow {
namespace {

using testing::PlanCase;
using testing::PlannedCase;
using testing::PropertyTestCases;
using testing::RedistributeCase;
using testing::RedistributeCaseGenerator;

enum class Api { kSync, kAsync, kRedistributeAsync };

const char* ApiName(Api a) {
  switch (a) {
    case Api::kSync: return "ExecutePlan";
    case Api::kAsync: return "ExecutePlanAsync";
    case Api::kRedistributeAsync: return "RedistributeAsync";
  }
  return "?";
}

// This rank's part of the case after the plan, on the device, copied back to the host.
StatusOr<Tensor> RunOnDevice(const PlannedCase& planned, RankContext& ctx, Api api) {
  const int r = ctx.world_rank();
  MF_ASSIGN_OR_RETURN(DTensor x, Distribute(planned.global, planned.from, r));
  MF_ASSIGN_OR_RETURN(Tensor dev, x.local().CopyTo(ctx.device(), ctx.compute_stream_ptr()));
  switch (api) {
    case Api::kSync:
      MF_RETURN_IF_ERROR(ExecutePlan(*planned.plan, ctx, dev));
      break;
    case Api::kAsync: {
      MF_ASSIGN_OR_RETURN(PendingTensor p, ExecutePlanAsync(planned.plan, ctx, std::move(dev)));
      MF_ASSIGN_OR_RETURN(dev, p.Wait());
      break;
    }
    case Api::kRedistributeAsync: {
      MF_ASSIGN_OR_RETURN(DTensor dx, DTensor::FromLocal(std::move(dev), planned.from, r));
      MF_ASSIGN_OR_RETURN(PendingDTensor p, RedistributeAsync(std::move(dx), planned.to, ctx));
      MF_ASSIGN_OR_RETURN(DTensor y, p.Wait());
      dev = std::move(y.mutable_local());
      break;
    }
  }
  if (dev.device() != ctx.device()) return InternalError("result left the device: " + dev.device().ToString());
  return dev.ToHost();
}

std::string RunCase(ThreadWorld& world, const RedistributeCase& c, Api api) {
  std::optional<PlannedCase> planned;
  const std::string plan_failure = PlanCase(c, PlannerKind::kOptimal, &planned);
  if (!plan_failure.empty() || !planned) return plan_failure;
  std::mutex mu;
  std::string failure;
  const Status run = world.Run([&](Communicator& comm) -> Status {
    FakeDeviceCommunicator dev_comm(comm, Device::Cuda(comm.world_rank()));
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(dev_comm, c.mesh));
    MF_ASSIGN_OR_RETURN(Tensor got, RunOnDevice(*planned, ctx, api));
    std::string err;
    if (!planned->to.HasPartial()) {
      MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(planned->global, planned->to, comm.world_rank()));
      if (!(got == want)) err = "got " + got.ToString() + " want " + want.ToString();
    }
    if (!err.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) failure = "rank " + std::to_string(comm.world_rank()) + ": " + err;
    }
    return Status::Ok();
  });
  if (!run.ok()) return run.ToString();
  return failure;
}

TEST(DeviceRedistributeTest, RandomCasesOnAsynchronousDeviceStreams) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  const std::vector<std::vector<int64_t>> meshes = {{2}, {4}, {2, 2}, {2, 3}, {2, 2, 2}};
  std::map<int, std::unique_ptr<ThreadWorld>> worlds;
  RedistributeCaseGenerator gen(1207, meshes);
  const int cases = PropertyTestCases(150);
  for (int i = 0; i < cases; ++i) {
    const RedistributeCase c = gen.Next();
    auto& w = worlds[c.mesh.size()];
    if (!w) w = std::move(ThreadWorld::Create(c.mesh.size()).value());
    const Api api = static_cast<Api>(i % 3);
    const std::string failure = RunCase(*w, c, api);
    ASSERT_EQ(failure, "") << "case " << i << " (" << ApiName(api) << "): " << c.ToString();
  }
}

// The device's rank context refuses a communicator of another device.
TEST(DeviceRedistributeTest, ContextDeviceMustMatchTheCommunicators) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(1).value());
  const DeviceMesh mesh = *DeviceMesh::Create({1});
  EXPECT_EQ(world->Run([&](Communicator& comm) -> Status {
    StatusOr<RankContext> ctx = RankContext::Create(comm, mesh, RankContextOptions{.device = Device::Cuda(0)});
    EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument);
    FakeDeviceCommunicator dev_comm(comm, Device::Cuda(0));
    StatusOr<RankContext> ok = RankContext::Create(dev_comm, mesh);
    EXPECT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(ok->device(), Device::Cuda(0));
    EXPECT_FALSE(ok->compute_stream().is_inline());
    // A host tensor given to a device rank's executor is refused.
    const Layout l = *Layout::Create({4}, mesh, {Replicate{}});
    std::shared_ptr<const Plan> plan = *PlanFor(l, l, DType::kF32, {});
    Tensor host = Tensor::Zeros(DType::kF32, {4});
    EXPECT_EQ(ExecutePlan(*plan, *ok, host).code(), StatusCode::kInvalidArgument);
    return Status::Ok();
  }),
            Status::Ok());
}

}  // namespace
}  // namespace meshflow
