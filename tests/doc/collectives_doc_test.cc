// Every example in collectives/threads/threads_world.h, collectives/mesh_comms.h,
// runtime/redistribute.h, runtime/executor.h, collectives/reduce.h and
// collectives/call_check.h is compiled here; keep them identical.
#include <cstdint>
#include <memory>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/collectives/call_check.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/reduce.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan.h"
#include "meshflow/planner/search.h"

namespace meshflow {
namespace {

using ::testing::HasSubstr;

// collectives/threads/threads_world.h
Status ThreadWorldExample() {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(4));
  MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
    std::vector<float> x(8, static_cast<float>(comm.rank()));
    MF_RETURN_IF_ERROR(comm.AllReduce(x.data(), x.data(), 8, DType::kF32, ReduceOp::kSum));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> row, comm.Split(comm.rank() / 2, comm.rank()));
    EXPECT_EQ(x, std::vector<float>(8, 0.0f + 1.0f + 2.0f + 3.0f));
    return row->Barrier();
  }));
  ByteCounters c = world->counters(0);   // {bytes_sent = 48, bytes_received = 48}

  EXPECT_EQ(c, (ByteCounters{.bytes_sent = 48, .bytes_received = 48}));
  return Status::Ok();
}

TEST(ThreadWorldDocTest, Example) { EXPECT_EQ(ThreadWorldExample(), Status::Ok()); }

// collectives/mesh_comms.h (world_comm: the world communicator ThreadWorld::Run hands out).
TEST(MeshCommsDocTest, Group) {
  StatusOr<DeviceMesh> mesh_or = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  ASSERT_TRUE(mesh_or.ok()) << mesh_or.status();
  const DeviceMesh mesh = *mesh_or;
  StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(4);
  ASSERT_TRUE(world.ok()) << world.status();
  const Status run = (*world)->Run([&](Communicator& world_comm) -> Status {
    MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(world_comm, mesh));
    MF_ASSIGN_OR_RETURN(Communicator* tp, comms.Group(std::vector<int>{1}));

    // The tp group of rank r is the row of the 2x2 mesh holding r.
    const int row = world_comm.world_rank() / 2;
    EXPECT_EQ(tp->world_ranks(), (std::vector<int>{2 * row, 2 * row + 1}));
    EXPECT_EQ(tp->rank(), world_comm.world_rank() % 2);
    return Status::Ok();
  });
  EXPECT_EQ(run, Status::Ok());
}

// runtime/redistribute.h (x: this rank's part of a [8, 6] tensor in S(0),R; target_layout:
// S(1),S(0)).
TEST(DTensorApiDocTest, RedistributeAndFullTensor) {
  StatusOr<DeviceMesh> mesh_or = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  ASSERT_TRUE(mesh_or.ok()) << mesh_or.status();
  const DeviceMesh mesh = *mesh_or;
  const Tensor global = Tensor::Iota(DType::kF32, {8, 6});
  StatusOr<Layout> from = Layout::Create({8, 6}, mesh, {Shard{0}, Replicate{}});
  StatusOr<Layout> target = Layout::Create({8, 6}, mesh, {Shard{1}, Shard{0}});
  ASSERT_TRUE(from.ok()) << from.status();
  ASSERT_TRUE(target.ok()) << target.status();
  const Layout& target_layout = *target;
  StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(4);
  ASSERT_TRUE(world.ok()) << world.status();
  const Status run = (*world)->Run([&](Communicator& world_comm) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, *from, world_comm.world_rank()));

    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
    MF_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, target_layout, ctx));   // optimal plan
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));                  // every rank

    EXPECT_EQ(y.layout(), target_layout);
    MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, target_layout, world_comm.world_rank()));
    EXPECT_EQ(y.local(), want);
    EXPECT_EQ(full, global);
    return Status::Ok();
  });
  EXPECT_EQ(run, Status::Ok());
}

// runtime/executor.h (from: S(0),S(1); to: S(1),S(0); local: this rank's part in `from`).
TEST(ExecutorDocTest, ExecutePlan) {
  StatusOr<DeviceMesh> mesh_or = DeviceMesh::Create({2, 2});
  ASSERT_TRUE(mesh_or.ok()) << mesh_or.status();
  const DeviceMesh mesh = *mesh_or;
  const Tensor global = Tensor::Iota(DType::kF32, {5, 8});
  StatusOr<Layout> from_or = Layout::Create({5, 8}, mesh, {Shard{0}, Shard{1}});
  StatusOr<Layout> to_or = Layout::Create({5, 8}, mesh, {Shard{1}, Shard{0}});
  ASSERT_TRUE(from_or.ok()) << from_or.status();
  ASSERT_TRUE(to_or.ok()) << to_or.status();
  const Layout& from = *from_or;
  const Layout& to = *to_or;
  StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(4);
  ASSERT_TRUE(world.ok()) << world.status();
  const Status run = (*world)->Run([&](Communicator& world_comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
    MF_ASSIGN_OR_RETURN(Tensor local, ReferenceLocal(global, from, world_comm.world_rank()));

    MF_ASSIGN_OR_RETURN(Plan plan, PlanRedistribution(from, to, DType::kF32, Topology()));
    MF_RETURN_IF_ERROR(ExecutePlan(plan, ctx, local));

    MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, to, world_comm.world_rank()));
    EXPECT_EQ(local, want);
    return Status::Ok();
  });
  EXPECT_EQ(run, Status::Ok());
}

// collectives/reduce.h
Status ReduceExample() {
  std::vector<float> a = {1, 2}, b = {3, 4}, out(2);
  const void* in[] = {a.data(), b.data()};
  MF_RETURN_IF_ERROR(ReduceBuffers(in, out.data(), 2, DType::kF32, ReduceOp::kAvg));  // {2, 3}

  EXPECT_EQ(out, (std::vector<float>{2, 3}));
  return Status::Ok();
}

TEST(ReduceDocTest, Avg) { EXPECT_EQ(ReduceExample(), Status::Ok()); }

// collectives/call_check.h (a 3-rank group of world ranks {0, 1, 2}, seen from group rank 0).
Status CallCheckExample(std::vector<CollectiveCall> calls) {
  const std::vector<int> world_ranks = {0, 1, 2};
  const int rank = 0, n = 3;
  const std::vector<int64_t> recv_counts = {1, 2, 3};

  const CallSite site{"mpi ", "all_gather", world_ranks, rank};
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  // ... every rank gathers every member's CollectiveCall, then:
  MF_RETURN_IF_ERROR(CheckCallsMatch(site, n, [&](int r) -> const CollectiveCall& { return calls[r]; }));

  // "<prefix><what> on group [w0,w1,...] (world ranks)" and "group rank r (world w)".
  EXPECT_EQ(site.Describe(), "mpi all_gather on group [0,1,2] (world ranks)");
  EXPECT_EQ(site.RankName(2), "group rank 2 (world 2)");
  return Status::Ok();
}

TEST(CallCheckDocTest, Example) {
  CollectiveCall call;
  call.kind = CollectiveKind::kAllGather;
  call.dtype = DType::kF32;
  call.counts = {1, 2, 3};
  std::vector<CollectiveCall> calls(3, call);
  EXPECT_EQ(CallCheckExample(calls), Status::Ok());

  // CheckCallsMatch: "mismatched dtype: f32 at group rank 0 (world 0) vs i32 at group rank 2 (world 2)".
  calls[2].dtype = DType::kI32;
  const Status mismatch = CallCheckExample(calls);
  EXPECT_EQ(mismatch.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(mismatch.message(),
              HasSubstr("mismatched dtype: f32 at group rank 0 (world 0) vs i32 at group rank 2 (world 2)"));
}

}  // namespace
}  // namespace meshflow
