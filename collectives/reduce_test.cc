#include "meshflow/collectives/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace meshflow {
namespace {

template <typename T>
std::vector<T> Reduce(const std::vector<std::vector<T>>& in, ReduceOp op) {
  std::vector<const void*> ptrs;
  for (const auto& v : in) ptrs.push_back(v.data());
  std::vector<T> out(in[0].size());
  Status s = ReduceBuffers(ptrs, out.data(), static_cast<int64_t>(out.size()), DTypeOf<T>::value, op);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(ReduceTest, F32AllOps) {
  const std::vector<std::vector<float>> in = {{1, -2, 3.5f}, {4, 5, -1}, {-7, 0.5f, 2}};
  EXPECT_EQ(Reduce(in, ReduceOp::kSum), (std::vector<float>{-2, 3.5f, 4.5f}));
  EXPECT_EQ(Reduce(in, ReduceOp::kAvg), (std::vector<float>{-2.0f / 3.0f, 3.5f / 3.0f, 4.5f / 3.0f}));
  EXPECT_EQ(Reduce(in, ReduceOp::kMax), (std::vector<float>{4, 5, 3.5f}));
  EXPECT_EQ(Reduce(in, ReduceOp::kMin), (std::vector<float>{-7, -2, -1}));
}

TEST(ReduceTest, F64AllOps) {
  const std::vector<std::vector<double>> in = {{1, -2}, {4, 5}};
  EXPECT_EQ(Reduce(in, ReduceOp::kSum), (std::vector<double>{5, 3}));
  EXPECT_EQ(Reduce(in, ReduceOp::kAvg), (std::vector<double>{2.5, 1.5}));
  EXPECT_EQ(Reduce(in, ReduceOp::kMax), (std::vector<double>{4, 5}));
  EXPECT_EQ(Reduce(in, ReduceOp::kMin), (std::vector<double>{1, -2}));
}

TEST(ReduceTest, FloatSumFoldsLeftInInputOrder) {
  // Float addition is not associative: (1e8 + -1e8) + 1 == 1 but (1e8 + 1) + -1e8 == 0.
  EXPECT_EQ(Reduce<float>({{1e8f}, {-1e8f}, {1.0f}}, ReduceOp::kSum), (std::vector<float>{1.0f}));
  EXPECT_EQ(Reduce<float>({{1e8f}, {1.0f}, {-1e8f}}, ReduceOp::kSum), (std::vector<float>{0.0f}));
}

TEST(ReduceTest, Bf16AccumulatesInFloatAndRoundsOnce) {
  // 1 + 3 * 2^-8: stepwise bf16 rounding would stay at 1.0 (each +2^-8 is a tie rounding to even);
  // the float sum 1.01171875 is a tie between 1+2^-7 and 1+2^-6 and rounds to even: 1.015625.
  const BFloat16 one(1.0f), tiny(0.00390625f);
  const std::vector<BFloat16> out = Reduce<BFloat16>({{one}, {tiny}, {tiny}, {tiny}}, ReduceOp::kSum);
  EXPECT_EQ(static_cast<float>(out[0]), 1.015625f);
  // Average: (1 + 2) / 2 in float, rounded once.
  const std::vector<BFloat16> avg = Reduce<BFloat16>({{BFloat16(1.0f)}, {BFloat16(2.0f)}}, ReduceOp::kAvg);
  EXPECT_EQ(static_cast<float>(avg[0]), 1.5f);
  const std::vector<BFloat16> mx = Reduce<BFloat16>({{BFloat16(-1.0f)}, {BFloat16(2.0f)}}, ReduceOp::kMax);
  EXPECT_EQ(static_cast<float>(mx[0]), 2.0f);
}

TEST(ReduceTest, IntegerAverageTruncatesTowardZero) {
  EXPECT_EQ(Reduce<int32_t>({{7, -7, 1}, {0, 0, 0}}, ReduceOp::kAvg), (std::vector<int32_t>{3, -3, 0}));
  EXPECT_EQ(Reduce<int64_t>({{7, -7}, {0, 0}, {1, 0}}, ReduceOp::kAvg), (std::vector<int64_t>{2, -2}));
}

TEST(ReduceTest, IntegerAverageIsExactBeyondTheTypeRange) {
  const int32_t big32 = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(Reduce<int32_t>({{big32}, {big32}}, ReduceOp::kAvg), (std::vector<int32_t>{big32}));
  const int64_t big64 = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Reduce<int64_t>({{big64}, {big64}, {big64}}, ReduceOp::kAvg), (std::vector<int64_t>{big64}));
}

TEST(ReduceTest, IntegerSumWraps) {
  const int32_t big32 = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(Reduce<int32_t>({{big32}, {1}}, ReduceOp::kSum),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
  const int64_t big64 = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Reduce<int64_t>({{big64}, {1}}, ReduceOp::kSum),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min()}));
}

TEST(ReduceTest, IntegerMaxMin) {
  EXPECT_EQ(Reduce<int32_t>({{1, -5}, {3, -9}, {2, 0}}, ReduceOp::kMax), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(Reduce<int64_t>({{1, -5}, {3, -9}, {2, 0}}, ReduceOp::kMin), (std::vector<int64_t>{1, -9}));
}

TEST(ReduceTest, NanPropagatesThroughMaxAndMin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(Reduce<float>({{1}, {nan}, {2}}, ReduceOp::kMax)[0]));
  EXPECT_TRUE(std::isnan(Reduce<float>({{nan}, {1}, {2}}, ReduceOp::kMin)[0]));
  EXPECT_TRUE(std::isnan(Reduce<double>({{1}, {2}, {std::nan("")}}, ReduceOp::kMax)[0]));
}

TEST(ReduceTest, SingleInputIsIdentityExceptAvgDividesByOne) {
  EXPECT_EQ(Reduce<int32_t>({{5, -3}}, ReduceOp::kAvg), (std::vector<int32_t>{5, -3}));
  EXPECT_EQ(Reduce<float>({{5, -3}}, ReduceOp::kSum), (std::vector<float>{5, -3}));
}

TEST(ReduceTest, LongBuffersCrossBlockBoundaries) {
  const int64_t n = 1000;
  std::vector<int64_t> a(n), b(n), out(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = i;
    b[i] = 2 * i;
  }
  const void* in[] = {a.data(), b.data()};
  ASSERT_TRUE(ReduceBuffers(in, out.data(), n, DType::kI64, ReduceOp::kSum).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 3 * i) << i;
}

TEST(ReduceTest, OutputMayAliasAnInput) {
  std::vector<float> a(600), b(600);
  for (int i = 0; i < 600; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 1.0f;
  }
  const void* in[] = {a.data(), b.data()};
  ASSERT_TRUE(ReduceBuffers(in, a.data(), 600, DType::kF32, ReduceOp::kSum).ok());
  for (int i = 0; i < 600; ++i) ASSERT_EQ(a[i], static_cast<float>(i) + 1.0f) << i;
}

TEST(ReduceTest, ZeroCountAcceptsNullBuffers) {
  EXPECT_TRUE(ReduceBuffers({}, nullptr, 0, DType::kF32, ReduceOp::kSum).ok());
  const void* in[] = {nullptr};
  EXPECT_TRUE(ReduceBuffers(in, nullptr, 0, DType::kBF16, ReduceOp::kMax).ok());
}

TEST(ReduceTest, Errors) {
  float x = 0, y = 0;
  const void* in[] = {&x, nullptr};
  Status s = ReduceBuffers(in, &y, -1, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-1"), std::string::npos) << s;
  s = ReduceBuffers({}, &y, 1, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no inputs"), std::string::npos) << s;
  s = ReduceBuffers(in, &y, 1, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("input 1 is null"), std::string::npos) << s;
  const void* ok_in[] = {&x};
  s = ReduceBuffers(ok_in, nullptr, 1, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("null output"), std::string::npos) << s;
}

}  // namespace
}  // namespace meshflow
