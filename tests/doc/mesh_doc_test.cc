// Every example in mesh/device_mesh.h is compiled here; keep them identical.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

// mesh/device_mesh.h: "in a 2x3 mesh, rank 4 sits at coordinate (1, 1)".
TEST(DeviceMeshDocTest, RowMajorRanks) {
  StatusOr<DeviceMesh> mesh = DeviceMesh::Create({2, 3});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->Coordinate(4).value(), (std::vector<int64_t>{1, 1}));
}

// mesh/device_mesh.h
Status GroupsAndSlice() {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({2, 2}, {"dp", "tp"}));

  EXPECT_EQ(mesh.Group(/*rank=*/3, /*dim=*/0).value(), (std::vector<int>{1, 3}));
  EXPECT_EQ(mesh.Group(3, std::vector<int>{0, 1}).value(), (std::vector<int>{0, 1, 2, 3}));
  // "so {0, 1} and {1, 0} hold the same ranks in different orders"
  EXPECT_EQ(mesh.Group(3, std::vector<int>{1, 0}).value(), (std::vector<int>{0, 2, 1, 3}));
  MF_ASSIGN_OR_RETURN(DeviceMesh tp, mesh.Slice(std::vector<std::string>{"tp"}, 3));
  EXPECT_EQ(tp.shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(tp.names(), (std::vector<std::string>{"tp"}));
  EXPECT_EQ(tp.ranks(), (std::vector<int>{2, 3}));
  return Status::Ok();
}

TEST(DeviceMeshDocTest, GroupsAndSlice) { EXPECT_EQ(GroupsAndSlice(), Status::Ok()); }

}  // namespace
}  // namespace meshflow
