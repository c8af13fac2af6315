#include "ops/kernels.h"

#include <cmath>

#include <gtest/gtest.h>

#include "ops/test_util.h"

namespace meshflow::ops {
namespace {

using testing::Compare;
using testing::GlobalFor;

// Naive reference matmul over double.
Tensor NaiveMatmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  Tensor c = Tensor::Zeros(a.dtype(), {m, n});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a.GetAsDouble(i * k + p) * b.GetAsDouble(p * n + j);
      c.SetFromDouble(i * n + j, s);
    }
  }
  return c;
}

TEST(MatmulKernel, MatchesNaive) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16}) {
    Tensor a = GlobalFor(t, {5, 7}, 1), b = GlobalFor(t, {7, 3}, 2);
    StatusOr<Tensor> c = MatmulKernel(a, b);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(Compare(*c, NaiveMatmul(a, b)), "") << DTypeName(t);
  }
}

TEST(MatmulKernel, BatchedBroadcastAndEmpty) {
  Tensor a = GlobalFor(DType::kF64, {2, 1, 3, 4}, 1), b = GlobalFor(DType::kF64, {3, 4, 2}, 2);
  StatusOr<Tensor> c = MatmulKernel(a, b);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->shape(), (std::vector<int64_t>{2, 3, 3, 2}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      Tensor ai = a.Slice(Box{{i, 0, 0, 0}, {1, 1, 3, 4}}), bj = b.Slice(Box{{j, 0, 0}, {1, 4, 2}});
      Tensor ci = c->Slice(Box{{i, j, 0, 0}, {1, 1, 3, 2}});
      Tensor a2 = *Tensor::FromVector<double>({3, 4}, std::vector<double>(ai.data<double>().begin(), ai.data<double>().end()));
      Tensor b2 = *Tensor::FromVector<double>({4, 2}, std::vector<double>(bj.data<double>().begin(), bj.data<double>().end()));
      Tensor c2 = *Tensor::FromVector<double>({3, 2}, std::vector<double>(ci.data<double>().begin(), ci.data<double>().end()));
      EXPECT_EQ(Compare(c2, NaiveMatmul(a2, b2)), "") << i << "," << j;
    }
  }
  // k = 0 gives zeros; m = 0 gives an empty result.
  EXPECT_EQ(*MatmulKernel(Tensor::Zeros(DType::kF32, {2, 0}), Tensor::Zeros(DType::kF32, {0, 3})),
            Tensor::Zeros(DType::kF32, {2, 3}));
  EXPECT_EQ(MatmulKernel(Tensor::Zeros(DType::kF32, {0, 4}), GlobalFor(DType::kF32, {4, 3}, 0))->shape(),
            (std::vector<int64_t>{0, 3}));
}

TEST(MatmulKernel, Errors) {
  EXPECT_EQ(MatmulKernel(Tensor::Zeros(DType::kF32, {2, 3}), Tensor::Zeros(DType::kF32, {4, 3})).status().message(),
            "matmul: contracting sizes differ: a [2,3], b [4,3]");
  EXPECT_EQ(MatmulKernel(Tensor::Zeros(DType::kF32, {2, 3}), Tensor::Zeros(DType::kF64, {3, 3})).status().message(),
            "matmul: dtypes differ: f32 vs f64");
  EXPECT_EQ(MatmulKernel(Tensor::Zeros(DType::kI32, {2, 3}), Tensor::Zeros(DType::kI32, {3, 3})).status().code(),
            StatusCode::kUnimplemented);
}

TEST(BinaryKernel, Broadcasting) {
  Tensor a = *Tensor::FromVector<float>({2, 1}, {1, 2});
  Tensor b = *Tensor::FromVector<float>({3}, {10, 20, 30});
  EXPECT_EQ(*BinaryKernel(BinaryOp::kAdd, a, b), *Tensor::FromVector<float>({2, 3}, {11, 21, 31, 12, 22, 32}));
  EXPECT_EQ(*BinaryKernel(BinaryOp::kSub, a, b), *Tensor::FromVector<float>({2, 3}, {-9, -19, -29, -8, -18, -28}));
  EXPECT_EQ(*BinaryKernel(BinaryOp::kMul, a, b), *Tensor::FromVector<float>({2, 3}, {10, 20, 30, 20, 40, 60}));
  EXPECT_EQ(*BinaryKernel(BinaryOp::kDiv, b, a), *Tensor::FromVector<float>({2, 3}, {10, 20, 30, 5, 10, 15}));
  // 0 broadcasts against 1.
  EXPECT_EQ(BinaryKernel(BinaryOp::kAdd, Tensor::Zeros(DType::kF32, {0, 1}), b)->shape(),
            (std::vector<int64_t>{0, 3}));
  EXPECT_FALSE(BinaryKernel(BinaryOp::kAdd, Tensor::Zeros(DType::kF32, {2}), b).ok());
}

TEST(UnaryKernel, Values) {
  Tensor x = *Tensor::FromVector<double>({4}, {-2, -0.5, 0, 1.5});
  // -0.0 vs 0.0 differ bytewise, so compare by value.
  EXPECT_EQ(Compare(*UnaryKernel(UnaryOp::kNeg, x), *Tensor::FromVector<double>({4}, {2, 0.5, 0, -1.5})), "");
  EXPECT_EQ(*UnaryKernel(UnaryOp::kScale, x, 2), *Tensor::FromVector<double>({4}, {-4, -1, 0, 3}));
  EXPECT_EQ(*UnaryKernel(UnaryOp::kRelu, x), *Tensor::FromVector<double>({4}, {0, 0, 0, 1.5}));
  EXPECT_EQ(Compare(*UnaryKernel(UnaryOp::kExp, x),
                    *Tensor::FromVector<double>({4}, {std::exp(-2.0), std::exp(-0.5), 1, std::exp(1.5)})),
            "");
  EXPECT_NEAR(UnaryKernel(UnaryOp::kGelu, x)->GetAsDouble(3), 1.3995715, 1e-6);
  Tensor h = *Tensor::FromVector<BFloat16>({2}, {BFloat16(1.5f), BFloat16(-3.0f)});
  EXPECT_EQ(*UnaryKernel(UnaryOp::kNeg, h), *Tensor::FromVector<BFloat16>({2}, {BFloat16(-1.5f), BFloat16(3.0f)}));
}

TEST(ReduceKernel, SumMeanMaxMin) {
  Tensor x = Tensor::Iota(DType::kF64, {2, 3});  // 0 1 2 / 3 4 5
  std::vector<int> d1 = {1}, d0 = {0}, neg = {-1}, all = {};
  EXPECT_EQ(*ReduceKernel(ReduceKind::kSum, x, d1, false), *Tensor::FromVector<double>({2}, {3, 12}));
  EXPECT_EQ(*ReduceKernel(ReduceKind::kSum, x, neg, true), *Tensor::FromVector<double>({2, 1}, {3, 12}));
  EXPECT_EQ(*ReduceKernel(ReduceKind::kMean, x, d0, false), *Tensor::FromVector<double>({3}, {1.5, 2.5, 3.5}));
  // The global count overrides the local one (uneven shards).
  EXPECT_EQ(*ReduceKernel(ReduceKind::kMean, x, d0, false, 4),
            *Tensor::FromVector<double>({3}, {0.75, 1.25, 1.75}));
  EXPECT_EQ(*ReduceKernel(ReduceKind::kMax, x, d0, true), *Tensor::FromVector<double>({1, 3}, {3, 4, 5}));
  EXPECT_EQ(*ReduceKernel(ReduceKind::kMin, x, all, false), *Tensor::FromVector<double>({}, {0}));
  // Empty reduction: identities.
  Tensor e = Tensor::Zeros(DType::kF32, {0, 2});
  EXPECT_EQ(*ReduceKernel(ReduceKind::kSum, e, d0, false), *Tensor::FromVector<float>({2}, {0, 0}));
  EXPECT_TRUE(std::isinf(ReduceKernel(ReduceKind::kMax, e, d0, false)->GetAsDouble(0)));
  std::vector<int> bad = {2};
  EXPECT_EQ(ReduceKernel(ReduceKind::kSum, x, bad, false).status().message(),
            "reduce: dim 2 out of range for shape [2,3]");
}

TEST(SoftmaxKernel, StableAndLog) {
  // Large logits: a naive exp overflows; the stable form gives the exact shifted result.
  Tensor x = *Tensor::FromVector<float>({2, 3}, {1000, 1001, 1002, -5, 0, 5});
  StatusOr<Tensor> p = SoftmaxKernel(x, 1, false);
  ASSERT_TRUE(p.ok()) << p.status();
  const double z0 = 1 + std::exp(1.0) + std::exp(2.0);
  const double z1 = std::exp(-5.0) + 1 + std::exp(5.0);
  Tensor want = *Tensor::FromVector<float>(
      {2, 3}, {float(1 / z0), float(std::exp(1.0) / z0), float(std::exp(2.0) / z0), float(std::exp(-5.0) / z1),
               float(1 / z1), float(std::exp(5.0) / z1)});
  EXPECT_EQ(Compare(*p, want), "");
  StatusOr<Tensor> lp = SoftmaxKernel(x, -1, true);
  ASSERT_TRUE(lp.ok());
  EXPECT_NEAR(lp->GetAsDouble(0), -std::log(z0), 1e-4);
  EXPECT_NEAR(lp->GetAsDouble(5), 5 - std::log(z1), 1e-4);
  // Along dim 0: columns sum to 1.
  Tensor q = *SoftmaxKernel(x, 0, false);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(q.GetAsDouble(j) + q.GetAsDouble(3 + j), 1.0, 1e-6);
  EXPECT_EQ(SoftmaxKernel(x, 2, false).status().message(), "softmax: dim 2 out of range for shape [2,3]");
  // bf16 goes through float.
  Tensor h = *Tensor::FromVector<BFloat16>({2}, {BFloat16(0.0f), BFloat16(0.0f)});
  EXPECT_EQ(*SoftmaxKernel(h, 0, false), *Tensor::FromVector<BFloat16>({2}, {BFloat16(0.5f), BFloat16(0.5f)}));
}

}  // namespace
}  // namespace meshflow::ops
