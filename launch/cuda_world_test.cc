// CUDA worlds of RunWorld (launch/cuda_world.h, registered by linking //launch:cuda_world): the
// rank's communicator is on its GPU, RankContext::Create lands there, and a Partial(sum) ->
// Replicate redistribution (an all-reduce) of device tensors gives the exact sums; 1 rank (NCCL),
// 2 ranks (NCCL on 2+ GPUs, staged on one) and one rank more than there are GPUs (staged). The GPU
// tests skip without a device; the no-GPU test runs only without one.
#include "meshflow/launch/cuda_world.h"

#include <atomic>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/cuda/cuda_test_util.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/launch/world.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

constexpr int64_t kLength = 5;

// Rank r holds (r + 1) * [0, 1, 2, 3, 4] as Partial(sum) on its device; after Redistribute to
// Replicate every rank holds n(n+1)/2 * [0, 1, 2, 3, 4] on the same device.
Status AllReduceOnTheRanksDevice(Communicator& world, const RankInfo& me) {
  if (world.device() != me.device) {
    return InternalError("world device " + world.device().ToString() + " != rank device " + me.device.ToString());
  }
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({me.size}));
  MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world, mesh));
  if (ctx.device() != me.device) return InternalError("RankContext on " + ctx.device().ToString());
  MF_ASSIGN_OR_RETURN(Layout partial, Layout::Create({kLength}, mesh, {Partial{ReduceOp::kSum}}));
  MF_ASSIGN_OR_RETURN(Layout replicated, Layout::Create({kLength}, mesh, {Replicate{}}));
  std::vector<float> mine(kLength);
  for (int64_t i = 0; i < kLength; ++i) mine[static_cast<size_t>(i)] = static_cast<float>((me.rank + 1) * i);
  MF_ASSIGN_OR_RETURN(Tensor host, Tensor::FromVector<float>({kLength}, mine));
  MF_ASSIGN_OR_RETURN(Tensor dev, host.CopyTo(ctx.device(), ctx.compute_stream_ptr()));
  MF_ASSIGN_OR_RETURN(DTensor x, DTensor::FromLocal(std::move(dev), partial, me.rank));
  MF_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, replicated, ctx));
  if (y.local().device() != me.device) return InternalError("result on " + y.local().device().ToString());
  MF_ASSIGN_OR_RETURN(Tensor got, y.local().ToHost());
  const float ranks_sum = static_cast<float>(me.size * (me.size + 1) / 2);
  for (int64_t i = 0; i < kLength; ++i) {
    const float want = ranks_sum * static_cast<float>(i);
    if (got.data<float>()[static_cast<size_t>(i)] != want) {
      return InternalError("rank " + std::to_string(me.rank) + " element " + std::to_string(i) + ": " +
                           std::to_string(got.data<float>()[static_cast<size_t>(i)]) + ", want " +
                           std::to_string(want));
    }
  }
  return Status::Ok();
}

int VisibleGpus() {
  StatusOr<int> n = CudaDeviceCount();
  return n.ok() ? *n : 0;
}

// Runs AllReduceOnTheRanksDevice on `nproc` in-process CUDA ranks and checks the backend and the
// GPU of every rank (rank r on GPU r % visible GPUs).
void ExpectCudaWorld(int nproc, const std::string& backend) {
  const int gpus = VisibleGpus();
  std::atomic<int> calls{0};
  const Status s = RunWorld(InProcess{nproc}, WorldOptions{.device = WorldDevice::kCuda},
                            [&](Communicator& world, const RankInfo& me) -> Status {
                              EXPECT_EQ(world.backend(), backend) << "rank " << me.rank;
                              EXPECT_EQ(me.device.ToString(), Device::Cuda(me.rank % gpus).ToString()) << "rank " << me.rank;
                              EXPECT_EQ(me.size, nproc);
                              ++calls;
                              return AllReduceOnTheRanksDevice(world, me);
                            });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls.load(), nproc);
}

TEST(CudaWorldTest, OneRankIsNcclOnGpu0) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  ExpectCudaWorld(1, "nccl");
}

TEST(CudaWorldTest, TwoRanksAreNcclOnTwoGpusAndStagedOnOne) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  ExpectCudaWorld(2, VisibleGpus() >= 2 ? "nccl" : "threads+staged");
}

TEST(CudaWorldTest, MoreRanksThanGpusShareThemStaged) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  ExpectCudaWorld(VisibleGpus() + 1, "threads+staged");
}

TEST(CudaWorldTest, NoGpuIsUnavailableNamingCudaGetDeviceCount) {
  if (NoCudaDeviceReason().empty()) GTEST_SKIP() << "a CUDA device is present";
  std::atomic<int> calls{0};
  auto fn = [&](Communicator&, const RankInfo&) -> Status {
    ++calls;
    return Status::Ok();
  };
  const WorldOptions gpus{.device = WorldDevice::kCuda};
  Status s = RunWorld(InProcess{2}, gpus, fn);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("an in-process world of 2 ranks asked for ranks on CUDA devices, but there is no CUDA "
                             "device: cudaGetDeviceCount"),
            std::string::npos)
      << s;
  // Under a launcher the check comes before MPI is started: returned, not an MpiAbort.
  s = RunWorld(ExternalLaunch{"OpenMPI", 1, 2, 1}, gpus, fn);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("OpenMPI rank 1 asked for ranks on CUDA devices, but there is no CUDA device: "
                             "cudaGetDeviceCount"),
            std::string::npos)
      << s;
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace meshflow
