#include "meshflow/ops/blas.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace meshflow {
namespace {

// c = a x b in double, row-major.
template <typename T>
std::vector<double> Reference(int64_t m, int64_t n, int64_t k, const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const double x = a[static_cast<size_t>(i * k + p)];
      for (int64_t j = 0; j < n; ++j) c[static_cast<size_t>(i * n + j)] += x * b[static_cast<size_t>(p * n + j)];
    }
  }
  return c;
}

template <typename T>
void CheckShape(int64_t m, int64_t n, int64_t k, double rel_tol) {
  std::mt19937 rng(static_cast<unsigned>(m * 1000003 + n * 1009 + k));
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (T& x : a) x = static_cast<T>(u(rng));
  for (T& x : b) x = static_cast<T>(u(rng));
  std::vector<T> c(static_cast<size_t>(m * n), T(7));  // overwritten, not accumulated into
  ASSERT_TRUE(Gemm<T>(m, n, k, a.data(), b.data(), c.data()).ok());
  const std::vector<double> want = Reference(m, n, k, a, b);
  // Each element is a dot product of k terms of magnitude <= 1: the rounding bound grows with k.
  const double tol = rel_tol * static_cast<double>(k);
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_NEAR(static_cast<double>(c[i]), want[i], tol) << "m=" << m << " n=" << n << " k=" << k << " at " << i;
  }
}

TEST(Gemm, MatchesReferenceAcrossShapeClasses) {
  // Tiny, odd, a row, a column, and sizes past the BLAS's register and cache blocks.
  const int64_t shapes[][3] = {{1, 1, 1},   {2, 3, 4},   {1, 64, 33}, {37, 1, 19}, {5, 7, 1},
                               {65, 67, 63}, {128, 96, 300}, {300, 257, 129}};
  for (const auto& s : shapes) {
    CheckShape<float>(s[0], s[1], s[2], 1e-6);
    CheckShape<double>(s[0], s[1], s[2], 1e-14);
  }
}

TEST(Gemm, EmptySizes) {
  std::vector<float> a(6, 1.0f), b(6, 1.0f), c(6, 5.0f);
  ASSERT_TRUE(Gemm<float>(2, 3, 0, a.data(), b.data(), c.data()).ok());  // k = 0: c is zeros
  for (float x : c) EXPECT_EQ(x, 0.0f);
  EXPECT_TRUE(Gemm<float>(0, 3, 2, nullptr, b.data(), nullptr).ok());
  EXPECT_TRUE(Gemm<double>(3, 0, 2, nullptr, nullptr, nullptr).ok());
}

TEST(Gemm, Errors) {
  float x = 0;
  EXPECT_EQ(Gemm<float>(-1, 2, 2, &x, &x, &x).message(), "gemm: sizes m=-1 n=2 k=2 outside [0, 2^31)");
  EXPECT_EQ(Gemm<double>(1, int64_t{1} << 31, 1, nullptr, nullptr, nullptr).message(),
            "gemm: sizes m=1 n=2147483648 k=1 outside [0, 2^31)");
}

TEST(BlasThreads, DefaultIsOneAndKnobWorks) {
  // The test environment sets no MESHFLOW_BLAS_THREADS: one thread per rank.
  EXPECT_EQ(BlasThreads(), 1);
  ASSERT_TRUE(SetBlasThreads(2).ok());
  EXPECT_EQ(BlasThreads(), 2);
  CheckShape<float>(200, 200, 200, 1e-6);  // results do not depend on the thread count
  ASSERT_TRUE(SetBlasThreads(1).ok());
  EXPECT_EQ(BlasThreads(), 1);
  EXPECT_EQ(SetBlasThreads(0).message(), "SetBlasThreads: need n >= 1, got 0");
  EXPECT_NE(std::string(BlasCoreName()), "");
}

}  // namespace
}  // namespace meshflow
