#include "data/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string_view>
#include <vector>

namespace meshflow {
namespace {

std::vector<std::byte> Bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

TEST(Crc32, KnownVectors) {
  EXPECT_EQ(Crc32({}), 0u);
  EXPECT_EQ(Crc32(Bytes("123456789")), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(Crc32(Bytes("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
}

TEST(Crc32, Streaming) {
  const std::vector<std::byte> all = Bytes("hello, sharded world");
  for (size_t cut = 0; cut <= all.size(); ++cut) {
    const std::span<const std::byte> s(all);
    EXPECT_EQ(Crc32Update(Crc32(s.subspan(0, cut)), s.subspan(cut)), Crc32(s)) << "cut " << cut;
  }
}

TEST(Fnv1a64, KnownVectors) {
  EXPECT_EQ(Fnv1a64({}), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64(Bytes("a")), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64(Bytes("foobar")), 0x85944171f73967e8ull);
}

}  // namespace
}  // namespace meshflow
