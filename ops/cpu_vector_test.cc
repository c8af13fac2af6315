#include "meshflow/ops/cpu_vector.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Every level this CPU runs, lowest first; the active level is restored afterwards.
std::vector<CpuVectorLevel> Levels() {
  std::vector<CpuVectorLevel> out;
  for (CpuVectorLevel l : {CpuVectorLevel::kBaseline, CpuVectorLevel::kAvx2, CpuVectorLevel::kAvx512}) {
    if (l <= BestCpuVectorLevel()) out.push_back(l);  // kScalar: the Off test below
  }
  return out;
}

class CpuVectorTest : public ::testing::TestWithParam<CpuVectorLevel> {
 protected:
  void SetUp() override { ASSERT_TRUE(SetCpuVectorLevel(GetParam()).ok()); }
  void TearDown() override { ASSERT_TRUE(SetCpuVectorLevel(BestCpuVectorLevel()).ok()); }
};

TEST_P(CpuVectorTest, ExpRelativeErrorOverTheWholeRange) {
  double worst = 0, worst_x = 0;
  for (double x = -87.33; x <= 88.72; x += 0.0007) {
    const float xf = static_cast<float>(x);
    const double want = std::exp(static_cast<double>(xf));
    const double got = VectorExpF32(xf);
    if (std::fabs(got - want) / want > worst) {
      worst = std::fabs(got - want) / want;
      worst_x = xf;
    }
  }
  std::printf("%s: exp max relative error %.3g at x = %.7g\n", std::string(CpuVectorLevelName(GetParam())).c_str(),
              worst, worst_x);
  EXPECT_LE(worst, 3e-7);
  // The loop form equals the scalar-call form.
  std::vector<float> x;  // 3 full AVX-512 vectors and a tail
  for (int i = 0; i < 53; ++i) x.push_back(-60.0f + 2.7f * static_cast<float>(i));
  std::vector<float> y(x.size());
  ASSERT_TRUE(VectorUnaryF32(UnaryOp::kExp, x.data(), y.data(), static_cast<int64_t>(x.size()), 1.0f));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], VectorExpF32(x[i])) << x[i];
}

TEST_P(CpuVectorTest, ExpLimitsAndSpecialValues) {
  EXPECT_EQ(VectorExpF32(0.0f), 1.0f);
  EXPECT_EQ(VectorExpF32(-kInf), 0.0f);
  EXPECT_EQ(VectorExpF32(kInf), kInf);
  EXPECT_EQ(VectorExpF32(89.0f), kInf);    // exp(89) > FLT_MAX
  EXPECT_EQ(VectorExpF32(-104.0f), 0.0f);  // below FLT_MIN: flushed
  EXPECT_TRUE(std::isnan(VectorExpF32(std::numeric_limits<float>::quiet_NaN())));
  const float near_max = VectorExpF32(88.7f);  // n = 128: 2^127 * 2
  EXPECT_NEAR(near_max / std::exp(static_cast<double>(88.7f)), 1.0, 3e-7);
}

// The vector forms against the scalar element math (elementwise.h, in double) over a dense
// sweep: absolute 1e-6 + relative 2e-6 (float cannot hold the tails that the double forms keep:
// gelu'(-5.2) is -5e-7 in double and 0 through any float tanh). Today's scalar float forms (libm
// tanhf / expf) are measured alongside for the record.
TEST_P(CpuVectorTest, UnaryOpsMatchTheScalarForms) {
  const UnaryOp ops[] = {UnaryOp::kExp,      UnaryOp::kTanh,      UnaryOp::kGelu,      UnaryOp::kSigmoid,
                         UnaryOp::kSilu,     UnaryOp::kGeluDeriv, UnaryOp::kSiluDeriv, UnaryOp::kTanhDeriv,
                         UnaryOp::kSigmoidDeriv};
  std::vector<float> x;
  for (double v = -20; v <= 20; v += 0.00037) x.push_back(static_cast<float>(v));
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.0625f, -0.0625f, 0.06249f, 9.0f, -9.0f, 50.0f, -50.0f}) x.push_back(v);
  std::vector<float> y(x.size());
  for (UnaryOp op : ops) {
    ASSERT_TRUE(VectorUnaryF32(op, x.data(), y.data(), static_cast<int64_t>(x.size()), 1.0f));
    double worst_abs = 0, worst_rel = 0, libm_abs = 0, libm_rel = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = elementwise::UnaryApply<double>(op, static_cast<double>(x[i]), 1.0);
      const double err = std::fabs(static_cast<double>(y[i]) - want);
      const double libm_err = std::fabs(static_cast<double>(elementwise::UnaryApply<float>(op, x[i], 1.0f)) - want);
      libm_abs = std::max(libm_abs, libm_err);
      if (std::fabs(want) > 1e-3) libm_rel = std::max(libm_rel, libm_err / std::fabs(want));
      ASSERT_LE(err, 1e-6 + 2e-6 * std::fabs(want)) << UnaryOpName(op) << " at x = " << x[i] << ": " << y[i]
                                                    << " vs " << want;
      if (std::fabs(want) > 1e-3) worst_rel = std::max(worst_rel, err / std::fabs(want));
      worst_abs = std::max(worst_abs, err);
    }
    std::printf("%s: %s max abs error %.3g, max rel error (|y| > 1e-3) %.3g; scalar float (libm) %.3g, %.3g\n",
                std::string(CpuVectorLevelName(GetParam())).c_str(), std::string(UnaryOpName(op)).c_str(), worst_abs,
                worst_rel, libm_abs, libm_rel);
  }
}

TEST_P(CpuVectorTest, UnarySpecialValuesAndInPlace) {
  std::vector<float> x = {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf};
  std::vector<float> y(3);
  ASSERT_TRUE(VectorUnaryF32(UnaryOp::kTanh, x.data(), y.data(), 3, 1.0f));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], -1.0f);
  ASSERT_TRUE(VectorUnaryF32(UnaryOp::kSigmoid, x.data(), y.data(), 3, 1.0f));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  std::vector<float> z = {0.5f, -1.0f, 2.0f};  // in place
  ASSERT_TRUE(VectorUnaryF32(UnaryOp::kGelu, z.data(), z.data(), 3, 1.0f));
  EXPECT_NEAR(z[0], elementwise::UnaryApply<double>(UnaryOp::kGelu, 0.5, 1.0), 1e-6);
  EXPECT_NEAR(z[1], elementwise::UnaryApply<double>(UnaryOp::kGelu, -1.0, 1.0), 1e-6);
  // Ops without a libm call stay with the caller's loops.
  for (UnaryOp op : {UnaryOp::kNeg, UnaryOp::kRelu, UnaryOp::kScale, UnaryOp::kSqrt, UnaryOp::kLog}) {
    EXPECT_FALSE(VectorUnaryF32(op, x.data(), y.data(), 3, 1.0f)) << UnaryOpName(op);
  }
}

// Softmax rows against a double reference, for row lengths around the vector widths.
TEST_P(CpuVectorTest, SoftmaxRowsMatchDoubleReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 64, 100, 1000}) {
    const int64_t rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (float& v : x) v = dist(rng);
    if (n > 2) x[1] = -kInf;  // a masked entry
    for (bool log : {false, true}) {
      std::vector<float> y(x.size());
      ASSERT_TRUE(VectorSoftmaxRowsF32(x.data(), y.data(), rows, n, log));
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * n;
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(xr[j]));
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(xr[j] - mx);
        for (int64_t j = 0; j < n; ++j) {
          const double want = log ? (xr[j] - mx) - std::log(sum) : std::exp(xr[j] - mx) / sum;
          const double got = y[static_cast<size_t>(r * n + j)];
          if (std::isinf(want)) {
            EXPECT_EQ(got, want);
          } else {
            EXPECT_NEAR(got, want, log ? 1e-6 * (1 + std::fabs(want)) : 1e-6 * want + 1e-12)
                << "n " << n << " row " << r << " j " << j << " log " << log;
          }
        }
      }
    }
  }
}

TEST_P(CpuVectorTest, SoftmaxRowWithoutFiniteMaxIsNaNLikeTheScalarKernel) {
  std::vector<float> x = {-kInf, -kInf, -kInf}, y(3);
  ASSERT_TRUE(VectorSoftmaxRowsF32(x.data(), y.data(), 1, 3, false));
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

TEST_P(CpuVectorTest, SumMatchesSequentialDoubleSum) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t n : {0, 1, 7, 8, 9, 31, 1000, 4099}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    double want = 0;
    for (float v : x) want += v;
    double got = 0;
    ASSERT_TRUE(VectorSumF32(x.data(), n, &got));
    EXPECT_NEAR(got, want, 1e-12) << n;
  }
}

// Layer and RMS norm rows against a direct double computation, with and without weight / bias.
TEST_P(CpuVectorTest, NormRowsMatchDoubleReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(1.0f, 3.0f);
  for (int64_t n : {1, 5, 8, 17, 256}) {
    const int64_t rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * n)), w(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    for (float& v : b) v = dist(rng);
    for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
      for (int affine = 0; affine < 4; ++affine) {
        const float* pw = affine & 1 ? w.data() : nullptr;
        const float* pb = affine & 2 ? b.data() : nullptr;
        std::vector<float> y(x.size());
        ASSERT_TRUE(VectorNormRowsF32(kind, x.data(), pw, pb, y.data(), rows, n, 1e-5));
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr = x.data() + r * n;
          double mean = 0, sq = 0;
          if (kind == NormKind::kLayerNorm) {
            for (int64_t j = 0; j < n; ++j) mean += xr[j];
            mean /= static_cast<double>(n);
          }
          for (int64_t j = 0; j < n; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
          const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + 1e-5);
          for (int64_t j = 0; j < n; ++j) {
            double want = (xr[j] - mean) * inv;
            if (pw != nullptr) want *= pw[j];
            if (pb != nullptr) want += pb[j];
            EXPECT_NEAR(y[static_cast<size_t>(r * n + j)], want, 1e-6 * (1 + std::fabs(want)))
                << "n " << n << " kind " << static_cast<int>(kind) << " affine " << affine;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, CpuVectorTest, ::testing::ValuesIn(Levels()),
                         [](const ::testing::TestParamInfo<CpuVectorLevel>& info) {
                           return std::string(CpuVectorLevelName(info.param));
                         });

TEST(CpuVectorLevels, ScalarTurnsTheLoopsOff) {
  ASSERT_TRUE(SetCpuVectorLevel(CpuVectorLevel::kScalar).ok());
  std::vector<float> x = {1, 2, 3}, y = {7, 7, 7};
  double sum = 5;
  EXPECT_FALSE(VectorUnaryF32(UnaryOp::kGelu, x.data(), y.data(), 3, 1.0f));
  EXPECT_FALSE(VectorSoftmaxRowsF32(x.data(), y.data(), 1, 3, false));
  EXPECT_FALSE(VectorNormRowsF32(NormKind::kLayerNorm, x.data(), nullptr, nullptr, y.data(), 1, 3, 1e-5));
  EXPECT_FALSE(VectorSumF32(x.data(), 3, &sum));
  EXPECT_EQ(y, (std::vector<float>{7, 7, 7}));
  EXPECT_EQ(sum, 5);
  ASSERT_TRUE(SetCpuVectorLevel(BestCpuVectorLevel()).ok());
}

TEST(CpuVectorLevels, SetAboveBestFailsAndEnvironmentDefaultIsBest) {
  EXPECT_EQ(ActiveCpuVectorLevel(), BestCpuVectorLevel());  // no MESHFLOW_CPU_VECTOR in tests
  if (BestCpuVectorLevel() != CpuVectorLevel::kAvx512) {
    const Status s = SetCpuVectorLevel(CpuVectorLevel::kAvx512);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("avx512 is above this CPU's best level"), std::string::npos) << s;
  }
  std::printf("best level on this CPU: %s\n", std::string(CpuVectorLevelName(BestCpuVectorLevel())).c_str());
}

}  // namespace
}  // namespace meshflow
