#include "meshflow/base/parse.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace meshflow {
namespace {

TEST(ParseInt64Test, AcceptsSignedDecimal) {
  EXPECT_EQ(*ParseInt64("0", "n"), 0);
  EXPECT_EQ(*ParseInt64("-17", "n"), -17);
  EXPECT_EQ(*ParseInt64("+5", "n"), 5);
  EXPECT_EQ(*ParseInt64("9223372036854775807", "n"), INT64_MAX);
}

TEST(ParseInt64Test, RejectsNamingTheText) {
  for (const char* bad : {"", "+", "1.5", " 3", "3 ", "0x10", "abc"}) {
    StatusOr<int64_t> v = ParseInt64(bad, "--iters");
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("bad --iters '" + std::string(bad) + "'"), std::string::npos) << v.status();
  }
  StatusOr<int64_t> big = ParseInt64("9223372036854775808", "n");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("out of the int64 range"), std::string::npos) << big.status();
}

TEST(ParseIntListTest, SplitsOnTheSeparator) {
  EXPECT_EQ(*ParseIntList("2x4", 'x', "mesh"), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(*ParseIntList("8,0,-1", ',', "shape"), (std::vector<int64_t>{8, 0, -1}));
  EXPECT_EQ(*ParseIntList("7", ',', "shape"), (std::vector<int64_t>{7}));
}

TEST(ParseIntListTest, RejectsEmptyAndBadItems) {
  StatusOr<std::vector<int64_t>> empty = ParseIntList("", ',', "shape");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "empty shape");
  for (const char* bad : {"8,,6", "8,", ",8", "2xa"}) {
    StatusOr<std::vector<int64_t>> v = ParseIntList(bad, bad[1] == 'x' ? 'x' : ',', "shape");
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find("bad shape '" + std::string(bad) + "'"), std::string::npos) << v.status();
  }
}

}  // namespace
}  // namespace meshflow
