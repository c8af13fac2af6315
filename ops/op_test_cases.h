// The op cases shared by the device-kernel tests: every op of ops/op_spec.h with every dtype the
// CPU kernels take, broadcasting, uneven and empty shapes, special values and a few bad inputs
// (each generator's last cases), as (op, operands, KernelContext). ops/elementwise_test.cc runs them
// through the kernel bodies on the host, ops/cuda/cuda_op_kernels_test.cc on a GPU.
#ifndef MESHFLOW_OPS_OP_TEST_CASES_H_
#define MESHFLOW_OPS_OP_TEST_CASES_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/ops/shape_util.h"

namespace meshflow::testing {

inline constexpr DType kFloats[] = {DType::kF32, DType::kF64, DType::kBF16};
inline constexpr DType kAll[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
inline constexpr DType kIds[] = {DType::kI32, DType::kI64};

struct Case {
  OpSpec op;
  std::vector<Tensor> xs;
  KernelContext ctx;
};

// Uniform values in [lo, hi] (integers: rounded down).
inline Tensor Random(DType t, std::vector<int64_t> shape, uint32_t seed, double lo = -3, double hi = 3) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor x = Tensor::Zeros(t, std::move(shape));
  for (int64_t i = 0; i < x.NumElements(); ++i) x.SetFromDouble(i, IsIntDType(t) ? std::floor(u(rng)) : u(rng));
  return x;
}

// Ids in [0, bound).
inline Tensor Ids(DType t, std::vector<int64_t> shape, uint32_t seed, int64_t bound) {
  std::mt19937 rng(seed);
  Tensor x = Tensor::Zeros(t, std::move(shape));
  for (int64_t i = 0; i < x.NumElements(); ++i) x.SetFromDouble(i, static_cast<double>(rng() % bound));
  return x;
}

// x with a few special values (inf, -inf, NaN, 0, -0) at the front.
inline Tensor WithSpecials(Tensor x) {
  const double specials[] = {INFINITY, -INFINITY, NAN, 0.0, -0.0};
  for (int64_t i = 0; i < x.NumElements() && i < 5; ++i) x.SetFromDouble(i, specials[i]);
  return x;
}

inline std::vector<const Tensor*> Ptrs(const std::vector<Tensor>& xs) {
  std::vector<const Tensor*> p;
  for (const Tensor& x : xs) p.push_back(&x);
  return p;
}

inline std::string Label(const Case& c) {
  std::string s = c.op.ToString() + " on";
  for (const Tensor& x : c.xs) s += " " + std::string(DTypeName(x.dtype())) + ShapeString(x.shape());
  return s;
}

// ---- Case generators (one per op family) ----

using ShapePair = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
inline const std::vector<ShapePair>& BroadcastPairs() {
  static const auto* pairs = new std::vector<ShapePair>{
      {{3, 4}, {3, 4}},       {{3, 4}, {4}},      {{3, 1}, {1, 4}},
      {{2, 3, 4}, {2, 1, 4}}, {{}, {5}},          {{5}, {}},
      {{0, 4}, {4}},          {{5, 3}, {5, 1}},   {{4, 1, 3}, {2, 1}},
      {{2, 0, 3}, {1, 3}},    {{7, 33}, {7, 33}}, {{2, 3, 1, 4, 5, 3, 2, 1, 2, 2}, {3, 1, 4, 5, 3, 2, 1, 2, 2}}};
  return *pairs;
}

inline std::vector<Case> BinaryCases() {
  std::vector<Case> cases;
  uint32_t seed = 1;
  for (DType t : kAll) {
    for (const auto& [sa, sb] : BroadcastPairs()) {
      for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
        cases.push_back({OpSpec::Binary(op), {Random(t, sa, ++seed), Random(t, sb, ++seed, 0.25, 3)}, {}});
      }
    }
  }
  cases.push_back(
      {OpSpec::Binary(BinaryOp::kAdd), {WithSpecials(Random(DType::kF32, {6}, 3)), Random(DType::kF32, {6}, 4)}, {}});
  Tensor big = Tensor::Zeros(DType::kI32, {3});  // wrapping
  big.data<int32_t>()[0] = INT32_MAX;
  big.data<int32_t>()[1] = INT32_MIN;
  big.data<int32_t>()[2] = 65536;
  for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul})
    cases.push_back({OpSpec::Binary(op), {big, big}, {}});
  return cases;
}

inline std::vector<Case> UnaryCases() {
  std::vector<Case> cases;
  uint32_t seed = 100;
  for (DType t : kFloats) {
    for (int u = 0; u <= static_cast<int>(UnaryOp::kFill); ++u) {
      for (double alpha : {1.7, -0.3, 2.0}) {
        const UnaryOp op = static_cast<UnaryOp>(u);
        cases.push_back({OpSpec::Unary(op, alpha), {Random(t, {7, 9}, ++seed, -4, 4)}, {}});
        cases.push_back({OpSpec::Unary(op, alpha), {WithSpecials(Random(t, {130}, ++seed, 0.01, 5))}, {}});
      }
      cases.push_back({OpSpec::Unary(static_cast<UnaryOp>(u), 0.5), {Random(t, {0, 3}, ++seed)}, {}});
    }
  }
  for (DType t : {DType::kI32, DType::kI64}) {
    cases.push_back({OpSpec::Unary(UnaryOp::kNeg), {Random(t, {5, 4}, ++seed, -100, 100)}, {}});
    cases.push_back({OpSpec::Unary(UnaryOp::kExp), {Random(t, {3}, ++seed)}, {}});  // UNIMPLEMENTED on both
  }
  Tensor lowest = Tensor::Zeros(DType::kI64, {2});
  lowest.data<int64_t>()[0] = INT64_MIN;
  cases.push_back({OpSpec::Unary(UnaryOp::kNeg), {lowest}, {}});
  return cases;
}

inline std::vector<Case> CompareWhereCases() {
  std::vector<Case> cases;
  uint32_t seed = 200;
  for (DType t : kAll) {
    for (const auto& [sa, sb] : BroadcastPairs()) {
      for (int c = 0; c <= static_cast<int>(CompareOp::kGe); ++c) {  // few distinct values: ties happen
        cases.push_back({OpSpec::Compare(static_cast<CompareOp>(c)),
                         {Random(t, sa, ++seed, -2, 2), Random(t, sb, ++seed, -2, 2)},
                         {}});
      }
      for (DType cond : kAll) {
        cases.push_back(
            {OpSpec::Where(), {Random(cond, sb, ++seed, -1, 1.5), Random(t, sa, ++seed), Random(t, sb, ++seed)}, {}});
      }
    }
  }
  cases.push_back(
      {OpSpec::Where(),
       {WithSpecials(Random(DType::kF32, {6}, 7)), Random(DType::kBF16, {6}, 8), Random(DType::kBF16, {1}, 9)},
       {}});
  cases.push_back({OpSpec::Compare(CompareOp::kEq),
                   {WithSpecials(Random(DType::kF64, {6}, 7)), WithSpecials(Random(DType::kF64, {6}, 8))},
                   {}});
  return cases;
}

inline std::vector<Case> ReduceCases() {
  std::vector<Case> cases;
  uint32_t seed = 300;
  const std::vector<std::vector<int>> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}, {0, 1, 2}};
  for (DType t : kAll) {
    for (ReduceKind k : {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax, ReduceKind::kMin}) {
      for (const std::vector<int>& dims : dim_sets) {
        for (bool keep : {false, true}) {
          cases.push_back({OpSpec::Reduce(k, dims, keep), {Random(t, {4, 5, 6}, ++seed, -50, 50)}, {}});
          cases.push_back({OpSpec::Reduce(k, dims, keep), {Random(t, {3, 0, 2}, ++seed)}, {}});
          cases.push_back({OpSpec::Reduce(k, dims, keep), {Random(t, {1, 7, 1}, ++seed)}, {}});
        }
      }
      KernelContext mean;
      mean.mean_count = 17;
      cases.push_back({OpSpec::Reduce(k, {1}, false), {Random(t, {4, 5}, ++seed)}, mean});
      cases.push_back(
          {OpSpec::Reduce(k, {0, 2, 4, 6, 8}, false), {Random(t, {2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, ++seed)}, {}});
    }
  }
  cases.push_back({OpSpec::Reduce(ReduceKind::kMax, {1}, false), {WithSpecials(Random(DType::kF32, {2, 5}, 8))}, {}});
  cases.push_back({OpSpec::Reduce(ReduceKind::kMin, {0}, true), {WithSpecials(Random(DType::kBF16, {5, 2}, 8))}, {}});
  cases.push_back({OpSpec::Reduce(ReduceKind::kSum, {3}, false), {Random(DType::kF32, {2, 3}, 1)}, {}});  // bad dim
  return cases;
}

inline std::vector<Case> SoftmaxNormCases() {
  std::vector<Case> cases;
  uint32_t seed = 400;
  for (DType t : kFloats) {
    for (int d : {0, 1, 2, -1, 3}) {
      for (bool log : {false, true}) {
        cases.push_back({OpSpec::Softmax(d, log), {Random(t, {5, 7, 3}, ++seed, -10, 10)}, {}});
        cases.push_back({OpSpec::Softmax(d, log), {Random(t, {2, 0, 3}, ++seed)}, {}});
      }
    }
    Tensor special = Random(t, {3, 4}, ++seed);
    for (int i = 0; i < 4; ++i) special.SetFromDouble(i, -INFINITY);  // an all -inf row
    special.SetFromDouble(4, INFINITY);
    special.SetFromDouble(9, NAN);
    for (bool log : {false, true}) cases.push_back({OpSpec::Softmax(1, log), {special}, {}});
    for (NormKind k : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
      cases.push_back({OpSpec::Norm(k, 1, false, false), {Random(t, {6, 33}, ++seed)}, {}});
      cases.push_back({OpSpec::Norm(k, 2, true, false), {Random(t, {3, 4, 5}, ++seed), Random(t, {4, 5}, ++seed)}, {}});
      cases.push_back(
          {OpSpec::Norm(k, 1, false, true, 1e-3), {Random(t, {3, 4, 5}, ++seed), Random(t, {5}, ++seed)}, {}});
      cases.push_back({OpSpec::Norm(k, 1, true, true),
                       {Random(t, {3, 4, 5}, ++seed), Random(t, {5}, ++seed), Random(t, {5}, ++seed)},
                       {}});
      cases.push_back({OpSpec::Norm(k, 1, true, false), {Random(t, {0, 5}, ++seed), Random(t, {5}, ++seed)}, {}});
      cases.push_back({OpSpec::Norm(k, 1, false, false), {Random(t, {4, 0}, ++seed)}, {}});
      cases.push_back({OpSpec::Norm(k, 3, false, false), {Random(t, {4, 2}, ++seed)}, {}});  // bad ndim
    }
  }
  return cases;
}

inline std::vector<Case> MovementCases() {
  std::vector<Case> cases;
  uint32_t seed = 500;
  for (DType t : kAll) {
    cases.push_back({OpSpec::Permute({2, 0, 1}), {Random(t, {3, 4, 5}, ++seed)}, {}});
    cases.push_back({OpSpec::Permute({-1, 0}), {Random(t, {3, 0}, ++seed)}, {}});
    cases.push_back({OpSpec::Permute({}), {Random(t, {}, ++seed)}, {}});
    cases.push_back({OpSpec::Permute({0, 0}), {Random(t, {2, 2}, ++seed)}, {}});  // not a permutation
    cases.push_back({OpSpec::Transpose(0, 1), {Random(t, {3, 4}, ++seed)}, {}});
    cases.push_back({OpSpec::Transpose(-1, -3), {Random(t, {2, 3, 4}, ++seed)}, {}});
    cases.push_back({OpSpec::Reshape({-1, 2}), {Random(t, {3, 4}, ++seed)}, {}});
    cases.push_back({OpSpec::Reshape({5}), {Random(t, {3, 4}, ++seed)}, {}});  // bad size
    KernelContext local;
    local.out_shape = std::vector<int64_t>{2, 6};
    cases.push_back({OpSpec::Reshape({4, 6}), {Random(t, {3, 4}, ++seed)}, local});
    cases.push_back(
        {OpSpec::Concat(1, 3), {Random(t, {2, 3}, ++seed), Random(t, {2, 0}, ++seed), Random(t, {2, 5}, ++seed)}, {}});
    cases.push_back({OpSpec::Concat(0, 2), {Random(t, {1, 3, 2}, ++seed), Random(t, {4, 3, 2}, ++seed)}, {}});
    cases.push_back({OpSpec::Concat(-1, 1), {Random(t, {2, 3}, ++seed)}, {}});
    cases.push_back({OpSpec::Concat(1, 2), {Random(t, {2, 3}, ++seed), Random(t, {3, 3}, ++seed)}, {}});  // bad
    cases.push_back({OpSpec::Slice(1, 1, 9, 3), {Random(t, {4, 10, 2}, ++seed)}, {}});
    cases.push_back({OpSpec::Slice(0, -3, INT64_MAX), {Random(t, {5, 2}, ++seed)}, {}});
    cases.push_back({OpSpec::Slice(-1, 4, 2), {Random(t, {5, 6}, ++seed)}, {}});
    KernelContext slice_local;
    slice_local.slice_local = std::pair<int64_t, int64_t>{1, 2};
    cases.push_back({OpSpec::Slice(0, 0, 8, 2), {Random(t, {5, 3}, ++seed)}, slice_local});
    cases.push_back({OpSpec::Slice(0, 0, 8, 0), {Random(t, {5, 3}, ++seed)}, {}});  // bad step
    cases.push_back({OpSpec::SliceGrad({4, 10, 2}, 1, 1, 9, 3), {Random(t, {4, 3, 2}, ++seed)}, {}});
    cases.push_back({OpSpec::SliceGrad({6}, 0, -2, INT64_MAX), {Random(t, {2}, ++seed)}, {}});
    KernelContext grad_local;
    grad_local.out_shape = std::vector<int64_t>{2, 10};
    cases.push_back({OpSpec::SliceGrad({4, 10}, 1, 0, 10, 4), {Random(t, {2, 3}, ++seed)}, grad_local});
    cases.push_back({OpSpec::Expand({3, 4, 5}), {Random(t, {4, 1}, ++seed)}, {}});
    cases.push_back({OpSpec::Expand({2, 3}), {Random(t, {}, ++seed)}, {}});
    cases.push_back({OpSpec::Expand({0, 3}), {Random(t, {1, 3}, ++seed)}, {}});
    cases.push_back({OpSpec::Expand({2, 3}), {Random(t, {3, 3}, ++seed)}, {}});  // does not broadcast
    KernelContext expand_local;
    expand_local.out_shape = std::vector<int64_t>{2, 4};
    cases.push_back({OpSpec::Expand({6, 4}), {Random(t, {1, 4}, ++seed)}, expand_local});
  }
  return cases;
}

inline std::vector<Case> EmbeddingCases() {
  std::vector<Case> cases;
  uint32_t seed = 600;
  for (DType ids : kIds) {
    for (DType t : kAll) {
      cases.push_back({OpSpec::Embedding(), {Random(t, {10, 3}, ++seed), Ids(ids, {2, 5}, ++seed, 10)}, {}});
      KernelContext sharded;
      sharded.row_offset = 3;
      sharded.global_rows = 12;
      cases.push_back({OpSpec::Embedding(), {Random(t, {5, 3}, ++seed), Ids(ids, {2, 5}, ++seed, 12)}, sharded});
      cases.push_back({OpSpec::Embedding(), {Random(t, {5, 0}, ++seed), Ids(ids, {4}, ++seed, 5)}, {}});
    }
    for (DType t : kFloats) {
      cases.push_back({OpSpec::EmbeddingGrad(7), {Random(t, {30, 3}, ++seed), Ids(ids, {30}, ++seed, 7)}, {}});
      KernelContext sharded;
      sharded.row_offset = 3;
      sharded.global_rows = 12;
      sharded.out_shape = std::vector<int64_t>{5, 4};
      cases.push_back(
          {OpSpec::EmbeddingGrad(12), {Random(t, {4, 6, 4}, ++seed), Ids(ids, {4, 6}, ++seed, 12)}, sharded});
      cases.push_back({OpSpec::EmbeddingGrad(4), {Random(t, {0, 3}, ++seed), Ids(ids, {0}, ++seed, 4)}, {}});
      cases.push_back({OpSpec::EmbeddingGrad(300), {Random(t, {64, 2}, ++seed), Ids(ids, {64}, ++seed, 3)}, {}});
    }
  }
  cases.push_back({OpSpec::EmbeddingGrad(3), {Random(DType::kI32, {4, 2}, 1), Ids(DType::kI32, {4}, 2, 3)}, {}});
  cases.push_back({OpSpec::Embedding(), {Random(DType::kF32, {4}, 1), Ids(DType::kI32, {4}, 2, 3)}, {}});
  cases.push_back({OpSpec::Embedding(), {Random(DType::kF32, {4, 2}, 1), Random(DType::kF32, {4}, 2)}, {}});
  return cases;
}

inline std::vector<Case> LossCases() {
  std::vector<Case> cases;
  uint32_t seed = 700;
  for (DType t : kFloats) {
    for (LossReduction r : {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone}) {
      for (DType ids : kIds) {
        cases.push_back(
            {OpSpec::CrossEntropy(r), {Random(t, {4, 3, 11}, ++seed, -8, 8), Ids(ids, {4, 3}, ++seed, 11)}, {}});
        const std::vector<int64_t> gs = r == LossReduction::kNone ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{};
        cases.push_back({OpSpec::CrossEntropyGrad(r),
                         {Random(t, {4, 3, 11}, ++seed, -8, 8), Ids(ids, {4, 3}, ++seed, 11), Random(t, gs, ++seed)},
                         {}});
      }
      KernelContext mean;
      mean.mean_count = 40;
      cases.push_back({OpSpec::CrossEntropy(r), {Random(t, {5, 6}, ++seed), Ids(DType::kI32, {5}, ++seed, 6)}, mean});
      const std::vector<int64_t> gs = r == LossReduction::kNone ? std::vector<int64_t>{5} : std::vector<int64_t>{};
      cases.push_back({OpSpec::CrossEntropyGrad(r),
                       {Random(t, {5, 6}, ++seed), Ids(DType::kI64, {5}, ++seed, 6), Random(t, gs, ++seed)},
                       mean});
      cases.push_back({OpSpec::CrossEntropy(r), {Random(t, {0, 6}, ++seed), Ids(DType::kI32, {0}, ++seed, 6)}, {}});
      cases.push_back(
          {OpSpec::CrossEntropy(r), {WithSpecials(Random(t, {3, 4}, ++seed)), Ids(DType::kI32, {3}, ++seed, 4)}, {}});
    }
  }
  cases.push_back(
      {OpSpec::CrossEntropy(LossReduction::kMean), {Random(DType::kF32, {4, 3}, 1), Random(DType::kF32, {4}, 2)}, {}});
  cases.push_back(
      {OpSpec::CrossEntropy(LossReduction::kMean), {Random(DType::kF32, {4, 3}, 1), Ids(DType::kI32, {3}, 2, 3)}, {}});
  return cases;
}

inline std::vector<Case> MatmulCases() {
  std::vector<Case> cases;
  uint32_t seed = 800;
  const std::vector<ShapePair> shapes = {
      {{2, 3}, {3, 4}}, {{4, 5, 6}, {4, 6, 7}}, {{4, 5, 6}, {6, 7}},  {{5, 6}, {3, 6, 2}}, {{2, 1, 3, 4}, {5, 4, 2}},
      {{0, 3}, {3, 2}}, {{2, 0}, {0, 3}},       {{3}, {3, 2}},        {{2, 3}, {3}},       {{3}, {3}},
      {{2, 4, 3}, {3}}, {{3}, {5, 3, 2}},       {{70, 80}, {80, 90}}, {{2, 3}, {4, 2}},    {{}, {3}}};
  for (DType t : kFloats) {
    for (const auto& [sa, sb] : shapes)
      cases.push_back({OpSpec::Matmul(), {Random(t, sa, ++seed), Random(t, sb, ++seed)}, {}});
  }
  cases.push_back({OpSpec::Matmul(), {Random(DType::kI32, {2, 2}, 1), Random(DType::kI32, {2, 2}, 2)}, {}});
  cases.push_back({OpSpec::Matmul(), {Random(DType::kF32, {2, 2}, 1), Random(DType::kF64, {2, 2}, 2)}, {}});
  return cases;
}

// Every generator above.
inline std::vector<Case> AllCases() {
  std::vector<Case> all;
  for (const auto& gen : {BinaryCases, UnaryCases, CompareWhereCases, ReduceCases, SoftmaxNormCases, MovementCases,
                          EmbeddingCases, LossCases, MatmulCases}) {
    for (Case& c : gen()) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace meshflow::testing

#endif  // MESHFLOW_OPS_OP_TEST_CASES_H_
