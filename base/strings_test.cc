#include "meshflow/base/strings.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace meshflow {
namespace {

TEST(ListStringTest, Formats) {
  EXPECT_EQ(ListString(std::vector<int>{}), "[]");
  EXPECT_EQ(ListString(std::vector<int>{3}), "[3]");
  EXPECT_EQ(ListString(std::vector<int>{1, -2, 3}), "[1,-2,3]");
  EXPECT_EQ(ListString(std::vector<int64_t>{5, INT64_MAX}), "[5,9223372036854775807]");
}

}  // namespace
}  // namespace meshflow
