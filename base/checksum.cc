#include "meshflow/base/checksum.h"

#include <array>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace meshflow {

static_assert(std::endian::native == std::endian::little, "the slicing-by-8 CRC loads little-endian words");

namespace crc32c_internal {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (kPoly ^ (c >> 1)) : (c >> 1);
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

uint64_t LoadLE64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (static_assert below)
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const std::byte* data, size_t n) {
  uint64_t c = ~crc;
  while (n >= 8) {
    c = _mm_crc32_u64(c, LoadLE64(data));
    data += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, static_cast<uint8_t>(*data));
    ++data;
    --n;
  }
  return ~c32;
}
#endif

bool DetectHardware() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const std::byte* data, size_t n) {
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint64_t v = LoadLE64(data) ^ c;
    c = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][(v >> 56) & 0xFF];
    data += 8;
    n -= 8;
  }
  while (n > 0) {
    c = kTables[0][(c ^ static_cast<uint32_t>(*data)) & 0xFFu] ^ (c >> 8);
    ++data;
    --n;
  }
  return ~c;
}

bool UsesHardware() {
  static const bool hw = DetectHardware();
  return hw;
}

}  // namespace crc32c_internal

uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> bytes) {
#if defined(__x86_64__)
  if (crc32c_internal::UsesHardware()) return crc32c_internal::ExtendHardware(crc, bytes.data(), bytes.size());
#endif
  return crc32c_internal::ExtendPortable(crc, bytes.data(), bytes.size());
}

uint32_t Crc32c(std::span<const std::byte> bytes) { return Crc32cExtend(0, bytes); }

}  // namespace meshflow
