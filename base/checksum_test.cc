#include "meshflow/base/checksum.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace meshflow {
namespace {

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span<const char>(s.data(), s.size())); }

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c({}), 0u);
  EXPECT_EQ(Crc32c(Bytes("123456789")), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(Crc32c(Bytes(std::string(32, '\0'))), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(Bytes(std::string(32, '\xff'))), 0x62A8AB43u);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const std::string s = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(Crc32cExtend(Crc32c(Bytes(s.substr(0, cut))), Bytes(s.substr(cut))), Crc32c(Bytes(s))) << cut;
  }
}

TEST(Crc32cTest, FastPathMatchesPortable) {
  std::mt19937 rng(7);
  std::vector<std::byte> data(4099);
  for (std::byte& b : data) b = static_cast<std::byte>(rng());
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{4099}}) {
    for (size_t off : {size_t{0}, size_t{3}}) {
      if (off + n > data.size()) continue;
      EXPECT_EQ(Crc32c(std::span<const std::byte>(data.data() + off, n)),
                crc32c_internal::ExtendPortable(0, data.data() + off, n))
          << n << " at " << off << (crc32c_internal::UsesHardware() ? " (hardware)" : " (portable)");
    }
  }
}

}  // namespace
}  // namespace meshflow
