// Element types of DTensor buffers: f32, f64, bf16 (storage only), i32, i64.
//
// bf16 is a storage type: arithmetic (reductions in collectives, kernels) converts to float,
// computes, and rounds back to nearest-even.
#ifndef MESHFLOW_DTENSOR_DTYPE_H_
#define MESHFLOW_DTENSOR_DTYPE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "meshflow/base/status.h"

namespace meshflow {

enum class DType { kF32, kF64, kBF16, kI32, kI64 };

// Bytes per element.
constexpr int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

// Floating-point (f32, f64, bf16) / integer (i32, i64) dtypes.
constexpr bool IsFloatDType(DType t) { return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16; }
constexpr bool IsIntDType(DType t) { return t == DType::kI32 || t == DType::kI64; }

// The dtype's code in meshflow's files (record shards, checkpoint metadata): 0 f32, 1 f64, 2 bf16,
// 3 i32, 4 i64. Files depend on these values: never renumber, only append.
constexpr uint8_t DTypeFileCode(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF64: return 1;
    case DType::kBF16: return 2;
    case DType::kI32: return 3;
    case DType::kI64: return 4;
  }
  return 255;
}
// The dtype of a file code; nullopt for a code no dtype has (a corrupted or newer file).
constexpr std::optional<DType> DTypeFromFileCode(uint64_t code) {
  switch (code) {
    case 0: return DType::kF32;
    case 1: return DType::kF64;
    case 2: return DType::kBF16;
    case 3: return DType::kI32;
    case 4: return DType::kI64;
    default: return std::nullopt;
  }
}

// "f32", "f64", "bf16", "i32", "i64".
std::string_view DTypeName(DType t);
// Accepts the names above (and "float32", "float64", "bfloat16", "int32", "int64").
StatusOr<DType> ParseDType(std::string_view s);

// bfloat16 storage: the upper 16 bits of an IEEE float.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  explicit BFloat16(float f) : bits(FromFloat(f)) {}
  explicit operator float() const {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    return std::bit_cast<float>(u);
  }
  static uint16_t FromFloat(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
  friend bool operator==(BFloat16 a, BFloat16 b) { return a.bits == b.bits; }
};

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };

// Calls f(T{}) with the C++ type of `t`.
template <typename F>
decltype(auto) VisitDType(DType t, F&& f) {
  switch (t) {
    case DType::kF32: return f(float{});
    case DType::kF64: return f(double{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kI32: return f(int32_t{});
    case DType::kI64: return f(int64_t{});
  }
  return f(float{});
}

}  // namespace meshflow

#endif  // MESHFLOW_DTENSOR_DTYPE_H_
