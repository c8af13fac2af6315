#include "meshflow/ops/kernels.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/ops/cpu_vector.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/test_util.h"

namespace meshflow {
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

// The loop fast paths (reduced suffix / prefix, row / column broadcasting, where with broadcast
// operands) against naive row-major references: the same bits, since every output folds the same
// inputs in the same order.
TEST(KernelFastPaths, MatchNaiveReferencesBitForBit) {
  const Tensor x = GlobalFor(DType::kF32, {3, 4, 5}, 11);
  auto at = [&](int64_t i, int64_t j, int64_t k) { return static_cast<double>(x.data<float>()[(i * 4 + j) * 5 + k]); };
  for (const std::vector<int>& dims : std::vector<std::vector<int>>{{2}, {1, 2}, {0}, {0, 1}, {1}, {0, 2}, {0, 1, 2}}) {
    bool red[3] = {false, false, false};
    for (int d : dims) red[d] = true;
    std::vector<int64_t> shape;
    for (int d = 0; d < 3; ++d) {
      if (!red[d]) shape.push_back(x.shape()[static_cast<size_t>(d)]);
    }
    Tensor want = Tensor::Zeros(DType::kF32, shape), want_max = Tensor::Zeros(DType::kF32, shape);
    std::vector<double> acc(static_cast<size_t>(want.NumElements()), 0.0);
    std::vector<double> mx(acc.size(), -INFINITY);
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        for (int64_t k = 0; k < 5; ++k) {
          int64_t o = 0;
          const int64_t idx[3] = {i, j, k};
          for (int d = 0; d < 3; ++d) {
            if (!red[d]) o = o * x.shape()[static_cast<size_t>(d)] + idx[d];
          }
          acc[static_cast<size_t>(o)] += at(i, j, k);
          mx[static_cast<size_t>(o)] = std::max(mx[static_cast<size_t>(o)], at(i, j, k));
        }
      }
    }
    for (size_t o = 0; o < acc.size(); ++o) {
      want.data<float>()[o] = static_cast<float>(acc[o]);
      want_max.data<float>()[o] = static_cast<float>(mx[o]);
    }
    EXPECT_EQ(*ReduceKernel(ReduceKind::kSum, x, dims, false), want) << dims.size() << " dims from " << dims[0];
    EXPECT_EQ(*ReduceKernel(ReduceKind::kMax, x, dims, false), want_max) << dims.size() << " dims from " << dims[0];
  }
  for (const std::vector<int64_t>& bs : std::vector<std::vector<int64_t>>{{5}, {4, 5}, {3, 4, 1}, {3, 1, 1}, {1, 4, 5}, {4, 1}}) {
    const Tensor b = GlobalFor(DType::kF32, bs, 12, 0.5);
    std::vector<int64_t> full = bs;
    while (full.size() < 3) full.insert(full.begin(), 1);
    Tensor want_ab = Tensor::Zeros(DType::kF32, {3, 4, 5}), want_ba = want_ab, want_w = want_ab;
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        for (int64_t k = 0; k < 5; ++k) {
          const int64_t bi = ((full[0] == 1 ? 0 : i) * full[1] + (full[1] == 1 ? 0 : j)) * full[2] + (full[2] == 1 ? 0 : k);
          const float xa = x.data<float>()[(i * 4 + j) * 5 + k], xb = b.data<float>()[bi];
          want_ab.data<float>()[(i * 4 + j) * 5 + k] = xa - xb;
          want_ba.data<float>()[(i * 4 + j) * 5 + k] = xb / xa;
          want_w.data<float>()[(i * 4 + j) * 5 + k] = xb > 0 ? xa : -1.0f;
        }
      }
    }
    EXPECT_EQ(*BinaryKernel(BinaryOp::kSub, x, b), want_ab) << bs.size();
    EXPECT_EQ(*BinaryKernel(BinaryOp::kDiv, b, x), want_ba) << bs.size();
    // where(b > 0, x, -1): cond broadcast from b's shape, b a scalar.
    const Tensor cond = *CompareKernel(CompareOp::kGt, b, Tensor::Zeros(DType::kF32, {}));
    const Tensor minus = *Tensor::FromVector<float>({}, {-1});
    EXPECT_EQ(*WhereKernel(cond, x, minus), want_w) << bs.size();
  }
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

// ---- Data movement, norms, embedding, loss, integers, rank-1 matmul ----

TEST(PermuteKernel, Values) {
  Tensor x = Tensor::Iota(DType::kF32, {2, 3});
  EXPECT_EQ(*PermuteKernel(x, std::vector<int>{1, 0}), *Tensor::FromVector<float>({3, 2}, {0, 3, 1, 4, 2, 5}));
  Tensor y = Tensor::Iota(DType::kI64, {2, 3, 4});
  Tensor p = *PermuteKernel(y, std::vector<int>{2, 0, 1});
  ASSERT_EQ(p.shape(), (std::vector<int64_t>{4, 2, 3}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t pi[3] = {k, i, j}, yi[3] = {i, j, k};
        EXPECT_EQ(p.At<int64_t>(pi), y.At<int64_t>(yi));
      }
    }
  }
  EXPECT_EQ(PermuteKernel(Tensor::Zeros(DType::kBF16, {0, 3}), std::vector<int>{1, 0})->shape(),
            (std::vector<int64_t>{3, 0}));
  EXPECT_FALSE(PermuteKernel(x, std::vector<int>{0, 0}).ok());
}

TEST(ReshapeKernel, InferAndErrors) {
  Tensor x = Tensor::Iota(DType::kF64, {2, 6});
  Tensor y = *ReshapeKernel(x, std::vector<int64_t>{3, -1});
  EXPECT_EQ(y, *Tensor::FromVector<double>({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(ReshapeKernel(x, std::vector<int64_t>{5, -1}).status().message(),
            "reshape: cannot infer the -1 of [5,-1] for shape [2,6] (12 elements)");
  EXPECT_EQ(ReshapeKernel(Tensor::Zeros(DType::kI32, {0, 4}), std::vector<int64_t>{2, 0, 3})->shape(),
            (std::vector<int64_t>{2, 0, 3}));
}

TEST(ConcatKernel, Values) {
  Tensor a = *Tensor::FromVector<int32_t>({2, 1}, {1, 2});
  Tensor b = *Tensor::FromVector<int32_t>({2, 2}, {3, 4, 5, 6});
  Tensor e = Tensor::Zeros(DType::kI32, {2, 0});
  const Tensor* xs[3] = {&a, &e, &b};
  EXPECT_EQ(*ConcatKernel(xs, -1), *Tensor::FromVector<int32_t>({2, 3}, {1, 3, 4, 2, 5, 6}));
  Tensor f = Tensor::Zeros(DType::kF32, {2, 1});
  const Tensor* mixed[2] = {&a, &f};
  EXPECT_EQ(ConcatKernel(mixed, 1).status().message(), "concat: dtypes differ: i32 vs f32 (operand 1)");
}

TEST(SliceKernel, Values) {
  Tensor x = Tensor::Iota(DType::kF32, {3, 5});
  EXPECT_EQ(*SliceKernel(x, 1, -4, 100, 2), *Tensor::FromVector<float>({3, 2}, {1, 3, 6, 8, 11, 13}));
  EXPECT_EQ(*SliceKernel(x, 0, 2, 3, 1), *Tensor::FromVector<float>({1, 5}, {10, 11, 12, 13, 14}));
  EXPECT_EQ(SliceKernel(x, 0, 3, 1, 1)->shape(), (std::vector<int64_t>{0, 5}));
}

TEST(NormKernel, LayerAndRms) {
  Tensor x = *Tensor::FromVector<double>({2, 2}, {1, 3, -2, 2});
  Tensor w = *Tensor::FromVector<double>({2}, {2, 1});
  Tensor b = *Tensor::FromVector<double>({2}, {0, 10});
  // Row [1,3]: mean 2, var 1 -> [-1, 1]/sqrt(1+eps); row [-2,2]: mean 0, var 4 -> [-1, 1]/sqrt(1+eps/4).
  const double e = 1e-5, r0 = 1 / std::sqrt(1 + e), r1 = 2 / std::sqrt(4 + e);
  EXPECT_EQ(Compare(*NormKernel(NormKind::kLayerNorm, x, 1, &w, &b, e),
                    *Tensor::FromVector<double>({2, 2}, {-2 * r0, 10 + r0, -2 * r1, 10 + r1})),
            "");
  // RMS: row [1,3]: rms sqrt(5); no weight.
  const double s0 = std::sqrt(5 + e), s1 = std::sqrt(4 + e);
  EXPECT_EQ(Compare(*NormKernel(NormKind::kRmsNorm, x, 1, nullptr, nullptr, e),
                    *Tensor::FromVector<double>({2, 2}, {1 / s0, 3 / s0, -2 / s1, 2 / s1})),
            "");
  // Over both dims: mean 1, var (0+4+9+1)/4.
  const double v = std::sqrt(3.5 + e);
  EXPECT_EQ(Compare(*NormKernel(NormKind::kLayerNorm, x, 2, nullptr, nullptr, e),
                    *Tensor::FromVector<double>({2, 2}, {0, 2 / v, -3 / v, 1 / v})),
            "");
  Tensor i = Tensor::Zeros(DType::kI32, {2, 2});
  EXPECT_EQ(NormKernel(NormKind::kLayerNorm, i, 1, nullptr, nullptr, e).status().code(), StatusCode::kUnimplemented);
}

TEST(EmbeddingKernel, LookupAndRowOffset) {
  Tensor table = Tensor::Iota(DType::kF32, {4, 2});  // row r = [2r, 2r+1]
  Tensor ids = *Tensor::FromVector<int64_t>({3}, {3, 0, 3});
  EXPECT_EQ(*EmbeddingKernel(table, ids), *Tensor::FromVector<float>({3, 2}, {6, 7, 0, 1, 6, 7}));
  // Local rows 2..3 of a 6-row table: id 3 is local row 1, id 0 is elsewhere (zeros).
  Tensor local = table.Slice(Box{{0, 0}, {2, 2}});
  EXPECT_EQ(*EmbeddingKernel(local, ids, /*row_offset=*/2, /*global_rows=*/6),
            *Tensor::FromVector<float>({3, 2}, {2, 3, 0, 0, 2, 3}));
  Tensor bad = *Tensor::FromVector<int32_t>({1}, {4});
  EXPECT_EQ(EmbeddingKernel(table, bad).status().message(), "embedding: id 4 at 0 outside [0, 4)");
  EXPECT_EQ(EmbeddingKernel(table, table).status().message(), "embedding: ids dtype f32 must be i32 or i64");
}

TEST(CrossEntropyKernel, Reductions) {
  Tensor logits = *Tensor::FromVector<double>({2, 2}, {0, 0, 1000, 0});
  Tensor targets = *Tensor::FromVector<int32_t>({2}, {0, 1});
  const double l0 = std::log(2.0), l1 = 1000;  // stable: logsumexp(1000, 0) - 0
  EXPECT_EQ(Compare(*CrossEntropyKernel(logits, targets, LossReduction::kNone),
                    *Tensor::FromVector<double>({2}, {l0, l1})),
            "");
  EXPECT_EQ(Compare(*CrossEntropyKernel(logits, targets, LossReduction::kSum),
                    *Tensor::FromVector<double>({}, {l0 + l1})),
            "");
  EXPECT_EQ(Compare(*CrossEntropyKernel(logits, targets, LossReduction::kMean, /*mean_count=*/4),
                    *Tensor::FromVector<double>({}, {(l0 + l1) / 4})),
            "");
  Tensor bad = *Tensor::FromVector<int64_t>({2}, {0, 2});
  EXPECT_EQ(CrossEntropyKernel(logits, bad, LossReduction::kMean).status().message(),
            "cross_entropy: target 2 at row 1 outside [0, 2)");
}

TEST(IntegerKernels, ExactAndWrapping) {
  Tensor a = *Tensor::FromVector<int32_t>({2}, {INT32_MAX, -5});
  Tensor one = *Tensor::FromVector<int32_t>({1}, {1});
  EXPECT_EQ(*BinaryKernel(BinaryOp::kAdd, a, one), *Tensor::FromVector<int32_t>({2}, {INT32_MIN, -4}));
  EXPECT_EQ(*UnaryKernel(UnaryOp::kNeg, a), *Tensor::FromVector<int32_t>({2}, {-INT32_MAX, 5}));
  EXPECT_EQ(BinaryKernel(BinaryOp::kDiv, a, one).status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(UnaryKernel(UnaryOp::kExp, a).status().code(), StatusCode::kUnimplemented);
  // Sums of i64 above 2^53 stay exact (no double accumulation).
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor b = *Tensor::FromVector<int64_t>({2}, {big, 2});
  EXPECT_EQ(*ReduceKernel(ReduceKind::kSum, b, {}, false), *Tensor::FromVector<int64_t>({}, {big + 2}));
  // Max of an empty reduction is the type's lowest value (the Partial(max) identity).
  EXPECT_EQ(*ReduceKernel(ReduceKind::kMax, Tensor::Zeros(DType::kI32, {0, 2}), std::vector<int>{0}, false),
            *Tensor::FromVector<int32_t>({2}, {INT32_MIN, INT32_MIN}));
  EXPECT_EQ(ReduceKernel(ReduceKind::kMean, b, {}, false).status().code(), StatusCode::kUnimplemented);
}

TEST(MatmulKernel, RankOne) {
  Tensor v = *Tensor::FromVector<float>({3}, {1, 2, 3});
  Tensor m = Tensor::Iota(DType::kF32, {3, 2});  // [[0,1],[2,3],[4,5]]
  EXPECT_EQ(*MatmulKernel(v, v), *Tensor::FromVector<float>({}, {14}));
  EXPECT_EQ(*MatmulKernel(v, m), *Tensor::FromVector<float>({2}, {16, 22}));
  Tensor mt = Tensor::Iota(DType::kF32, {2, 3});  // [[0,1,2],[3,4,5]]
  EXPECT_EQ(*MatmulKernel(mt, v), *Tensor::FromVector<float>({2}, {8, 26}));
  Tensor bm = Tensor::Iota(DType::kF32, {2, 3, 2});
  EXPECT_EQ(MatmulKernel(v, bm)->shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(MatmulKernel(Tensor(), v).status().message(), "matmul: operands need rank >= 1, got shapes [] and [3]");
}

}  // namespace
}  // namespace meshflow

namespace meshflow {
namespace {

// The vectorized f32 loops (cpu_vector.h) at every level this CPU runs, against the scalar
// kernels (CpuVectorLevel::kScalar, today's reference): the unary ops they cover, softmax and
// log-softmax (last dim: vector rows; other dims: strided, scalar either way), layer / RMS norm
// with and without weight and bias, sums and means over a suffix; f32 and bf16; empty, uneven and
// broadcast-shaped operands. f32: absolute 1e-6 + relative 2e-6 (cpu_vector.h's stated bounds);
// bf16: one bf16 rounding step (relative 2^-8) + 1e-6.
class VectorLevelTest : public ::testing::TestWithParam<CpuVectorLevel> {
 protected:
  void TearDown() override { ASSERT_TRUE(SetCpuVectorLevel(BestCpuVectorLevel()).ok()); }

  // Runs `kernel` at kScalar and at the test's level and compares.
  template <typename F>
  void Check(const std::string& what, F kernel) {
    ASSERT_TRUE(SetCpuVectorLevel(CpuVectorLevel::kScalar).ok());
    StatusOr<Tensor> want = kernel();
    ASSERT_TRUE(SetCpuVectorLevel(GetParam()).ok());
    StatusOr<Tensor> got = kernel();
    ASSERT_TRUE(want.ok() && got.ok()) << what << ": " << want.status() << " / " << got.status();
    ASSERT_EQ(got->shape(), want->shape()) << what;
    ASSERT_EQ(got->dtype(), want->dtype()) << what;
    const bool bf16 = got->dtype() == DType::kBF16;
    for (int64_t i = 0; i < got->NumElements(); ++i) {
      const double g = got->GetAsDouble(i), w = want->GetAsDouble(i);
      if (std::isnan(w) || std::isinf(w)) {
        EXPECT_TRUE(std::isnan(w) ? std::isnan(g) : g == w) << what << " at " << i << ": " << g << " vs " << w;
        continue;
      }
      const double tol = bf16 ? 1e-6 + std::ldexp(std::fabs(w), -8) : 1e-6 + 2e-6 * std::fabs(w);
      ASSERT_LE(std::fabs(g - w), tol) << what << " at " << i << ": " << g << " vs " << w;
    }
  }
};

TEST_P(VectorLevelTest, MatchesTheScalarKernels) {
  const std::vector<std::vector<int64_t>> shapes = {{0, 5}, {3, 17}, {2, 3, 33}, {4, 1}, {1, 1024}};
  for (DType t : {DType::kF32, DType::kBF16}) {
    int seed = 0;
    for (const std::vector<int64_t>& shape : shapes) {
      const Tensor x = GlobalFor(t, shape, ++seed, -0.5);
      const std::string s = std::string(DTypeName(t)) + " " + ShapeString(shape);
      for (UnaryOp op : {UnaryOp::kExp, UnaryOp::kTanh, UnaryOp::kGelu, UnaryOp::kSigmoid, UnaryOp::kSilu,
                         UnaryOp::kGeluDeriv, UnaryOp::kSiluDeriv, UnaryOp::kTanhDeriv, UnaryOp::kSigmoidDeriv}) {
        Check(std::string(UnaryOpName(op)) + " " + s, [&] { return UnaryKernel(op, x); });
      }
      for (int dim : {-1, 0}) {
        for (bool log : {false, true}) {
          Check("softmax dim " + std::to_string(dim) + (log ? " log " : " ") + s,
                [&] { return SoftmaxKernel(x, dim, log); });
        }
      }
      const int64_t d = shape.back();
      const Tensor w = GlobalFor(t, {d}, ++seed), b = GlobalFor(t, {d}, ++seed);
      for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
        for (int affine = 0; affine < 4; ++affine) {
          Check("norm " + std::to_string(static_cast<int>(kind)) + " affine " + std::to_string(affine) + " " + s, [&] {
            return NormKernel(kind, x, 1, affine & 1 ? &w : nullptr, affine & 2 ? &b : nullptr, 1e-5);
          });
        }
      }
      const int last = static_cast<int>(shape.size()) - 1;
      for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kMean}) {
        for (bool keepdim : {false, true}) {
          Check("reduce last " + s, [&] { return ReduceKernel(kind, x, std::vector<int>{last}, keepdim); });
        }
        if (shape.size() == 3) {  // a suffix of two dims
          Check("reduce last two " + s, [&] { return ReduceKernel(kind, x, std::vector<int>{1, 2}, false); });
        }
      }
    }
  }
}

std::vector<CpuVectorLevel> VectorLevels() {
  std::vector<CpuVectorLevel> out;
  for (CpuVectorLevel l : {CpuVectorLevel::kBaseline, CpuVectorLevel::kAvx2, CpuVectorLevel::kAvx512}) {
    if (l <= BestCpuVectorLevel()) out.push_back(l);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Levels, VectorLevelTest, ::testing::ValuesIn(VectorLevels()),
                         [](const ::testing::TestParamInfo<CpuVectorLevel>& info) {
                           return std::string(CpuVectorLevelName(info.param));
                         });

}  // namespace
}  // namespace meshflow
