// The checksum of meshflow's file formats (checkpoint chunks, data record shards): CRC-32C. One
// library for every format, so they share one fast implementation.
//
// CRC-32C (Castagnoli):
// Reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF (the CRC used by
// iSCSI, ext4 and LevelDB/RocksDB). Written here, bit-exact on every platform: a slicing-by-8
// table implementation, and on x86-64 CPUs with SSE4.2 the `crc32` instruction over three
// interleaved streams, and for inputs of 256 bytes and more on CPUs with AVX-512 VPCLMULQDQ a
// carry-less-multiply fold (~55 GB/s); chosen once at run time, all give the same values, pinned
// by crc32c_test.
//
//   uint32_t c = Crc32c(bytes);                  // 0xE3069283 for the 9 bytes "123456789"
//   uint32_t c2 = Crc32cExtend(c, more_bytes);   // == Crc32c(bytes followed by more_bytes)
#ifndef MESHFLOW_BASE_CHECKSUM_H_
#define MESHFLOW_BASE_CHECKSUM_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace meshflow {

// CRC-32C of `bytes`. Crc32c({}) == 0.
uint32_t Crc32c(std::span<const std::byte> bytes);
// Continues a CRC-32C: `crc` is the CRC-32C of the bytes seen so far (0 for none).
uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> bytes);
// A checksum as error messages print it: "0x" and 8 lower-case hex digits ("0xe3069283").
std::string Crc32cString(uint32_t crc);

namespace crc32c_internal {
// The portable table implementation (always available; used by tests to check the fast path).
uint32_t ExtendPortable(uint32_t crc, const std::byte* data, size_t n);
// True when Crc32cExtend uses the SSE4.2 instruction on this machine.
bool UsesHardware();
// True when Crc32cExtend folds inputs of 256 bytes and more with VPCLMULQDQ (AVX-512).
bool UsesFold();
// The SSE4.2 path alone (three interleaved streams), portable where SSE4.2 is missing (tests).
uint32_t ExtendHardwareForTest(uint32_t crc, const std::byte* data, size_t n);
}  // namespace crc32c_internal

}  // namespace meshflow

#endif  // MESHFLOW_BASE_CHECKSUM_H_
