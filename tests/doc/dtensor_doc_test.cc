// Every example in dtensor/placement.h, dtensor/layout.h, dtensor/tensor.h and dtensor/dtensor.h is
// compiled here; keep them identical.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor_buffer.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

// dtensor/placement.h: the short forms, parsed and printed.
TEST(PlacementDocTest, ShortForms) {
  EXPECT_EQ(ParsePlacement("S(0)").value(), Placement(Shard{0}));
  EXPECT_EQ(ParsePlacement("R").value(), Placement(Replicate{}));
  EXPECT_EQ(ParsePlacement("P").value(), ParsePlacement("P(sum)").value());  // "P" (= "P(sum)")
  EXPECT_EQ(ParsePlacement("P(avg)").value(), Placement(Partial{ReduceOp::kAvg}));
  EXPECT_EQ(ParsePlacement("P(max)").value(), Placement(Partial{ReduceOp::kMax}));
  EXPECT_EQ(ParsePlacement("P(min)").value(), Placement(Partial{ReduceOp::kMin}));
  // "A placements list is comma separated: "S(0),R,P(sum)". Whitespace is ignored."
  const Placements ps = ParsePlacements(" S(0), R ,P ").value();
  EXPECT_EQ(ps, (Placements{Shard{0}, Replicate{}, Partial{ReduceOp::kSum}}));
  EXPECT_EQ(ToString(ps), "S(0),R,P(sum)");
}

// dtensor/layout.h: "Example (2x2 mesh, shape 8x6)".
TEST(LayoutDocTest, NestedShardingAndShardOrder) {
  StatusOr<DeviceMesh> m = DeviceMesh::Create({2, 2});
  ASSERT_TRUE(m.ok()) << m.status();
  const DeviceMesh& mesh = *m;

  StatusOr<Layout> nested = Layout::Create({8, 6}, mesh, {Shard{0}, Shard{0}});
  StatusOr<Layout> inner_first = Layout::Create({8, 6}, mesh, {Shard{0}, Shard{0}}, {{1, 0}});
  ASSERT_TRUE(nested.ok()) << nested.status();
  ASSERT_TRUE(inner_first.ok()) << inner_first.status();

  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      const std::vector<int64_t> coord = {i, j};
      // Rank (i,j) holds rows ChunkOf(ChunkOf([0,8), 2, i), 2, j) (and every column).
      const Box box = nested->LocalBoxAt(coord);
      EXPECT_EQ(box.dim(0), ChunkOf(ChunkOf(Interval{0, 8}, 2, i), 2, j)) << box.ToString();
      EXPECT_EQ(box.dim(1), (Interval{0, 6}));
      // With shard order {{1, 0}} mesh dim 1 splits first.
      const Box box2 = inner_first->LocalBoxAt(coord);
      EXPECT_EQ(box2.dim(0), ChunkOf(ChunkOf(Interval{0, 8}, 2, j), 2, i)) << box2.ToString();
      EXPECT_EQ(box2.dim(1), (Interval{0, 6}));
    }
  }
}

// dtensor/tensor.h
TEST(TensorDocTest, IotaAtSlice) {
  Tensor t = Tensor::Iota(DType::kF32, {2, 3});             // 0, 1, ..., 5
  float x = t.At<float>(std::vector<int64_t>{1, 2});        // 5
  Tensor block = t.Slice(Box{{0, 1}, {2, 2}});              // columns 1..2

  EXPECT_EQ(t, Tensor::FromVector<float>({2, 3}, {0, 1, 2, 3, 4, 5}).value());
  EXPECT_EQ(x, 5.0f);
  EXPECT_EQ(block, Tensor::FromVector<float>({2, 2}, {1, 2, 4, 5}).value());
}

// dtensor/tensor_buffer.h
Status TensorBufferExample() {
  TensorBuffer b(1024);                          // 1 KiB of uninitialized host memory
  b.data()[0] = std::byte{7};
  MF_RETURN_IF_ERROR(b.Resize(512));             // within the capacity: same memory, bytes kept
  MF_ASSIGN_OR_RETURN(TensorBuffer d, TensorBuffer::Allocate(Device::Host(), 64));

  EXPECT_EQ(b.size(), 512);
  EXPECT_EQ(b.data()[0], std::byte{7});
  EXPECT_EQ(d.size(), 64);
  return Status::Ok();
}

TEST(TensorBufferDocTest, Example) { EXPECT_EQ(TensorBufferExample(), Status::Ok()); }

// dtensor/dtensor.h (on a 2x2 mesh, as rank 3 = mesh coordinate (1, 1)).
Status DistributeExample(const DeviceMesh& mesh, const Tensor& global, int my_rank, Tensor* rows) {
  MF_ASSIGN_OR_RETURN(Layout layout, Layout::Create({8, 6}, mesh, {Shard{0}, Replicate{}}));
  MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, layout, my_rank));
  *rows = x.local();   // this rank's rows
  return Status::Ok();
}

TEST(DTensorDocTest, Distribute) {
  StatusOr<DeviceMesh> mesh = DeviceMesh::Create({2, 2});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const Tensor global = Tensor::Iota(DType::kF32, {8, 6});
  Tensor rows;
  ASSERT_EQ(DistributeExample(*mesh, global, /*my_rank=*/3, &rows), Status::Ok());
  EXPECT_EQ(rows, global.Slice(Box{{4, 0}, {4, 6}}));
}

}  // namespace
}  // namespace meshflow
