#include "meshflow/base/json.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meshflow {
namespace {

using ::testing::HasSubstr;

TEST(JsonWriterTest, NestedObjectsAndArraysInInsertionOrder) {
  JsonWriter w;
  w.BeginObject();
  w.Key("z").Int(1);
  w.Key("a").BeginArray().Int(1).BeginObject().Key("k").Bool(true).EndObject().BeginArray().EndArray().EndArray();
  w.Key("m").BeginObject().EndObject();
  w.Key("n").Null();
  w.Key("f").Bool(false);
  w.EndObject();
  StatusOr<std::string> s = std::move(w).Finish();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, R"({"z":1,"a":[1,{"k":true},[]],"m":{},"n":null,"f":false})");
}

TEST(JsonWriterTest, SpacedStyle) {
  JsonWriter w(JsonStyle::kSpaced);
  w.BeginObject().Key("plan").String("fsdp").Key("dims").Ints(std::vector<int64_t>{1, 2});
  w.Key("bytes").BeginObject().Key("params").Int(8).Key("grads").Int(2).EndObject().EndObject();
  EXPECT_EQ(*std::move(w).Finish(), R"({"plan": "fsdp", "dims": [1, 2], "bytes": {"params": 8, "grads": 2}})");
}

TEST(JsonWriterTest, StringEscapes) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(JsonQuote("\n\r\t\b\f"), R"("\n\r\t\b\f")");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), R"("\u0001\u001f")");
  EXPECT_EQ(JsonQuote(std::string("\0", 1)), R"("\u0000")");
  EXPECT_EQ(JsonQuote("caf\xc3\xa9 /<>"), "\"caf\xc3\xa9 /<>\"");  // UTF-8 and '/' as they are
  JsonWriter w;
  w.BeginObject().Key("k\"ey").String("v\n").EndObject();
  EXPECT_EQ(*std::move(w).Finish(), R"({"k\"ey":"v\n"})");
}

TEST(JsonWriterTest, IntegersExactly) {
  JsonWriter w;
  w.BeginArray()
      .Int((int64_t{1} << 53) + 1)
      .Int(std::numeric_limits<int64_t>::max())
      .Int(std::numeric_limits<int64_t>::lowest())
      .Int(1000001)
      .Int(0)
      .EndArray();
  EXPECT_EQ(*std::move(w).Finish(), "[9007199254740993,9223372036854775807,-9223372036854775808,1000001,0]");
}

TEST(JsonWriterTest, DoublesShortestRoundTripAndNonFiniteNull) {
  EXPECT_EQ(JsonDouble(0.1), "0.1");
  EXPECT_EQ(JsonDouble(528.0), "528");
  EXPECT_EQ(JsonDouble(1e6), "1e+06");
  EXPECT_EQ(JsonDouble(-0.0), "-0");
  EXPECT_EQ(JsonDouble(2.5e-300), "2.5e-300");
  EXPECT_EQ(JsonDouble(static_cast<double>(0.1f)), "0.10000000149011612");
  EXPECT_EQ(JsonDouble(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonDouble(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonDouble(std::numeric_limits<double>::quiet_NaN()), "null");
  std::mt19937_64 rng(3);
  for (int k = 0; k < 2000; ++k) {
    const double d = std::bit_cast<double>(static_cast<uint64_t>(rng()));
    if (!std::isfinite(d)) continue;
    const std::string s = JsonDouble(d);
    double back = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), back);
    ASSERT_EQ(r.ec, std::errc()) << s;
    EXPECT_EQ(std::bit_cast<uint64_t>(back), std::bit_cast<uint64_t>(d)) << s;
  }
  JsonWriter w;
  w.BeginArray().Double(0.25).Double(std::numeric_limits<double>::infinity()).EndArray();
  EXPECT_EQ(*std::move(w).Finish(), "[0.25,null]");
}

TEST(JsonWriterTest, ScalarTopLevelAndRaw) {
  JsonWriter a;
  a.String("x");
  EXPECT_EQ(*std::move(a).Finish(), "\"x\"");
  JsonWriter b;
  b.BeginArray().Raw("\"inf\"").Raw("1.5").EndArray();
  EXPECT_EQ(*std::move(b).Finish(), R"(["inf",1.5])");
  JsonWriter c;
  c.BeginArray().Ints(std::vector<int>{}).Ints(std::vector<int>{3}).EndArray();
  EXPECT_EQ(*std::move(c).Finish(), "[[],[3]]");
}

TEST(JsonWriterTest, MisuseIsAnError) {
  auto finish = [](JsonWriter& w) { return std::move(w).Finish().status(); };
  {
    JsonWriter w;
    w.BeginObject().Int(1).EndObject();
    Status s = finish(w);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("where a Key is expected"));
  }
  {
    JsonWriter w;
    w.BeginArray().Key("k").EndArray();
    EXPECT_THAT(finish(w).message(), HasSubstr("Key(\"k\") outside an object"));
  }
  {
    JsonWriter w;
    w.BeginObject().Key("a").Key("b");
    EXPECT_THAT(finish(w).message(), HasSubstr("previous key's value"));
  }
  {
    JsonWriter w;
    w.BeginObject().Key("a").EndObject();
    EXPECT_THAT(finish(w).message(), HasSubstr("Key without its value"));
  }
  {
    JsonWriter w;
    w.BeginObject().EndArray();
    EXPECT_THAT(finish(w).message(), HasSubstr("EndArray in an object"));
  }
  {
    JsonWriter w;
    w.BeginArray().EndObject();
    EXPECT_THAT(finish(w).message(), HasSubstr("EndObject in an array"));
  }
  {
    JsonWriter w;
    w.Int(1).Int(2);
    EXPECT_THAT(finish(w).message(), HasSubstr("after the complete top-level value"));
  }
  {
    JsonWriter w;
    w.BeginObject().Key("a").BeginArray();
    EXPECT_THAT(finish(w).message(), HasSubstr("2 object(s) or array(s) still open"));
  }
  {
    JsonWriter w;
    EXPECT_THAT(finish(w).message(), HasSubstr("before any value"));
  }
  {
    JsonWriter w;
    w.EndObject();
    EXPECT_THAT(finish(w).message(), HasSubstr("EndObject with nothing open"));
  }
}

}  // namespace
}  // namespace meshflow
