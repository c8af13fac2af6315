#include "meshflow/base/checksum.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
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

// always_inline: GCC does not inline it into the target("sse4.2") functions otherwise (a call per
// 8 bytes, measured at half the CRC time).
__attribute__((always_inline)) inline uint64_t LoadLE64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (static_assert below)
}

#if defined(__x86_64__)
// The `crc32` instruction has a latency of 3 cycles and a throughput of 1 per cycle, so one
// dependency chain runs at a third of the unit's speed. Long inputs are cut into three equal
// streams CRC'd in parallel (each from a zero register) and recombined: for a raw (unconditioned)
// CRC register, crc(A ++ B) = shift_|B|(crc(A)) ^ crc0(B), where shift_L applies L zero bytes, a
// linear map on the 32-bit register, tabulated once per stream length L as 4 x 256 entries.
struct ShiftTable {
  std::array<std::array<uint32_t, 256>, 4> t;
};

// Raw register after feeding `len` zero bytes (portable tables; used only to build ShiftTables).
uint32_t RawZeros(uint32_t raw, size_t len) {
  static constexpr std::byte kZeros[256] = {};
  uint32_t crc = ~raw;  // ExtendPortable conditions its input and output; undo both
  for (; len > 0; len -= std::min<size_t>(len, sizeof(kZeros))) {
    crc = ExtendPortable(crc, kZeros, std::min<size_t>(len, sizeof(kZeros)));
  }
  return ~crc;
}

ShiftTable MakeShiftTable(size_t len) {
  uint32_t col[32];
  for (int j = 0; j < 32; ++j) col[j] = RawZeros(uint32_t{1} << j, len);
  ShiftTable s{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t x = 0;
      for (int b = 0; b < 8; ++b) {
        if ((v >> b) & 1u) x ^= col[8 * k + b];
      }
      s.t[k][v] = x;
    }
  }
  return s;
}

uint32_t Shift(const ShiftTable& s, uint32_t c) {
  return s.t[0][c & 0xFFu] ^ s.t[1][(c >> 8) & 0xFFu] ^ s.t[2][(c >> 16) & 0xFFu] ^ s.t[3][c >> 24];
}

constexpr size_t kLongStream = 8192, kShortStream = 256;

// The hardware CRC of the last bytes (8 at a time, then 1 at a time) from the running value `c`;
// returns the final (inverted) CRC. Shared by ExtendHardware and the VPCLMULQDQ fold.
__attribute__((target("sse4.2"))) uint32_t FinishHardware(uint64_t c, const std::byte* data, size_t n) {
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

// Three interleaved streams of `len` bytes each while at least 3 * len bytes remain.
__attribute__((target("sse4.2"))) uint64_t ThreeWay(uint64_t c0, const std::byte*& data, size_t& n, size_t len,
                                                    const ShiftTable& shift) {
  while (n >= 3 * len) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < len; i += 8) {
      c0 = _mm_crc32_u64(c0, LoadLE64(data + i));
      c1 = _mm_crc32_u64(c1, LoadLE64(data + len + i));
      c2 = _mm_crc32_u64(c2, LoadLE64(data + 2 * len + i));
    }
    c0 = Shift(shift, static_cast<uint32_t>(c0)) ^ c1;
    c0 = Shift(shift, static_cast<uint32_t>(c0)) ^ c2;
    data += 3 * len;
    n -= 3 * len;
  }
  return c0;
}

// CRC by carry-less multiplication (x86-64 with AVX-512 + VPCLMULQDQ): the input is folded 256
// bytes at a time into four 512-bit accumulators (each 128-bit lane L at bit distance d ahead of
// the data D it is folded into becomes clmul(L.lo, x^(d+32)) ^ clmul(L.hi, x^(d-32)) ^ D, which is
// congruent mod P), the accumulators are folded into one 128-bit lane, and that lane is run
// through the `crc32` instruction as the last 16 bytes of a message with a zero register. The
// initial register is xored into the first 4 bytes.
struct FoldKeys {
  uint64_t k[7][2];  // {x^(d+32) mod P, x^(d-32) mod P}, bit-reflected and shifted left by 1
};

// x^n mod P, bit-reflected to 32 bits, times x (<< 1): a clmul of reflected operands yields the
// product one bit short of a reflected 128-bit field.
uint64_t FoldConstant(int n) {
  uint64_t r = 1;  // normal (non-reflected) representation
  for (int i = 0; i < n; ++i) {
    r <<= 1;
    if ((r >> 32) != 0) r ^= 0x11EDC6F41ull;  // x^32 + the normal polynomial 0x1EDC6F41
  }
  uint32_t rev = 0;
  for (int i = 0; i < 32; ++i) {
    if ((r >> i) & 1u) rev |= 1u << (31 - i);
  }
  return uint64_t{rev} << 1;
}

const FoldKeys& Keys() {
  static const FoldKeys keys = [] {
    FoldKeys f{};
    const int dist[7] = {2048, 1536, 1024, 512, 384, 256, 128};
    for (int i = 0; i < 7; ++i) {
      f.k[i][0] = FoldConstant(dist[i] + 32);
      f.k[i][1] = FoldConstant(dist[i] - 32);
    }
    return f;
  }();
  return keys;
}

#define MESHFLOW_CRC_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))

MESHFLOW_CRC_FOLD_TARGET inline __m512i Fold512(__m512i x, __m512i k, __m512i data) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), data,
                                   0x96);
}
MESHFLOW_CRC_FOLD_TARGET inline __m128i Fold128(__m128i x, __m128i k, __m128i data) {
  return _mm_ternarylogic_epi64(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11), data, 0x96);
}
MESHFLOW_CRC_FOLD_TARGET inline __m128i Key128(const uint64_t* k) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(k));
}
// (The maskz_ forms: GCC 12 warns -Wuninitialized about the undefined source of the plain ones.)
MESHFLOW_CRC_FOLD_TARGET inline __m512i Key512(const uint64_t* k) {
  return _mm512_maskz_broadcast_i32x4(static_cast<__mmask16>(0xFFFF), Key128(k));
}

constexpr size_t kFoldMin = 256;

// Conditioned CRC; n >= kFoldMin.
MESHFLOW_CRC_FOLD_TARGET uint32_t ExtendFold(uint32_t crc, const std::byte* data, size_t n) {
  const FoldKeys& keys = Keys();
  const __m512i k2048 = Key512(keys.k[0]);
  __m512i a0 = _mm512_loadu_si512(data), a1 = _mm512_loadu_si512(data + 64), a2 = _mm512_loadu_si512(data + 128),
          a3 = _mm512_loadu_si512(data + 192);
  a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  data += 256;
  n -= 256;
  while (n >= 256) {
    a0 = Fold512(a0, k2048, _mm512_loadu_si512(data));
    a1 = Fold512(a1, k2048, _mm512_loadu_si512(data + 64));
    a2 = Fold512(a2, k2048, _mm512_loadu_si512(data + 128));
    a3 = Fold512(a3, k2048, _mm512_loadu_si512(data + 192));
    data += 256;
    n -= 256;
  }
  a3 = Fold512(a0, Key512(keys.k[1]), a3);
  a3 = Fold512(a1, Key512(keys.k[2]), a3);
  a3 = Fold512(a2, Key512(keys.k[3]), a3);
  __m128i l = _mm512_maskz_extracti32x4_epi32(0xF, a3, 3);
  l = Fold128(_mm512_maskz_extracti32x4_epi32(0xF, a3, 0), Key128(keys.k[4]), l);
  l = Fold128(_mm512_maskz_extracti32x4_epi32(0xF, a3, 1), Key128(keys.k[5]), l);
  l = Fold128(_mm512_maskz_extracti32x4_epi32(0xF, a3, 2), Key128(keys.k[6]), l);
  uint64_t c = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(l)));
  c = _mm_crc32_u64(c, static_cast<uint64_t>(_mm_extract_epi64(l, 1)));
  return FinishHardware(c, data, n);
}

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const std::byte* data, size_t n) {
  uint64_t c = ~crc;
  if (n >= 3 * kShortStream) {
    static const ShiftTable kLong = MakeShiftTable(kLongStream);
    static const ShiftTable kShort = MakeShiftTable(kShortStream);
    c = ThreeWay(c, data, n, kLongStream, kLong);
    c = ThreeWay(c, data, n, kShortStream, kShort);
  }
  return FinishHardware(c, data, n);
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

bool DetectFold() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq") &&
         __builtin_cpu_supports("pclmul");
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

bool UsesFold() {
  static const bool fold = DetectFold();
  return fold;
}

uint32_t ExtendHardwareForTest(uint32_t crc, const std::byte* data, size_t n) {
#if defined(__x86_64__)
  if (UsesHardware()) return ExtendHardware(crc, data, n);
#endif
  return ExtendPortable(crc, data, n);
}

}  // namespace crc32c_internal

uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> bytes) {
#if defined(__x86_64__)
  if (bytes.size() >= crc32c_internal::kFoldMin && crc32c_internal::UsesFold()) {
    return crc32c_internal::ExtendFold(crc, bytes.data(), bytes.size());
  }
  if (crc32c_internal::UsesHardware()) return crc32c_internal::ExtendHardware(crc, bytes.data(), bytes.size());
#endif
  return crc32c_internal::ExtendPortable(crc, bytes.data(), bytes.size());
}

uint32_t Crc32c(std::span<const std::byte> bytes) { return Crc32cExtend(0, bytes); }

std::string Crc32cString(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", static_cast<unsigned>(crc));
  return buf;
}

}  // namespace meshflow
