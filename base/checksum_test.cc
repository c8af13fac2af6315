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

// Lengths around the three-stream thresholds of the SSE4.2 path (3 x 256 and 3 x 8192 bytes) and
// the 256-byte steps of the fold path, unaligned starts, and extension from a non-zero CRC; both
// the dispatching Crc32cExtend and the SSE4.2 path alone.
TEST(Crc32cTest, InterleavedStreamsAndFoldMatchPortable) {
  std::mt19937 rng(11);
  std::vector<std::byte> data((size_t{1} << 20) + 64);
  for (std::byte& b : data) b = static_cast<std::byte>(rng());
  for (size_t n : {size_t{255}, size_t{256}, size_t{257}, size_t{263}, size_t{511}, size_t{512}, size_t{513},
                   size_t{767}, size_t{768}, size_t{769}, size_t{775}, size_t{1535}, size_t{24575}, size_t{24576},
                   size_t{24577}, size_t{24576 + 768}, size_t{49151}, size_t{100003}, size_t{1} << 20}) {
    for (size_t off : {size_t{0}, size_t{1}, size_t{5}}) {
      for (uint32_t init : {0u, 0xDEADBEEFu}) {
        const uint32_t want = crc32c_internal::ExtendPortable(init, data.data() + off, n);
        EXPECT_EQ(Crc32cExtend(init, std::span<const std::byte>(data.data() + off, n)), want)
            << n << " at " << off << " from " << init << (crc32c_internal::UsesFold() ? " (fold)" : "");
        EXPECT_EQ(crc32c_internal::ExtendHardwareForTest(init, data.data() + off, n), want)
            << n << " at " << off << " from " << init;
      }
    }
  }
}

// Every length from 0 to 1100 (all fold tails and accumulator counts), random contents.
TEST(Crc32cTest, EveryShortLengthMatchesPortable) {
  std::mt19937 rng(5);
  std::vector<std::byte> data(1200);
  for (std::byte& b : data) b = static_cast<std::byte>(rng());
  for (size_t n = 0; n <= 1100; ++n) {
    EXPECT_EQ(Crc32cExtend(0x12345678u, std::span<const std::byte>(data.data() + 7, n)),
              crc32c_internal::ExtendPortable(0x12345678u, data.data() + 7, n))
        << n;
  }
}

TEST(Crc32cTest, StringIsEightLowerCaseHexDigits) {
  EXPECT_EQ(Crc32cString(0xE3069283u), "0xe3069283");
  EXPECT_EQ(Crc32cString(0), "0x00000000");
}

}  // namespace
}  // namespace meshflow
