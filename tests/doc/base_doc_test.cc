// Every example in base/status.h, base/checksum.h, base/parse.h, base/strings.h, base/cli.h,
// base/hash.h, base/byte_io.h and base/lcg.h is compiled here; keep them identical.
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshflow/base/byte_io.h"
#include "meshflow/base/checksum.h"
#include "meshflow/base/cli.h"
#include "meshflow/base/hash.h"
#include "meshflow/base/lcg.h"
#include "meshflow/base/parse.h"
#include "meshflow/base/status.h"
#include "meshflow/base/strings.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

using ::testing::StartsWith;

// base/status.h
TEST(StatusDocTest, ErrorNamesTheValue) {
  StatusOr<DeviceMesh> mesh = DeviceMesh::Create({2, 0});
  if (!mesh.ok()) std::cerr << mesh.status();   // INVALID_ARGUMENT: mesh dim 1 has size 0 ...

  ASSERT_FALSE(mesh.ok());
  std::ostringstream printed;
  printed << mesh.status();
  EXPECT_THAT(printed.str(), StartsWith("INVALID_ARGUMENT: mesh dim 1 has size 0"));
}

// base/status.h: MF_RETURN_IF_ERROR returns the error of a Status / StatusOr expression,
// MF_ASSIGN_OR_RETURN unwraps a StatusOr or returns its error.
Status ReturnIfError(const Status& s) {
  MF_RETURN_IF_ERROR(s);
  return OutOfRangeError("reached the end");
}
Status ReturnIfErrorOfStatusOr(const StatusOr<int>& s) {
  MF_RETURN_IF_ERROR(s);
  return OutOfRangeError("reached the end");
}
StatusOr<int> AssignOrReturn(const StatusOr<int>& s) {
  MF_ASSIGN_OR_RETURN(int v, s);
  return v + 1;
}

TEST(StatusDocTest, HelperMacros) {
  EXPECT_EQ(ReturnIfError(NotFoundError("x")), NotFoundError("x"));
  EXPECT_EQ(ReturnIfError(Status::Ok()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ReturnIfErrorOfStatusOr(StatusOr<int>(DataLossError("y"))), DataLossError("y"));
  EXPECT_EQ(ReturnIfErrorOfStatusOr(StatusOr<int>(1)).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(AssignOrReturn(StatusOr<int>(InternalError("z"))).status(), InternalError("z"));
  EXPECT_EQ(AssignOrReturn(StatusOr<int>(41)).value(), 42);
}

// base/checksum.h
TEST(ChecksumDocTest, Crc32cAndExtend) {
  const std::string text = "123456789", more = "abc";
  const std::span<const std::byte> bytes = std::as_bytes(std::span(text));
  const std::span<const std::byte> more_bytes = std::as_bytes(std::span(more));

  uint32_t c = Crc32c(bytes);                  // 0xE3069283 for the 9 bytes "123456789"
  uint32_t c2 = Crc32cExtend(c, more_bytes);   // == Crc32c(bytes followed by more_bytes)

  EXPECT_EQ(c, 0xE3069283u);
  const std::string both = text + more;
  EXPECT_EQ(c2, Crc32c(std::as_bytes(std::span(both))));
}

// base/parse.h
Status ParseExample() {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> mesh, ParseIntList("2x4", 'x', "mesh"));  // {2, 4}
  MF_ASSIGN_OR_RETURN(int64_t n, ParseInt64("128", "--iters"));

  EXPECT_EQ(mesh, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(n, 128);
  return Status::Ok();
}

TEST(ParseDocTest, Example) { EXPECT_EQ(ParseExample(), Status::Ok()); }

// base/strings.h
TEST(StringsDocTest, ListString) {
  EXPECT_EQ(ListString(std::vector<int64_t>{5, 2}), "[5,2]");
  EXPECT_EQ(ListString(std::vector<int>{}), "[]");
  std::vector<int> ranks_0_to_99(100);
  for (int i = 0; i < 100; ++i) ranks_0_to_99[static_cast<size_t>(i)] = i;
  EXPECT_EQ(ElidedListString(ranks_0_to_99, 4), "[0,1,...,98,99] (100 entries)");
  EXPECT_EQ(SplitString("dp,,tp", ','), (std::vector<std::string_view>{"dp", "", "tp"}));
}

// base/cli.h. The example's lines come from two kinds of functions: a main() (returns an exit
// code) and a function returning Status.
constexpr char kUsage[] = "usage: comm [--op all_gather|all_reduce]\n";

int HelpExample(int argc, const char* const* argv) {
  if (HasHelpFlag(argc, argv)) { std::fputs(kUsage, stdout); return 0; }  // --help or -h
  return 2;
}

Status ParseChoiceExample(std::string_view value, size_t* out) {
  MF_ASSIGN_OR_RETURN(size_t op, ParseChoice("--op", value, {"all_gather", "all_reduce"}));
  // INVALID_ARGUMENT "unknown --op 'foo'; expected one of all_gather, all_reduce"
  *out = op;
  return Status::Ok();
}

Status UnknownArgumentExample(std::string_view arg) {
  return UnknownArgumentError("comm", arg);  // "unknown flag '--bogus'; see 'comm --help'"
}

TEST(CliDocTest, Example) {
  const char* with_help[] = {"comm", "--op", "all_reduce", "-h"};
  const char* without_help[] = {"comm", "--op", "all_reduce"};
  EXPECT_EQ(HelpExample(4, with_help), 0);
  EXPECT_EQ(HelpExample(3, without_help), 2);

  size_t op = 99;
  EXPECT_EQ(ParseChoiceExample("all_reduce", &op), Status::Ok());
  EXPECT_EQ(op, 1u);
  EXPECT_EQ(ParseChoiceExample("foo", &op).ToString(),
            "INVALID_ARGUMENT: unknown --op 'foo'; expected one of all_gather, all_reduce");
  EXPECT_EQ(UnknownArgumentExample("--bogus").ToString(),
            "INVALID_ARGUMENT: unknown flag '--bogus'; see 'comm --help'");
}

// base/hash.h (shape: a tensor shape).
uint64_t HashExample(const std::vector<int64_t>& shape) {
  uint64_t h = 0x6d657368ull;
  for (int64_t d : shape) HashMix(h, static_cast<uint64_t>(d));
  return h;
}

TEST(HashDocTest, Example) {
  // boost::hash_combine's mixing on 64 bits, one value at a time.
  uint64_t want = 0x6d657368ull;
  for (uint64_t v : {2ull, 3ull}) want ^= v + 0x9e3779b97f4a7c15ull + (want << 6) + (want >> 2);
  EXPECT_EQ(HashExample({2, 3}), want);
  EXPECT_NE(HashExample({2, 3}), HashExample({3, 2}));  // order matters
  EXPECT_NE(HashExample({2, 3}), HashExample({2, 3, 1}));
}

// base/byte_io.h
TEST(ByteIoDocTest, HeaderExample) {
  std::byte header[12];
  StoreLe<uint32_t>(header, 7);
  StoreLe<int64_t>(header + 4, -2);
  uint32_t version = LoadLe<uint32_t>(header);        // 7
  int64_t size = LoadLe<int64_t>(header + 4);         // -2
  std::string out;
  AppendLe<uint16_t>(out, 0x0102);                    // out == "\x02\x01"

  EXPECT_EQ(version, 7u);
  EXPECT_EQ(size, -2);
  EXPECT_EQ(out, "\x02\x01");
}

// base/lcg.h
TEST(Lcg32DocTest, HeaderExample) {
  Lcg32 g = Lcg32::Seeded(3, 7);
  uint32_t token = g.Next24() % 16;      // an integer in [0, 16)
  double w = 0.1 * g.NextSymmetric();    // a value in [-0.1, 0.1)

  EXPECT_LT(token, 16u);
  EXPECT_GE(w, -0.1);
  EXPECT_LT(w, 0.1);
}

}  // namespace
}  // namespace meshflow
