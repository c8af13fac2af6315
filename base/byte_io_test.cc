#include "meshflow/base/byte_io.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace meshflow {
namespace {

TEST(ByteIoTest, StoresLowByteFirst) {
  std::byte b[8] = {};
  StoreLe<uint32_t>(b, 0x04030201u);
  EXPECT_EQ(b[0], std::byte{1});
  EXPECT_EQ(b[1], std::byte{2});
  EXPECT_EQ(b[2], std::byte{3});
  EXPECT_EQ(b[3], std::byte{4});
  EXPECT_EQ(b[4], std::byte{0});  // nothing past sizeof(T)
}

TEST(ByteIoTest, RoundTripsEveryWidthAndSign) {
  std::byte b[9] = {};
  StoreLe<uint8_t>(b + 1, 0xAB);
  EXPECT_EQ(LoadLe<uint8_t>(b + 1), 0xAB);
  StoreLe<uint16_t>(b + 1, 0xBEEF);
  EXPECT_EQ(LoadLe<uint16_t>(b + 1), 0xBEEF);
  StoreLe<uint64_t>(b + 1, 0x0102030405060708ull);  // unaligned
  EXPECT_EQ(LoadLe<uint64_t>(b + 1), 0x0102030405060708ull);
  EXPECT_EQ(b[1], std::byte{8});
  StoreLe<int64_t>(b + 1, -2);
  EXPECT_EQ(LoadLe<int64_t>(b + 1), -2);
  EXPECT_EQ(LoadLe<uint64_t>(b + 1), 0xFFFFFFFFFFFFFFFEull);
  StoreLe<int32_t>(b, INT32_MIN);
  EXPECT_EQ(LoadLe<int32_t>(b), INT32_MIN);
}

TEST(ByteIoTest, AppendsInOrder) {
  std::string out = "x";
  AppendLe<uint16_t>(out, 0x0102);
  AppendLe<int32_t>(out, -1);
  EXPECT_EQ(out, std::string("x\x02\x01\xFF\xFF\xFF\xFF", 7));
}

}  // namespace
}  // namespace meshflow
