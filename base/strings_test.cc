#include "meshflow/base/strings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace meshflow {
namespace {

TEST(FixedStringTest, Digits) {
  EXPECT_EQ(FixedString(2.345, 1), "2.3");
  EXPECT_EQ(FixedString(-0.5, 0), "-0");  // printf rounds half to even
  EXPECT_EQ(FixedString(1e6, 2), "1000000.00");
  EXPECT_EQ(FixedString(1.0 / 3.0, 4), "0.3333");
}

TEST(DoubleStringTest, ShortestRoundTrip) {
  EXPECT_EQ(DoubleString(0.1), "0.1");
  EXPECT_EQ(DoubleString(-1), "-1");
  EXPECT_EQ(DoubleString(1e6), "1e+06");
  EXPECT_EQ(DoubleString(1000001), "1000001");
  EXPECT_EQ(DoubleString(1e-320), "1e-320");
  EXPECT_EQ(DoubleString(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(DoubleString(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(DoubleString(std::nan("")), "nan");
  EXPECT_EQ(DoubleString(-std::nan("")), "nan");
  for (double v : {0.3, 2.0 / 3.0, 123456.789, 5e-324}) EXPECT_EQ(std::strtod(DoubleString(v).c_str(), nullptr), v) << v;
}

TEST(ListStringTest, Formats) {
  EXPECT_EQ(ListString(std::vector<int>{}), "[]");
  EXPECT_EQ(ListString(std::vector<int>{3}), "[3]");
  EXPECT_EQ(ListString(std::vector<int>{1, -2, 3}), "[1,-2,3]");
  EXPECT_EQ(ListString(std::vector<int64_t>{5, INT64_MAX}), "[5,9223372036854775807]");
}

TEST(StringsTest, ElidedListStringKeepsBothEndsAndTheLength) {
  std::vector<int> v(100);
  for (int i = 0; i < 100; ++i) v[static_cast<size_t>(i)] = i;
  EXPECT_EQ(ElidedListString(v, 4), "[0,1,...,98,99] (100 entries)");
  EXPECT_EQ(ElidedListString(v, 5), "[0,1,2,...,98,99] (100 entries)");
  EXPECT_EQ(ElidedListString(std::span<const int>(v).first(4), 4), "[0,1,2,3]");
  const std::vector<int64_t> w = {7, 8, 9};
  EXPECT_EQ(ElidedListString(w, 2), "[7,...,9] (3 entries)");
  EXPECT_EQ(ElidedListString(w), "[7,8,9]");
  EXPECT_EQ(ElidedListString(std::vector<int>{}), "[]");
}

TEST(StringsTest, SplitStringKeepsEveryField) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(SplitString("dp,tp", ','), (V{"dp", "tp"}));
  EXPECT_EQ(SplitString("dp,,tp", ','), (V{"dp", "", "tp"}));
  EXPECT_EQ(SplitString("dp,", ','), (V{"dp", ""}));
  EXPECT_EQ(SplitString(",dp", ','), (V{"", "dp"}));
  EXPECT_EQ(SplitString("", ','), (V{""}));
  EXPECT_EQ(SplitString("a;b=1,2", ';'), (V{"a", "b=1,2"}));
}

}  // namespace
}  // namespace meshflow
