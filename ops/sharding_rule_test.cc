#include "meshflow/ops/sharding_rule.h"

#include <gtest/gtest.h>

namespace meshflow {
namespace {

constexpr ReduceOp kSum = ReduceOp::kSum;
using K = MeshDimAssignment::Kind;

// The whole rule is compared at once: factor sizes, kinds and every dim mapping are the contract
// the strategy enumerator relies on.
TEST(MatmulRule, TwoD) {
  std::vector<int64_t> a = {5, 7}, b = {7, 3};
  ShardingRule want{"matmul",
                    {{"m", 5, FactorKind::kPassThrough, kSum},
                     {"k", 7, FactorKind::kContracting, kSum},
                     {"n", 3, FactorKind::kPassThrough, kSum}},
                    {{0, 1}, {1, 2}},
                    {0, 2},
                    {5, 3},
                    {PartialRule{{kSum, std::nullopt}, kSum}, PartialRule{{std::nullopt, kSum}, kSum}}};
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
