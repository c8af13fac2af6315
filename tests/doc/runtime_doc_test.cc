// Every example in runtime/device.h, runtime/stream.h, runtime/allocator.h,
// runtime/device_runtime.h, runtime/region_copy.h, runtime/rank_context.h, the asynchronous
// example of runtime/redistribute.h and collectives/staged/staged_communicator.h (on the fake GPU
// of runtime/fake_device.h) is compiled (and run) here; keep them identical.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/collectives/staged/staged_communicator.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/planner/plan.h"
#include "meshflow/planner/planner.h"
#include "meshflow/runtime/allocator.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/fake_device.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/region_copy.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {
namespace {

// runtime/device.h
Status DeviceExample() {
  Device d = Device::Cuda(1);
  d.ToString();                              // "cuda:1"
  MF_ASSIGN_OR_RETURN(Device h, ParseDevice("host"));
  h == Device::Host();                       // true

  EXPECT_EQ(d.ToString(), "cuda:1");
  EXPECT_TRUE(h == Device::Host());
  return Status::Ok();
}

TEST(DeviceDocTest, Example) { EXPECT_EQ(DeviceExample(), Status::Ok()); }

// runtime/stream.h
Status StreamExample() {
  std::unique_ptr<Stream> comm = NewHostStream("comm");
  std::vector<float> x(4, 1.0f);
  MF_RETURN_IF_ERROR(comm->Enqueue([&x]() -> Status {   // runs on the worker thread
    for (float& v : x) v *= 2;
    return Status::Ok();
  }));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, comm->RecordEvent());
  MF_RETURN_IF_ERROR(done->Synchronize());               // x is {2, 2, 2, 2} from here on

  EXPECT_EQ(x, std::vector<float>(4, 2.0f));
  return Status::Ok();
}

TEST(StreamDocTest, Example) { EXPECT_EQ(StreamExample(), Status::Ok()); }

// runtime/allocator.h
Status AllocatorExample() {
  const int64_t limit = HostAllocator().stats().limit_bytes;
  Allocator& host = HostAllocator();
  MF_ASSIGN_OR_RETURN(void* p, host.Allocate(1 << 20));
  host.Deallocate(p, 1 << 20);                    // kept: the next 1 MiB allocation reuses it
  MemoryStats s = host.stats();                   // allocated, peak, cached, hits, misses
  host.SetCacheLimit(0);                          // no caching from now on (frees the cache)

  EXPECT_GE(s.peak_allocated_bytes, 1 << 20);
  EXPECT_EQ(host.stats().cached_bytes, 0);
  host.SetCacheLimit(limit);
  return Status::Ok();
}

TEST(AllocatorDocTest, Example) { EXPECT_EQ(AllocatorExample(), Status::Ok()); }

// runtime/device_runtime.h
Status DeviceRuntimeExample() {
  DeviceRuntime& rt = HostRuntime();
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, rt.NewStream("copy"));
  std::vector<float> a(4, 1.0f), b(4, 0.0f);
  MF_RETURN_IF_ERROR(s->Enqueue([&]() { return rt.Copy(b.data(), a.data(), 16, *s); }));
  MF_RETURN_IF_ERROR(s->Synchronize());           // b is {1, 1, 1, 1}

  EXPECT_EQ(b, a);
  return Status::Ok();
}

TEST(DeviceRuntimeDocTest, Example) { EXPECT_EQ(DeviceRuntimeExample(), Status::Ok()); }

// runtime/region_copy.h (src: a 4x8 f32 tensor holding 0..31; dst: 2x4).
TEST(RegionCopyDocTest, Example) {
  std::vector<float> s(32), d(8, -1.0f);
  for (int i = 0; i < 32; ++i) s[static_cast<size_t>(i)] = static_cast<float>(i);
  const std::byte* src = reinterpret_cast<const std::byte*>(s.data());
  std::byte* dst = reinterpret_cast<std::byte*>(d.data());

  const int64_t shape[] = {4, 8}, off[] = {1, 2}, ext[] = {2, 4}, zero[] = {0, 0};
  CopyRegion(src, shape, off, dst, ext, zero, ext, sizeof(float));   // block [1:3, 2:6] -> dst

  EXPECT_EQ(d, (std::vector<float>{10, 11, 12, 13, 18, 19, 20, 21}));
}

// runtime/rank_context.h and the asynchronous example of runtime/redistribute.h, on a 2-rank
// threads world (x: [4, 2] in S(0); target: R).
Status RankContextExample(Communicator& world_comm, const DeviceMesh& mesh, const DTensor& x, const Layout& target) {
  MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
  MF_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, target, ctx));   // runtime/redistribute.h
  int64_t flag = 1;
  MF_RETURN_IF_ERROR(ctx.RunCollective([&]() -> Status {
    return ctx.world().AllReduce(&flag, &flag, 1, DType::kI64, ReduceOp::kMax, ctx.comm_stream());
  }, "flag"));

  const Layout& w_full_layout = target;
  DTensor w_shard = x;
  MF_ASSIGN_OR_RETURN(PendingDTensor next, RedistributeAsync(w_shard, w_full_layout, ctx));
  // ...                                                    // compute; the all-gather runs meanwhile
  MF_ASSIGN_OR_RETURN(DTensor w_full, next.Wait());

  EXPECT_EQ(flag, 1);
  EXPECT_EQ(y.local(), Tensor::Iota(DType::kF32, {4, 2}));
  EXPECT_EQ(w_full.local(), Tensor::Iota(DType::kF32, {4, 2}));
  return Status::Ok();
}

TEST(RankContextDocTest, Example) {
  StatusOr<DeviceMesh> mesh = DeviceMesh::Create({2}, {"dp"});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  StatusOr<Layout> from = Layout::Create({4, 2}, *mesh, {Shard{0}});
  StatusOr<Layout> to = Layout::Create({4, 2}, *mesh, {Replicate{}});
  ASSERT_TRUE(from.ok() && to.ok());
  StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(2);
  ASSERT_TRUE(world.ok()) << world.status();
  const Tensor global = Tensor::Iota(DType::kF32, {4, 2});
  EXPECT_EQ((*world)->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, *from, comm.world_rank()));
    return RankContextExample(comm, *mesh, x, *to);
  }),
            Status::Ok());
}

// collectives/staged/staged_communicator.h, with 4 thread ranks on the fake cuda:0
// (global: [4, 2] f32; from: S(0), to: R on a [4] mesh).
Status StagedCommunicatorExample(const std::unique_ptr<ThreadWorld>& world, const DeviceMesh& mesh,
                                 const Tensor& global, const Layout& from, const Layout& to,
                                 std::vector<Tensor>& results) {
  // The ranks of a ThreadWorld all on one GPU (NCCL would refuse them); global: a host tensor,
  // from / to: layouts on `mesh`; results: one host Tensor per rank.
  MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged,
                        StagedCommunicator::Create(comm, Device::Cuda(0)));
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(staged, mesh));
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(Tensor dev, x.local().CopyTo(ctx.device(), ctx.compute_stream_ptr()));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, DType::kF32));
    MF_RETURN_IF_ERROR(ExecutePlan(*plan, ctx, dev));     // dev: this rank's part of `to`, on cuda:0
    MF_ASSIGN_OR_RETURN(results[comm.world_rank()], dev.ToHost());
    return Status::Ok();
  }));
  return Status::Ok();
}

TEST(StagedCommunicatorDocTest, Example) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  StatusOr<DeviceMesh> mesh = DeviceMesh::Create({4});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  StatusOr<Layout> from = Layout::Create({4, 2}, *mesh, {Shard{0}});
  StatusOr<Layout> to = Layout::Create({4, 2}, *mesh, {Replicate{}});
  ASSERT_TRUE(from.ok() && to.ok());
  StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(4);
  ASSERT_TRUE(world.ok()) << world.status();
  const Tensor global = Tensor::Iota(DType::kF32, {4, 2});
  std::vector<Tensor> results(4);
  EXPECT_EQ(StagedCommunicatorExample(*world, *mesh, global, *from, *to, results), Status::Ok());
  for (const Tensor& t : results) EXPECT_EQ(t, global);
}

}  // namespace
}  // namespace meshflow
