// Every example in checkpoint/checkpoint.h and checkpoint/format.h is compiled here; keep them
// identical.
//
// The checkpoint test runs in a fresh directory under $TEST_TMPDIR (its current directory), so
// the example's relative "ckpt/step100" is the test's own directory.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/checksum.h"
#include "meshflow/base/status.h"
#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/checkpoint/format.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/data/test_util.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

// checkpoint/checkpoint.h (8 ranks: mesh_2x4 and mesh_8 over the same world; w [1024, 512] in
// S(0),S(1) and b [512] in R,S(0) on mesh_2x4; loader_state: a data loader's saved state).
Status CheckpointExample(Communicator& world_comm, const DeviceMesh& mesh_2x4, const DeviceMesh& mesh_8,
                         const DTensor& w, const DTensor& b, const std::string& loader_state,
                         const Tensor& global_w) {
  MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh_2x4));
  MF_RETURN_IF_ERROR(SaveCheckpoint("ckpt/step100", {{"w", &w}, {"b", &b}}, ctx,
                                    {.extra_state = loader_state}));
  // ... later, on another mesh
  MF_ASSIGN_OR_RETURN(RankContext ctx8, RankContext::Create(world_comm, mesh_8));
  MF_ASSIGN_OR_RETURN(Layout target, Layout::Create({1024, 512}, mesh_8, {Shard{1}}));
  MF_ASSIGN_OR_RETURN(DTensor w2, LoadTensor("ckpt/step100", "w", target, ctx8));
  MF_ASSIGN_OR_RETURN(std::string state, LoadExtraState("ckpt/step100"));

  EXPECT_EQ(w2.layout(), target);
  MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global_w, target, world_comm.world_rank()));
  EXPECT_EQ(w2.local(), want);
  EXPECT_EQ(state, loader_state);
  return Status::Ok();
}

TEST(CheckpointDocTest, SaveOnOneMeshLoadOnAnother) {
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(testing::FreshTempDir());
  std::filesystem::create_directory("ckpt");

  const DeviceMesh mesh_2x4 = DeviceMesh::Create({2, 4}).value();
  const DeviceMesh mesh_8 = DeviceMesh::Create({8}).value();
  const Tensor global_w = Tensor::Iota(DType::kF32, {1024, 512});
  const Tensor global_b = Tensor::Iota(DType::kF32, {512});
  const Layout w_layout = Layout::Create({1024, 512}, mesh_2x4, {Shard{0}, Shard{1}}).value();
  const Layout b_layout = Layout::Create({512}, mesh_2x4, {Replicate{}, Shard{0}}).value();
  const std::string loader_state = "meshflow.data.LoaderState v1 seed=42 epoch=3 consumed=128 num_samples=1000";
  std::unique_ptr<ThreadWorld> world = ThreadWorld::Create(8).value();
  const Status run = world->Run([&](Communicator& world_comm) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(global_w, w_layout, world_comm.world_rank()));
    MF_ASSIGN_OR_RETURN(DTensor b, Distribute(global_b, b_layout, world_comm.world_rank()));
    return CheckpointExample(world_comm, mesh_2x4, mesh_8, w, b, loader_state, global_w);
  });
  EXPECT_EQ(run, Status::Ok());

  std::filesystem::current_path(previous);
}

// checkpoint/format.h (crc: the CRC-32C of the chunk's 64 bytes, here of 16 zero floats).
Status FormatExample(uint32_t crc) {
  CheckpointMetadata md;
  md.checksum_block_bytes = 1 << 20;
  md.file_sizes = {64};
  ChunkRecord chunk{.box = {{0, 0}, {4, 4}}, .byte_length = 64, .block_bytes = 64, .block_crcs = {crc}};
  md.tensors.push_back({.name = "w", .dtype = DType::kF32, .shape = {4, 4}, .chunks = {chunk}});
  std::string bytes = EncodeMetadata(md);
  MF_ASSIGN_OR_RETURN(CheckpointMetadata back, DecodeMetadata(bytes, "ckpt/metadata.mfck"));  // == md

  EXPECT_EQ(back, md);
  return Status::Ok();
}

TEST(CheckpointFormatDocTest, EncodeDecode) {
  const std::vector<std::byte> zeros(64);
  EXPECT_EQ(FormatExample(Crc32c(zeros)), Status::Ok());
}

}  // namespace
}  // namespace meshflow
