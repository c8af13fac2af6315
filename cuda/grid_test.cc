#include "meshflow/cuda/grid.h"

#include <gtest/gtest.h>

namespace meshflow::cuda_grid {
namespace {

TEST(CudaGridTest, BlocksCoverTheWorkWithinTheCap) {
  EXPECT_EQ(Blocks(0), 1);
  EXPECT_EQ(Blocks(1), 1);
  EXPECT_EQ(Blocks(256), 1);
  EXPECT_EQ(Blocks(257), 2);
  EXPECT_EQ(Blocks(int64_t{256} * 1000), 1000);
  EXPECT_EQ(Blocks(int64_t{1} << 40), 65535 * 8);  // grid-stride loops cover the rest
  static_assert(Blocks(512) == 2);
}

}  // namespace
}  // namespace meshflow::cuda_grid
