#include "meshflow/dtensor/dtype.h"

namespace meshflow {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

StatusOr<DType> ParseDType(std::string_view s) {
  if (s == "f32" || s == "float32") return DType::kF32;
  if (s == "f64" || s == "float64") return DType::kF64;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "i32" || s == "int32") return DType::kI32;
  if (s == "i64" || s == "int64") return DType::kI64;
  return InvalidArgumentError("unknown dtype '" + std::string(s) + "'; expected one of f32, f64, bf16, i32, i64");
}

}  // namespace meshflow
