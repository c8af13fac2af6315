// Every example in meshflow.h is compiled here; keep them identical.
//
// The example is a user's code outside namespace meshflow, built against the public target
// //:meshflow only.
#include <memory>

#include <gtest/gtest.h>

#include "meshflow/meshflow.h"

meshflow::Status Demo() {
  MF_ASSIGN_OR_RETURN(meshflow::DeviceMesh mesh, meshflow::DeviceMesh::Create({2, 2}, {"dp", "tp"}));
  MF_ASSIGN_OR_RETURN(meshflow::Layout layout,
                      meshflow::Layout::Create({5, 6}, mesh, {meshflow::Shard{0}, meshflow::Shard{1}}));
  const meshflow::Tensor global = meshflow::Tensor::Iota(meshflow::DType::kF32, {5, 6});
  MF_ASSIGN_OR_RETURN(std::unique_ptr<meshflow::ThreadWorld> world, meshflow::ThreadWorld::Create(4));
  return world->Run([&](meshflow::Communicator& comm) -> meshflow::Status {
    MF_ASSIGN_OR_RETURN(meshflow::RankContext ctx, meshflow::RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(meshflow::DTensor x, meshflow::Distribute(global, layout, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(meshflow::Tensor full, meshflow::FullTensor(x, ctx));  // == global
    EXPECT_EQ(full, global) << "rank " << comm.world_rank();
    EXPECT_EQ(x.local(), global.Slice(x.box())) << "rank " << comm.world_rank();
    return meshflow::Status::Ok();
  });
}

namespace {

TEST(MeshflowDocTest, Demo) { EXPECT_EQ(Demo(), meshflow::Status::Ok()); }

}  // namespace
