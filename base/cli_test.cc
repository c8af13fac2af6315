#include "meshflow/base/cli.h"

#include <gtest/gtest.h>

namespace meshflow {
namespace {

TEST(CliTest, IsHelpFlag) {
  EXPECT_TRUE(IsHelpFlag("--help"));
  EXPECT_TRUE(IsHelpFlag("-h"));
  EXPECT_FALSE(IsHelpFlag("--help=1"));
  EXPECT_FALSE(IsHelpFlag("help"));
  EXPECT_FALSE(IsHelpFlag("-help"));
}

TEST(CliTest, HasHelpFlagSkipsTheProgramName) {
  const char* with[] = {"prog", "--bogus", "-h"};
  const char* without[] = {"-h", "--op", "all_reduce"};
  EXPECT_TRUE(HasHelpFlag(3, with));
  EXPECT_FALSE(HasHelpFlag(3, without));
  EXPECT_FALSE(HasHelpFlag(1, with));
}

TEST(CliTest, ParseChoiceReturnsTheIndex) {
  EXPECT_EQ(*ParseChoice("--op", "a", {"a", "b", "c"}), 0u);
  EXPECT_EQ(*ParseChoice("--op", "c", {"a", "b", "c"}), 2u);
}

TEST(CliTest, ParseChoiceNamesTheFlagTheValueAndTheChoices) {
  const StatusOr<size_t> r = ParseChoice("--op", "foo", {"all_gather", "all_reduce"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "unknown --op 'foo'; expected one of all_gather, all_reduce");
  EXPECT_EQ(ParseChoice("-c", "", {"0", "1"}).status().message(), "unknown -c ''; expected one of 0, 1");
  EXPECT_EQ(ExpectedOneOf({"x"}), "expected one of x");
}

TEST(CliTest, UnknownArgumentPointsAtHelp) {
  const Status s = UnknownArgumentError("comm", "--bogus");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "unknown flag '--bogus'; see 'comm --help'");
  EXPECT_EQ(UnknownArgumentError("comm", "-x").message(), "unknown flag '-x'; see 'comm --help'");
  EXPECT_EQ(UnknownArgumentError("dtplan", "x").message(), "unexpected argument 'x'; see 'dtplan --help'");
  EXPECT_EQ(UnknownArgumentError("dtplan", "-").message(), "unexpected argument '-'; see 'dtplan --help'");
}

}  // namespace
}  // namespace meshflow
