#include "meshflow/ops/sharding_rule.h"

#include <gtest/gtest.h>

namespace meshflow {
namespace {

constexpr ReduceOp kSum = ReduceOp::kSum;
using K = MeshDimAssignment::Kind;

// The rule of matmul [5,7] x [7,3], written out by hand.
ShardingRule Matmul573() {
  return ShardingRule{"matmul",
                      {{"m", 5, FactorKind::kPassThrough, kSum},
                       {"k", 7, FactorKind::kContracting, kSum},
                       {"n", 3, FactorKind::kPassThrough, kSum}},
                      {{0, 1}, {1, 2}},
                      {0, 2},
                      {5, 3},
                      {PartialRule{{kSum, std::nullopt}, kSum}, PartialRule{{std::nullopt, kSum}, kSum}}};
}

// The whole rule is compared at once: factor sizes, kinds and every dim mapping are the contract
// the strategy enumerator relies on.
TEST(MatmulRule, TwoD) {
  std::vector<int64_t> a = {5, 7}, b = {7, 3};
  const ShardingRule want = Matmul573();
  EXPECT_EQ(*MatmulRule(a, b), want);
  EXPECT_EQ(MatmulRule(a, b)->ToString(),
            "matmul: [m,k],[k,n] -> [m,n] {m=5 pass_through, k=7 contracting(sum), n=3 pass_through}");
}

TEST(LocalWorkPoints, MatmulPerStrategy) {
  std::vector<int64_t> a = {5, 7}, b = {7, 3};
  const ShardingRule rule = *MatmulRule(a, b);
  const std::vector<Strategy> all = EnumerateStrategies(rule, 1);
  ASSERT_EQ(all.size(), 6u);
  const std::vector<int64_t> mesh2 = {2};
  // R; S(m): ceil(5/2) = 3; S(k): ceil(7/2) = 4; S(n): ceil(3/2) = 2; the two Partial rules: all.
  std::vector<double> got;
  for (const Strategy& s : all) got.push_back(LocalWorkPoints(rule, s, mesh2));
  EXPECT_EQ(got, (std::vector<double>{105, 3 * 7 * 3, 5 * 4 * 3, 5 * 7 * 2, 105, 105}));
  // Two mesh dims sharding m (3 and 2 ranks): ceil(5 / 6) = 1; k over 4 then n over 3 ranks.
  const std::vector<int64_t> mesh32 = {3, 2};
  const Strategy mm = *StrategyFor(rule, std::vector<MeshDimAssignment>{{K::kFactor, 0}, {K::kFactor, 0}});
  EXPECT_EQ(LocalWorkPoints(rule, mm, mesh32), 1 * 7 * 3);
  const std::vector<int64_t> mesh43 = {4, 3};
  const Strategy kn = *StrategyFor(rule, std::vector<MeshDimAssignment>{{K::kFactor, 1}, {K::kFactor, 2}});
  EXPECT_EQ(LocalWorkPoints(rule, kn, mesh43), 5 * 2 * 1);
}

TEST(LocalWorkPoints, EmptyFactorIsNoWork) {
  std::vector<int64_t> a = {0, 7}, b = {7, 3};
  const ShardingRule rule = *MatmulRule(a, b);
  const std::vector<int64_t> mesh = {4};
  EXPECT_EQ(LocalWorkPoints(rule, EnumerateStrategies(rule, 1)[0], mesh), 0);
}

TEST(MatmulRule, BatchBroadcast) {
  // a [2,1,5,7] x b [3,7,4]: batch [2,3]; a's size-1 batch dim and b's missing dim are broadcast.
  std::vector<int64_t> a = {2, 1, 5, 7}, b = {3, 7, 4};
  StatusOr<ShardingRule> r = MatmulRule(a, b);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->operand_dims, (std::vector<std::vector<int>>{{0, kNoFactor, 2, 3}, {1, 3, 4}}));
  EXPECT_EQ(r->result_dims, (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(r->result_shape, (std::vector<int64_t>{2, 3, 5, 4}));
}

TEST(MatmulRule, Errors) {
  std::vector<int64_t> a = {5, 7}, b = {6, 3}, v = {7};
  EXPECT_EQ(MatmulRule(a, b).status().message(),
            "matmul: contracting sizes differ: a [5,7] has k = 7, b [6,3] has k = 6");
  std::vector<int64_t> s0 = {};
  EXPECT_EQ(MatmulRule(a, s0).status().message(), "matmul: operands need rank >= 1, got shapes [5,7] and []");
  std::vector<int64_t> c = {2, 5, 7}, d = {3, 7, 3};
  EXPECT_FALSE(MatmulRule(c, d).ok());
}

TEST(BinaryRule, Broadcast) {
  std::vector<int64_t> a = {5, 1}, b = {7};
  StatusOr<ShardingRule> r = BinaryRule(BinaryOp::kMul, a, b);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ToString(), "mul: [d0,1],[d1] -> [d0,d1] {d0=5 pass_through, d1=7 pass_through}");
  EXPECT_EQ(r->partial_rules,
            (std::vector<PartialRule>{{{kSum, std::nullopt}, kSum}, {{std::nullopt, kSum}, kSum}}));
  std::vector<int64_t> c = {5, 2};
  EXPECT_EQ(BinaryRule(BinaryOp::kAdd, c, b).status().message(),
            "add: shapes [5,2] and [7] do not broadcast (sizes 2 vs 7 at broadcast dim 1)");
  EXPECT_EQ(BinaryRule(BinaryOp::kDiv, a, b)->partial_rules,
            (std::vector<PartialRule>{{{kSum, std::nullopt}, kSum}}));
}

TEST(UnaryRule, Linearity) {
  std::vector<int64_t> x = {4};
  EXPECT_EQ(UnaryRule(UnaryOp::kScale, x).partial_rules.size(), 1u);
  EXPECT_TRUE(UnaryRule(UnaryOp::kExp, x).partial_rules.empty());
  EXPECT_TRUE(UnaryRule(UnaryOp::kRelu, x).partial_rules.empty());
}

TEST(ReduceRule, KeepdimAndOps) {
  std::vector<int64_t> x = {4, 6, 2};
  std::vector<int> dims = {-1, 0};
  ShardingRule want{"max",
                    {{"d0", 4, FactorKind::kReduction, ReduceOp::kMax},
                     {"d1", 6, FactorKind::kPassThrough, ReduceOp::kMax},
                     {"d2", 2, FactorKind::kReduction, ReduceOp::kMax}},
                    {{0, 1, 2}},
                    {kNoFactor, 1, kNoFactor},
                    {1, 6, 1},
                    {PartialRule{{ReduceOp::kMax}, ReduceOp::kMax}}};
  EXPECT_EQ(*ReduceRule(ReduceKind::kMax, x, dims, /*keepdim=*/true), want);
  StatusOr<ShardingRule> mean = ReduceRule(ReduceKind::kMean, x, dims, false);
  EXPECT_EQ(mean->result_dims, (std::vector<int>{1}));
  EXPECT_EQ(mean->factors[0].reduce_op, kSum);
  std::vector<int> bad = {3}, rep = {1, -2};
  EXPECT_EQ(ReduceRule(ReduceKind::kSum, x, bad, false).status().message(),
            "reduce: dim 3 out of range for shape [4,6,2]");
  EXPECT_EQ(ReduceRule(ReduceKind::kSum, x, rep, false).status().message(),
            "reduce: dim -2 repeated for shape [4,6,2]");
  std::vector<int64_t> empty = {0, 3};
  std::vector<int> d0 = {0};
  EXPECT_FALSE(ReduceRule(ReduceKind::kMax, empty, d0, false).ok());
  EXPECT_TRUE(ReduceRule(ReduceKind::kSum, empty, d0, false).ok());
}

TEST(SoftmaxRule, DimNeedsReplication) {
  std::vector<int64_t> x = {4, 6};
  StatusOr<ShardingRule> r = SoftmaxRule(false, x, -1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->factors[1].kind, FactorKind::kNeedReplication);
  // 1-D mesh: Replicate or S(0) only.
  std::vector<Strategy> s = EnumerateStrategies(*r, 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].ToString(), "{S(0)} -> S(0)");
  EXPECT_EQ(SoftmaxRule(true, x, 2).status().message(), "log_softmax: dim 2 out of range for shape [4,6]");
}

// RuleBuilder: rules built a factor at a time equal the hand-built ShardingRule structs.
TEST(RuleBuilder, MatmulEqualsHandBuilt) {
  const ShardingRule want = Matmul573();
  // The example of the RuleBuilder comment (sharding_rule.h).
  StatusOr<ShardingRule> got = RuleBuilder("matmul", {2, 2}, {5, 3})
                                   .AddFactor("m", 5, FactorKind::kPassThrough, {0, kNoDim}, 0)
                                   .AddFactor("k", 7, FactorKind::kContracting, {1, 0}, kNoDim)
                                   .AddFactor("n", 3, FactorKind::kPassThrough, {kNoDim, 1}, 1)
                                   .AddPartialRule({{ReduceOp::kSum, std::nullopt}, ReduceOp::kSum})
                                   .AddPartialRule({{std::nullopt, ReduceOp::kSum}, ReduceOp::kSum})
                                   .Build();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
  EXPECT_EQ(*got, *MatmulRule(std::vector<int64_t>{5, 7}, std::vector<int64_t>{7, 3}));
}

TEST(RuleBuilder, BroadcastAndReductionEqualHandBuilt) {
  // [3,1] + [4] -> [3,4]: the size-1 dim of a and the missing dim of b carry no factor.
  const std::vector<int64_t> a = {3, 1}, b = {4}, out = {3, 4};
  ShardingRule want_add{"add",
                        {{"d0", 3, FactorKind::kPassThrough, kSum}, {"d1", 4, FactorKind::kPassThrough, kSum}},
                        {{0, kNoFactor}, {1}},
                        {0, 1},
                        {3, 4},
                        {PartialRule{{kSum, kSum}, kSum}}};
  StatusOr<ShardingRule> add = RuleBuilder("add", {2, 1}, out)
                                   .AddBroadcastFactors("d", out, std::vector<std::span<const int64_t>>{a, b})
                                   .AddPartialRule({{kSum, kSum}, kSum})
                                   .Build();
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ(*add, want_add);
  EXPECT_EQ(*add, *BinaryRule(BinaryOp::kAdd, a, b));

  // max over dim 1 of [2,5], keepdim: the reduced dim is a kNoFactor result dim of size 1.
  ShardingRule want_max{"max",
                        {{"d0", 2, FactorKind::kPassThrough, ReduceOp::kMax},
                         {"d1", 5, FactorKind::kReduction, ReduceOp::kMax}},
                        {{0, 1}},
                        {0, kNoFactor},
                        {2, 1},
                        {PartialRule{{ReduceOp::kMax}, ReduceOp::kMax}}};
  StatusOr<ShardingRule> max = RuleBuilder("max", {2}, {2, 1})
                                   .AddFactor("d0", 2, FactorKind::kPassThrough, {0}, 0, ReduceOp::kMax)
                                   .AddFactor("d1", 5, FactorKind::kReduction, {1}, kNoDim, ReduceOp::kMax)
                                   .AddPartialRule({{ReduceOp::kMax}, ReduceOp::kMax})
                                   .Build();
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_EQ(*max, want_max);
  EXPECT_EQ(*max, *ReduceRule(ReduceKind::kMax, std::vector<int64_t>{2, 5}, std::vector<int>{1}, true));

  // Select partial rules: {P(op), P(op)} -> P(op) for sum, avg, max, min.
  StatusOr<ShardingRule> sel = RuleBuilder("concat", {1, 1}, {5})
                                   .AddFactor("c0", 2, FactorKind::kNeedReplication, {0, kNoDim}, kNoDim)
                                   .AddFactor("c1", 3, FactorKind::kNeedReplication, {kNoDim, 0}, kNoDim)
                                   .AddFactor("c", 5, FactorKind::kNeedReplication, {kNoDim, kNoDim}, 0)
                                   .AddSelectPartialRules()
                                   .Build();
  ASSERT_TRUE(sel.ok()) << sel.status();
  const std::vector<int64_t> s0 = {2}, s1 = {3};
  const std::vector<const std::vector<int64_t>*> shapes = {&s0, &s1};
  EXPECT_EQ(*sel, *ConcatRule(shapes, 0));
  ASSERT_EQ(sel->partial_rules.size(), 4u);
  EXPECT_EQ(sel->partial_rules[1], (PartialRule{{ReduceOp::kAvg, ReduceOp::kAvg}, ReduceOp::kAvg}));
}

TEST(RuleBuilder, MisuseNamesTheBadDim) {
  EXPECT_EQ(RuleBuilder("op", {2}, {4}).AddFactor("x", 4, FactorKind::kPassThrough, {2}, 0).Build().status().message(),
            "op: factor 'x' names operand 0 dim 2, out of range for rank 2");
  EXPECT_EQ(RuleBuilder("op", {2}, {4}).AddFactor("x", 4, FactorKind::kPassThrough, {0}, 1).Build().status().message(),
            "op: factor 'x' names result dim 1, out of range for rank 1");
  EXPECT_EQ(RuleBuilder("op", {2}, {4})
                .AddFactor("x", 4, FactorKind::kPassThrough, {0}, 0)
                .AddFactor("y", 4, FactorKind::kPassThrough, {0}, kNoDim)
                .Build()
                .status()
                .message(),
            "op: operand 0 dim 0 is named by factor 'x' and by factor 'y'");
  EXPECT_EQ(
      RuleBuilder("op", {2, 1}, {4}).AddFactor("x", 4, FactorKind::kPassThrough, {0}, 0).Build().status().message(),
      "op: factor 'x' names 1 operand dims for 2 operands");
}

// Every strategy of 5x7 @ 7x3 on a 1-D mesh, in enumeration order.
TEST(EnumerateStrategies, MatmulOneD) {
  std::vector<int64_t> a = {5, 7}, b = {7, 3};
  std::vector<Strategy> s = EnumerateStrategies(*MatmulRule(a, b), 1);
  std::vector<std::string> got;
  for (const Strategy& x : s) got.push_back(x.ToString());
  EXPECT_EQ(got, (std::vector<std::string>{
                     "{R} x {R} -> R",
                     "{S(0)} x {R} -> S(0)",
                     "{S(1)} x {S(0)} -> P(sum)",
                     "{R} x {S(1)} -> S(1)",
                     "{P(sum)} x {R} -> P(sum)",
                     "{R} x {P(sum)} -> P(sum)",
                 }));
  EXPECT_EQ(s[2].assignment, (std::vector<MeshDimAssignment>{{K::kFactor, 1}}));
}

TEST(EnumerateStrategies, MatmulTwoD) {
  std::vector<int64_t> a = {5, 7}, b = {7, 3};
  std::vector<Strategy> s = EnumerateStrategies(*MatmulRule(a, b), 2);
  EXPECT_EQ(s.size(), 36u);  // 6 choices per mesh dim, no mixed Partial ops possible
  // m on both mesh dims: the same factor sharded twice (default order).
  bool found = false;
  for (const Strategy& x : s) found |= x.ToString() == "{S(0),S(0)} x {R,R} -> S(0),S(0)";
  EXPECT_TRUE(found);
  // k and n: a Partial result on mesh dim 0 and a Shard on mesh dim 1.
  found = false;
  for (const Strategy& x : s) found |= x.ToString() == "{S(1),R} x {S(0),S(1)} -> P(sum),S(1)";
  EXPECT_TRUE(found);
}

TEST(StrategyFor, MixedPartialOpsDropped) {
  // A synthetic rule with a sum and a max reduction factor: assigning both gives P(sum),P(max).
  ShardingRule r{"mixed",
                 {{"a", 4, FactorKind::kReduction, ReduceOp::kSum}, {"b", 4, FactorKind::kReduction, ReduceOp::kMax}},
                 {{0, 1}},
                 {},
                 {},
                 {}};
  std::vector<MeshDimAssignment> both = {{K::kFactor, 0}, {K::kFactor, 1}};
  EXPECT_FALSE(StrategyFor(r, both).has_value());
  EXPECT_EQ(EnumerateStrategies(r, 2).size(), 9u - 2u);
}

}  // namespace
}  // namespace meshflow
