// Little-endian integer codecs for the on-disk formats (record shards, token files, checkpoint
// metadata): one home for the byte order of every file meshflow writes.
//
// The codecs go byte by byte, so they are correct on any host byte order and on unaligned
// pointers (compilers turn the loops into one load or store on little-endian hosts).
//
//   std::byte header[12];
//   StoreLe<uint32_t>(header, 7);
//   StoreLe<int64_t>(header + 4, -2);
//   uint32_t version = LoadLe<uint32_t>(header);        // 7
//   int64_t size = LoadLe<int64_t>(header + 4);         // -2
//   std::string out;
//   AppendLe<uint16_t>(out, 0x0102);                    // out == "\x02\x01"
#ifndef MESHFLOW_BASE_BYTE_IO_H_
#define MESHFLOW_BASE_BYTE_IO_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <concepts>
#include <cstddef>
#include <string>
#include <type_traits>

namespace meshflow {

// Writes v at p as sizeof(T) little-endian bytes.
template <std::integral T>
void StoreLe(std::byte* p, T v) {
  using U = std::make_unsigned_t<T>;
  const U u = static_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>((u >> (8 * i)) & 0xFFu);
}

// Reads sizeof(T) little-endian bytes at p.
template <std::integral T>
T LoadLe(const std::byte* p) {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i) u = static_cast<U>(u | (static_cast<U>(p[i]) << (8 * i)));
  return static_cast<T>(u);
}

// Appends v to out as sizeof(T) little-endian bytes.
template <std::integral T>
void AppendLe(std::string& out, T v) {
  std::byte b[sizeof(T)];
  StoreLe<T>(b, v);
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}

}  // namespace meshflow

#endif  // MESHFLOW_BASE_BYTE_IO_H_
