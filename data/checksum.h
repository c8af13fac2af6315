// Checksums for meshflow data files: CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, the
// one zlib, PNG and gzip use) and 64-bit FNV-1a. Both are written here (no zlib dependency) and
// are bit-exact on every platform.
//
//   uint32_t c = Crc32(bytes);                 // Crc32("123456789") == 0xCBF43926
//   uint32_t c2 = Crc32Update(c, more_bytes);  // streaming: Crc32(a ++ b) == Crc32Update(Crc32(a), b)
#ifndef MESHFLOW_DATA_CHECKSUM_H_
#define MESHFLOW_DATA_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace meshflow {

// CRC-32 of `bytes`. Crc32({}) == 0.
uint32_t Crc32(std::span<const std::byte> bytes);
// Continues a CRC-32: `crc` is the CRC-32 of the bytes seen so far (0 for none).
uint32_t Crc32Update(uint32_t crc, std::span<const std::byte> bytes);

// 64-bit FNV-1a of `bytes` (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t Fnv1a64(std::span<const std::byte> bytes);

}  // namespace meshflow

#endif  // MESHFLOW_DATA_CHECKSUM_H_
