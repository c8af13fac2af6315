#include "data/checksum.h"

#include <array>

namespace meshflow {
namespace {

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

}  // namespace

uint32_t Crc32Update(uint32_t crc, std::span<const std::byte> bytes) {
  uint32_t c = ~crc;
  for (std::byte b : bytes) c = kCrcTable[(c ^ static_cast<uint32_t>(b)) & 0xFFu] ^ (c >> 8);
  return ~c;
}

uint32_t Crc32(std::span<const std::byte> bytes) { return Crc32Update(0, bytes); }

uint64_t Fnv1a64(std::span<const std::byte> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) {
    h ^= static_cast<uint64_t>(b);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace meshflow
