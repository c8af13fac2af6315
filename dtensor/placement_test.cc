#include "meshflow/dtensor/placement.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meshflow {
namespace {

using ::testing::HasSubstr;

TEST(ReduceOpTest, NamesAndParse) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    auto p = ParseReduceOp(ReduceOpName(op));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, op);
  }
  EXPECT_EQ(ReduceOpName(ReduceOp::kSum), "sum");
  EXPECT_EQ(ReduceOpName(ReduceOp::kAvg), "avg");
  EXPECT_EQ(ReduceOpName(ReduceOp::kMax), "max");
  EXPECT_EQ(ReduceOpName(ReduceOp::kMin), "min");
  EXPECT_EQ(*ParseReduceOp("mean"), ReduceOp::kAvg);
  auto bad = ParseReduceOp("prod");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown reduce op 'prod'"));
}

TEST(PlacementTest, Predicates) {
  const Placement s = Shard{1}, r = Replicate{}, p = Partial{ReduceOp::kMax};
  EXPECT_TRUE(IsShard(s));
  EXPECT_TRUE(IsShard(s, 1));
  EXPECT_FALSE(IsShard(s, 0));
  EXPECT_FALSE(IsShard(r));
  EXPECT_FALSE(IsShard(p, 0));
  EXPECT_TRUE(IsReplicate(r));
  EXPECT_FALSE(IsReplicate(s));
  EXPECT_TRUE(IsPartial(p));
  EXPECT_FALSE(IsPartial(r));
  EXPECT_EQ(s, Placement(Shard{1}));
  EXPECT_NE(s, Placement(Shard{0}));
  EXPECT_NE(p, Placement(Partial{}));
  EXPECT_EQ(Placement(Partial{}), Placement(Partial{ReduceOp::kSum}));
}

TEST(PlacementTest, Print) {
  EXPECT_EQ(ToString(Placement(Shard{0})), "S(0)");
  EXPECT_EQ(ToString(Placement(Shard{12})), "S(12)");
  EXPECT_EQ(ToString(Placement(Replicate{})), "R");
  EXPECT_EQ(ToString(Placement(Partial{})), "P(sum)");
  EXPECT_EQ(ToString(Placement(Partial{ReduceOp::kAvg})), "P(avg)");
  EXPECT_EQ(ToString(Placement(Partial{ReduceOp::kMax})), "P(max)");
  EXPECT_EQ(ToString(Placement(Partial{ReduceOp::kMin})), "P(min)");
  const Placements ps = {Shard{0}, Replicate{}, Partial{}};
  EXPECT_EQ(ToString(ps), "S(0),R,P(sum)");
  EXPECT_EQ(ToString(Placements{}), "");
}

TEST(PlacementTest, ParseEachForm) {
  struct Case {
    const char* text;
    Placement want;
  };
  const Case cases[] = {
      {"S(0)", Shard{0}},
      {"S(3)", Shard{3}},
      {"S(10)", Shard{10}},
      {"R", Replicate{}},
      {"P", Partial{ReduceOp::kSum}},
      {"P(sum)", Partial{ReduceOp::kSum}},
      {"P(avg)", Partial{ReduceOp::kAvg}},
      {"P(mean)", Partial{ReduceOp::kAvg}},
      {"P(max)", Partial{ReduceOp::kMax}},
      {"P(min)", Partial{ReduceOp::kMin}},
      {" S ( 1 ) ", Shard{1}},
      {"\tR\n", Replicate{}},
      {"P( max )", Partial{ReduceOp::kMax}},
  };
  for (const Case& c : cases) {
    auto p = ParsePlacement(c.text);
    ASSERT_TRUE(p.ok()) << c.text << ": " << p.status();
    EXPECT_EQ(*p, c.want) << c.text;
  }
}

TEST(PlacementTest, RoundTrip) {
  const Placements all = {Shard{0}, Shard{1}, Shard{7}, Replicate{}, Partial{ReduceOp::kSum},
                          Partial{ReduceOp::kAvg}, Partial{ReduceOp::kMax}, Partial{ReduceOp::kMin}};
  for (const Placement& p : all) {
    auto q = ParsePlacement(ToString(p));
    ASSERT_TRUE(q.ok()) << ToString(p);
    EXPECT_EQ(*q, p);
  }
  // Every list of length 1..3 over `all`.
  for (const Placement& a : all) {
    for (const Placement& b : all) {
      for (const Placement& c : all) {
        const Placements ps = {a, b, c};
        auto q = ParsePlacements(ToString(ps));
        ASSERT_TRUE(q.ok()) << ToString(ps);
        EXPECT_EQ(*q, ps);
        EXPECT_EQ(ToString(*q), ToString(ps));
      }
    }
  }
}

TEST(PlacementTest, ParseList) {
  auto p = ParsePlacements("S(0),R,P(sum)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (Placements{Shard{0}, Replicate{}, Partial{ReduceOp::kSum}}));
  auto q = ParsePlacements("  S( 1 ) ,  P ,R\t");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, (Placements{Shard{1}, Partial{}, Replicate{}}));
  auto one = ParsePlacements("R");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, Placements{Replicate{}});
}

void ExpectBad(std::string_view text, std::string_view want_substr) {
  auto p = ParsePlacement(text);
  ASSERT_FALSE(p.ok()) << "'" << text << "' parsed";
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr(std::string(want_substr))) << text;
  EXPECT_THAT(p.status().message(), HasSubstr("bad placement '" + std::string(text) + "'"));
}

TEST(PlacementTest, ParseErrors) {
  ExpectBad("S(x)", "shard dim is not an integer");
  ExpectBad("S()", "shard dim is not an integer");
  ExpectBad("S(1x)", "shard dim is not an integer");
  ExpectBad("S(1.0)", "shard dim is not an integer");
  ExpectBad("S(+1)", "shard dim is not an integer");
  ExpectBad("S(99999999999)", "shard dim is not an integer");
  ExpectBad("S(-1)", "shard dim is negative");
  ExpectBad("Q", "unknown form");
  ExpectBad("r", "unknown form");
  ExpectBad("S", "unknown form");
  ExpectBad("S0", "unknown form");
  ExpectBad("S(0", "unknown form");
  ExpectBad("R(0)", "unknown form");
  ExpectBad("S(0))", "not an integer");
  ExpectBad("", "empty");
  ExpectBad("   ", "empty");
  ExpectBad("P(foo)", "unknown reduce op 'foo'");
  ExpectBad("P()", "unknown reduce op ''");
  ExpectBad("P(SUM)", "unknown reduce op");
}

TEST(PlacementTest, ParseListErrors) {
  auto e = ParsePlacements("");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("empty placements list"));
  EXPECT_FALSE(ParsePlacements("  ").ok());

  auto e2 = ParsePlacements("S(0),,R");
  ASSERT_FALSE(e2.ok());
  EXPECT_THAT(e2.status().message(), HasSubstr("bad placement ''"));
  EXPECT_THAT(e2.status().message(), HasSubstr("empty"));

  auto e3 = ParsePlacements("S(0),R,");
  ASSERT_FALSE(e3.ok());
  EXPECT_THAT(e3.status().message(), HasSubstr("empty"));
  EXPECT_FALSE(ParsePlacements(",R").ok());

  auto e4 = ParsePlacements("S(0),S(x)");
  ASSERT_FALSE(e4.ok());
  EXPECT_THAT(e4.status().message(), HasSubstr("bad placement 'S(x)'"));

  auto e5 = ParsePlacements("R,P(foo)");
  ASSERT_FALSE(e5.ok());
  EXPECT_THAT(e5.status().message(), HasSubstr("'foo'"));

  auto e6 = ParsePlacements("S(0,1)");
  ASSERT_FALSE(e6.ok());
  EXPECT_THAT(e6.status().message(), HasSubstr("not an integer"));

  EXPECT_FALSE(ParsePlacements("S(0)R").ok());
  EXPECT_FALSE(ParsePlacements("S(-1),R").ok());
}

}  // namespace
}  // namespace meshflow
