#include "meshflow/dtensor/dtype.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meshflow {
namespace {

using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};

TEST(DTypeTest, FileCodesAreStableAndRoundTrip) {
  // Files on disk depend on these numbers.
  EXPECT_EQ(DTypeFileCode(DType::kF32), 0);
  EXPECT_EQ(DTypeFileCode(DType::kF64), 1);
  EXPECT_EQ(DTypeFileCode(DType::kBF16), 2);
  EXPECT_EQ(DTypeFileCode(DType::kI32), 3);
  EXPECT_EQ(DTypeFileCode(DType::kI64), 4);
  for (DType t : kAllDTypes) EXPECT_EQ(DTypeFromFileCode(DTypeFileCode(t)), t);
  EXPECT_EQ(DTypeFromFileCode(5), std::nullopt);
  EXPECT_EQ(DTypeFromFileCode(255), std::nullopt);
  EXPECT_EQ(DTypeFromFileCode(uint64_t{1} << 32), std::nullopt);
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4);
  EXPECT_EQ(DTypeSize(DType::kF64), 8);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kI32), 4);
  EXPECT_EQ(DTypeSize(DType::kI64), 8);
  static_assert(DTypeSize(DType::kBF16) == 2);
  EXPECT_EQ(DTypeName(DType::kF32), "f32");
  EXPECT_EQ(DTypeName(DType::kF64), "f64");
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kI32), "i32");
  EXPECT_EQ(DTypeName(DType::kI64), "i64");
}

TEST(DTypeTest, ParseRoundTripAndAliases) {
  for (DType t : kAllDTypes) {
    auto p = ParseDType(DTypeName(t));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, t);
  }
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  EXPECT_EQ(*ParseDType("float64"), DType::kF64);
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("int32"), DType::kI32);
  EXPECT_EQ(*ParseDType("int64"), DType::kI64);
  for (const char* bad : {"", "f16", "F32", "float", " f32", "i8"}) {
    auto p = ParseDType(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr("unknown dtype '" + std::string(bad) + "'"));
  }
}

TEST(DTypeTest, VisitAndDTypeOfAgree) {
  for (DType t : kAllDTypes) {
    const DType back = VisitDType(t, [](auto zero) { return DTypeOf<decltype(zero)>::value; });
    EXPECT_EQ(back, t);
    const int64_t size = VisitDType(t, [](auto zero) { return static_cast<int64_t>(sizeof(zero)); });
    EXPECT_EQ(size, DTypeSize(t));
  }
  static_assert(sizeof(BFloat16) == 2);
}

// Independent reference: round-to-nearest-even truncation of a float to its upper 16 bits;
// NaN maps to some NaN.
uint16_t RefBf16(uint32_t u) {
  uint32_t hi = u >> 16;
  const uint32_t lo = u & 0xffffu;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) ++hi;
  return static_cast<uint16_t>(hi);
}

bool IsNanBits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
bool IsBf16NanBits(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

TEST(BFloat16Test, HandPickedRounding) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(-2.0f).bits, 0xc000);
  EXPECT_EQ(BFloat16(0.0f).bits, 0x0000);
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: round to the even one (1).
  EXPECT_EQ(BFloat16(1.0f + 0x1p-8f).bits, 0x3f80);
  // 1 + 3*2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(BFloat16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);
  // Just above the tie rounds up; just below rounds down.
  EXPECT_EQ(BFloat16(1.0f + 0x1p-8f + 0x1p-20f).bits, 0x3f81);
  EXPECT_EQ(BFloat16(1.0f + 0x1p-8f - 0x1p-20f).bits, 0x3f80);
  // Integers: 256 exact, 257 -> 256 (tie, even), 259 -> 260 (tie, even), 258 exact.
  EXPECT_EQ(static_cast<float>(BFloat16(256.0f)), 256.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(257.0f)), 256.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(258.0f)), 258.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(259.0f)), 260.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(-259.0f)), -260.0f);
  // Infinities stay; the largest float rounds to infinity (nearest even); a bit less does not.
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(BFloat16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x7f7f7fffu)).bits, 0x7f7f);
  // Denormals round like everything else.
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x00000001u)).bits, 0x0000);
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x00018000u)).bits, 0x0002);
}

TEST(BFloat16Test, NaNStaysNaNAndIsQuiet) {
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7f80ffffu, 0xff800001u, 0xffc00000u, 0x7f808000u}) {
    const uint16_t b = BFloat16::FromFloat(std::bit_cast<float>(u));
    EXPECT_TRUE(IsBf16NanBits(b)) << std::hex << u << " -> " << b;
    EXPECT_TRUE(b & 0x0040) << "quiet bit set for " << std::hex << u;
    EXPECT_EQ(b & 0x8000, (u >> 16) & 0x8000) << "sign kept for " << std::hex << u;
    EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::bit_cast<float>(u)))));
  }
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::signaling_NaN()))));
}

TEST(BFloat16Test, EveryBf16ValueRoundTripsExactly) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const float f = std::bit_cast<float>(b << 16);
    const BFloat16 x(f);
    if (IsBf16NanBits(static_cast<uint16_t>(b))) {
      EXPECT_TRUE(IsBf16NanBits(x.bits)) << std::hex << b;
    } else {
      ASSERT_EQ(x.bits, b) << std::hex << b;
    }
  }
}

TEST(BFloat16Test, MatchesReferenceOnEdgeAndRandomPatterns) {
  auto check = [](uint32_t u) {
    const uint16_t got = BFloat16::FromFloat(std::bit_cast<float>(u));
    if (IsNanBits(u)) {
      ASSERT_TRUE(IsBf16NanBits(got)) << std::hex << u;
    } else {
      ASSERT_EQ(got, RefBf16(u)) << std::hex << u;
    }
  };
  for (uint32_t hi = 0; hi <= 0xffffu; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) check((hi << 16) | lo);
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 200000; ++i) check(static_cast<uint32_t>(rng()));
}

TEST(BFloat16Test, EqualityIsBitwise) {
  EXPECT_EQ(BFloat16(1.0f), BFloat16(1.0f));
  EXPECT_FALSE(BFloat16(0.0f) == BFloat16(-0.0f));
  BFloat16 z;
  EXPECT_EQ(z.bits, 0);
}

}  // namespace
}  // namespace meshflow
