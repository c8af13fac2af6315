// Rule tests for permute / transpose, reshape, layer / RMS norm, embedding, concat, slice,
// cross-entropy and rank-1 matmul. Each rule is compared whole (factors, kinds, every dim mapping,
// result shape, partial rules) once: that is the contract EnumerateStrategies and the graph
// propagation rely on; ToString pins the readable form; then the error messages.
#include <gtest/gtest.h>

#include "meshflow/ops/sharding_rule.h"

namespace meshflow {
namespace {

constexpr ReduceOp kSum = ReduceOp::kSum;
constexpr FactorKind kPass = FactorKind::kPassThrough;
constexpr FactorKind kRep = FactorKind::kNeedReplication;

std::vector<PartialRule> Select(int n) {
  std::vector<PartialRule> out;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    out.push_back(PartialRule{std::vector<std::optional<ReduceOp>>(static_cast<size_t>(n), op), op});
  }
  return out;
}

TEST(PermuteRule, Whole) {
  std::vector<int64_t> x = {5, 3, 7};
  std::vector<int> perm = {2, 0, -2};
  ShardingRule want{"permute",
                    {{"d0", 5, kPass, kSum}, {"d1", 3, kPass, kSum}, {"d2", 7, kPass, kSum}},
                    {{0, 1, 2}},
                    {2, 0, 1},
                    {7, 5, 3},
                    Select(1)};
  EXPECT_EQ(*PermuteRule(x, perm), want);
  EXPECT_EQ(want.ToString(),
            "permute: [d0,d1,d2] -> [d2,d0,d1] {d0=5 pass_through, d1=3 pass_through, d2=7 pass_through}");
  std::vector<int> dup = {0, 0, 1}, short_perm = {1, 0};
  EXPECT_EQ(PermuteRule(x, dup).status().message(),
            "permute: perm [0,0,1] is not a permutation of the dims of shape [5,3,7] (bad entry 0)");
  EXPECT_EQ(PermuteRule(x, short_perm).status().message(), "permute: perm [1,0] has 2 entries for shape [5,3,7]");
  EXPECT_EQ(*TransposePerm(3, 0, -1), (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(TransposePerm(2, 0, 2).status().message(), "transpose: dims (0, 2) out of range for rank 2");
}

TEST(ReshapeRule, GroupsAndFactors) {
  // [6,4,1,5] -> [2,3,20]: group 0 splits 6 into 2x3, group 1 merges 4x5 into 20; the size-1 dim
  // carries no factor. Major dims tie (g0: 6 <-> 2, g1: 4 <-> 20); minors need replication.
  std::vector<int64_t> x = {6, 4, 1, 5}, shape = {2, -1, 20};
  EXPECT_EQ(ReshapeGroups(x, std::vector<int64_t>{2, 3, 20}),
            (std::vector<ReshapeGroup>{{{0}, {0, 1}}, {{1, 3}, {2}}}));
  ShardingRule want{"reshape",
                    {{"g0", 6, kPass, kSum}, {"g0o1", 3, kRep, kSum}, {"g1", 4, kPass, kSum}, {"g1i1", 5, kRep, kSum}},
                    {{0, 2, kNoFactor, 3}},
                    {0, 1, 2},
                    {2, 3, 20},
                    Select(1)};
  EXPECT_EQ(*ReshapeRule(x, shape), want);
  EXPECT_EQ(want.ToString(),
            "reshape: [g0,g1,1,g1i1] -> [g0,g0o1,g1] {g0=6 pass_through, g0o1=3 need_replication, g1=4 "
            "pass_through, g1i1=5 need_replication}");
  // 1:1 groups are plain pass-through factors.
  std::vector<int64_t> y = {3, 1, 4}, y_to = {3, 4, 1};
  EXPECT_EQ(ReshapeRule(y, y_to)->ToString(),
            "reshape: [d0,1,d1] -> [d0,d1,1] {d0=3 pass_through, d1=4 pass_through}");
  // No elements: everything replicated.
  std::vector<int64_t> e = {0, 3}, e_to = {3, 0};
  EXPECT_EQ(ReshapeRule(e, e_to)->ToString(),
            "reshape: [i0,i1] -> [o0,o1] {i0=0 need_replication, i1=3 need_replication, o0=3 need_replication, "
            "o1=0 need_replication}");
  std::vector<int64_t> bad = {5, -1, -1}, wrong = {7};
  EXPECT_EQ(ReshapeRule(x, bad).status().message(), "reshape: more than one -1 in [5,-1,-1]");
  EXPECT_EQ(ReshapeRule(x, wrong).status().message(),
            "reshape: shape [6,4,1,5] (120 elements) cannot become [7] (7 elements)");
}

TEST(NormRule, WeightAndBiasTied) {
  std::vector<int64_t> x = {3, 5, 4}, w = {5, 4};
  ShardingRule want{"layer_norm",
                    {{"d0", 3, kPass, kSum}, {"d1", 5, kRep, kSum}, {"d2", 4, kRep, kSum}},
                    {{0, 1, 2}, {1, 2}, {1, 2}},
                    {0, 1, 2},
                    {3, 5, 4},
                    {}};
  EXPECT_EQ(*NormRule(NormKind::kLayerNorm, x, 2, &w, &w), want);
  std::vector<Strategy> s = EnumerateStrategies(want, 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].ToString(), "{S(0)} x {R} x {R} -> S(0)");
  std::vector<int64_t> bad_w = {4};
  EXPECT_EQ(NormRule(NormKind::kRmsNorm, x, 2, &bad_w, nullptr).status().message(),
            "rms_norm: weight shape [4] differs from the normalized dims [5,4] of [3,5,4]");
  EXPECT_EQ(NormRule(NormKind::kRmsNorm, x, 4, nullptr, nullptr).status().message(),
            "rms_norm: normalized_ndim 4 out of range [1, 3] for shape [3,5,4]");
}

TEST(EmbeddingRule, Whole) {
  std::vector<int64_t> table = {7, 5}, ids = {3, 2};
  ShardingRule want{"embedding",
                    {{"v", 7, FactorKind::kContracting, kSum},
                     {"d", 5, kPass, kSum},
                     {"i0", 3, kPass, kSum},
                     {"i1", 2, kPass, kSum}},
                    {{0, 1}, {2, 3}},
                    {2, 3, 1},
                    {3, 2, 5},
                    {PartialRule{{ReduceOp::kSum, std::nullopt}, ReduceOp::kSum},
                     PartialRule{{ReduceOp::kAvg, std::nullopt}, ReduceOp::kAvg},
                     PartialRule{{ReduceOp::kMax, std::nullopt}, ReduceOp::kMax},
                     PartialRule{{ReduceOp::kMin, std::nullopt}, ReduceOp::kMin}}};
  EXPECT_EQ(*EmbeddingRule(table, ids), want);
  // Row-sharded table -> Partial(sum); column-sharded -> Shard on the last result dim.
  std::vector<Strategy> s = EnumerateStrategies(want, 1);
  EXPECT_EQ(s[1].ToString(), "{S(0)} x {R} -> P(sum)");
  EXPECT_EQ(s[2].ToString(), "{S(1)} x {R} -> S(2)");
  EXPECT_EQ(s[3].ToString(), "{R} x {S(0)} -> S(0)");
  std::vector<int64_t> bad = {7};
  EXPECT_EQ(EmbeddingRule(bad, ids).status().message(), "embedding: table must be [V, D], got shape [7]");
}

TEST(ConcatRule, Whole) {
  std::vector<int64_t> a = {2, 3}, b = {4, 3}, c = {1, 3};
  const std::vector<int64_t>* shapes[3] = {&a, &b, &c};
  ShardingRule want{"concat",
                    {{"d1", 3, kPass, kSum},
                     {"c0", 2, kRep, kSum},
                     {"c1", 4, kRep, kSum},
                     {"c2", 1, kRep, kSum},
                     {"c", 7, kRep, kSum}},
                    {{1, 0}, {2, 0}, {3, 0}},
                    {4, 0},
                    {7, 3},
                    Select(3)};
  EXPECT_EQ(*ConcatRule(shapes, -2), want);
  std::vector<int64_t> d = {2, 4};
  const std::vector<int64_t>* bad[2] = {&a, &d};
  EXPECT_EQ(ConcatRule(bad, 0).status().message(),
            "concat: operand 1 shape [2,4] does not match operand 0 shape [2,3] outside dim 0");
  EXPECT_EQ(ConcatRule(bad, 2).status().message(), "concat: dim 2 out of range for shape [2,3]");
  EXPECT_EQ(ConcatRule({}, 0).status().message(), "concat: no operands");
}

TEST(SliceRule, Whole) {
  std::vector<int64_t> x = {7, 5};
  // The sliced dim's factor ties input and result (whether a Shard of it is exact depends on
  // the mesh: CheckStrategyOnMesh).
  ShardingRule want{"slice", {{"d0", 7, kPass, kSum}, {"d1", 5, kPass, kSum}}, {{0, 1}}, {0, 1}, {7, 2}, Select(1)};
  EXPECT_EQ(*SliceRule(x, -1, -4, 10, 2), want);  // columns 1, 3
  const SliceRange even{0, 0, 2, 4};               // [0:8:2] of 8
  EXPECT_EQ(SliceResultRange(even, 0, 4), (Interval{0, 2}));
  EXPECT_EQ(SliceResultRange(even, 4, 8), (Interval{2, 4}));
  EXPECT_EQ(SliceResultRange(even, 3, 4), (Interval{2, 2}));
  const SliceRange tail{0, 5, 1, 2};  // [5:7] of 7
  EXPECT_EQ(SliceResultRange(tail, 0, 4), (Interval{0, 0}));
  EXPECT_EQ(SliceResultRange(tail, 4, 7), (Interval{0, 2}));
  EXPECT_EQ(*NormalizeSlice(x, 0, 5, 2, 1), (SliceRange{0, 5, 1, 0}));
  EXPECT_EQ(*NormalizeSlice(x, 0, -100, 100, 3), (SliceRange{0, 0, 3, 3}));
  EXPECT_EQ(SliceRule(x, 0, 0, 5, 0).status().message(), "slice: step 0 must be >= 1");
  EXPECT_EQ(SliceRule(x, 2, 0, 5, 1).status().message(), "slice: dim 2 out of range for shape [7,5]");
}

TEST(CrossEntropyRule, MeanAndNone) {
  std::vector<int64_t> logits = {7, 5}, targets = {7};
  constexpr FactorKind kContract = FactorKind::kContracting;
  ShardingRule mean{"cross_entropy",
                    {{"b0", 7, FactorKind::kReduction, kSum}, {"c", 5, kContract, kSum}},
                    {{0, 1}, {0}},
                    {},
                    {},
                    {}};
  EXPECT_EQ(*CrossEntropyRule(logits, targets, LossReduction::kMean), mean);
  std::vector<Strategy> s = EnumerateStrategies(mean, 1);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].ToString(), "{S(0)} x {S(0)} -> P(sum)");
  EXPECT_EQ(s[2].ToString(), "{S(1)} x {R} -> P(sum)");  // vocab-parallel
  ShardingRule none{"cross_entropy", {{"b0", 7, kPass, kSum}, {"c", 5, kContract, kSum}}, {{0, 1}, {0}}, {0}, {7}, {}};
  EXPECT_EQ(*CrossEntropyRule(logits, targets, LossReduction::kNone), none);
  std::vector<int64_t> bad = {5};
  EXPECT_EQ(CrossEntropyRule(logits, bad, LossReduction::kSum).status().message(),
            "cross_entropy: targets shape [5] must be the logits shape [7,5] without its last dim");
}

TEST(MatmulRule, RankOne) {
  std::vector<int64_t> v = {7}, b = {2, 7, 3}, a = {5, 7};
  ShardingRule vb{"matmul",
                  {{"b0", 2, kPass, kSum}, {"k", 7, FactorKind::kContracting, kSum}, {"n", 3, kPass, kSum}},
                  {{1}, {0, 1, 2}},
                  {0, 2},
                  {2, 3},
                  {PartialRule{{kSum, std::nullopt}, kSum}, PartialRule{{std::nullopt, kSum}, kSum}}};
  EXPECT_EQ(*MatmulRule(v, b), vb);
  EXPECT_EQ(MatmulRule(a, v)->ToString(), "matmul: [m,k],[k] -> [m] {m=5 pass_through, k=7 contracting(sum)}");
  EXPECT_EQ(MatmulRule(v, v)->ToString(), "matmul: [k],[k] -> [] {k=7 contracting(sum)}");
  EXPECT_EQ(MatmulRule(v, v)->result_shape, std::vector<int64_t>{});
}

}  // namespace
}  // namespace meshflow
