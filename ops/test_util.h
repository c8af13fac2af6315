// Test helpers shared by the ops tests: in-process worlds, deterministic global tensors and
// tolerant tensor comparison.
#ifndef MESHFLOW_OPS_TEST_UTIL_H_
#define MESHFLOW_OPS_TEST_UTIL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/base/lcg.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/tensor.h"

namespace meshflow::testing {

// One world per size, reused across tests (Run calls are serialized by the world).
inline ThreadWorld& WorldOf(int n) {
  static auto* worlds = new std::map<int, std::unique_ptr<ThreadWorld>>();
  auto& w = (*worlds)[n];
  if (!w) w = std::move(ThreadWorld::Create(n).value());
  return *w;
}

// Deterministic values in [-1.6, 1.6] (plus `offset`), different per seed.
inline Tensor GlobalFor(DType dtype, const std::vector<int64_t>& shape, int seed, double offset = 0) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    t.SetFromDouble(i, static_cast<double>((i * 37 + seed * 11) % 23 - 11) / 7.0 + offset);
  }
  return t;
}

// Pseudo-random f32 values uniform in [-scale, scale], a fixed sequence per seed (the parameter
// initializations of the training tests).
inline Tensor UniformValues(std::vector<int64_t> shape, uint32_t seed, double scale) {
  Tensor t = Tensor::Zeros(DType::kF32, std::move(shape));
  Lcg32 g = Lcg32::Seeded(seed, 7);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, scale * g.NextSymmetric());
  return t;
}

// Relative tolerance per dtype; integers compare exactly.
inline double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF64: return 1e-10;
    case DType::kF32: return 1e-4;
    case DType::kBF16: return 3e-2;
    case DType::kI32:
    case DType::kI64: return 0;
  }
  return 0;
}

// Deterministic integers: in [0, bound) when bound > 0 (ids, targets), else in [-11, 11].
inline Tensor IntsFor(DType dtype, const std::vector<int64_t>& shape, int seed, int64_t bound = 0) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    const int64_t v = bound > 0 ? (i * 5 + seed * 3 + i / 3) % bound : (i * 37 + seed * 11) % 23 - 11;
    t.SetFromDouble(i, static_cast<double>(v));
  }
  return t;
}

// "" when shapes and dtypes match and |got - want| <= tol * (1 + max|want|) everywhere (NaN and
// infinities must match exactly); else a description of the first difference.
inline std::string Compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return "shape/dtype differ: got " + got.ToString() + " want " + want.ToString();
  }
  double scale = 0;
  for (int64_t i = 0; i < want.NumElements(); ++i) {
    if (std::isfinite(want.GetAsDouble(i))) scale = std::max(scale, std::abs(want.GetAsDouble(i)));
  }
  const double tol = Tolerance(want.dtype()) * (1 + scale);
  for (int64_t i = 0; i < want.NumElements(); ++i) {
    const double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    const bool same_special = (std::isnan(g) && std::isnan(w)) || (std::isinf(w) && g == w);
    if (!same_special && !(std::abs(g - w) <= tol)) {
      return "element " + std::to_string(i) + ": got " + std::to_string(g) + " want " + std::to_string(w) +
             " (tol " + std::to_string(tol) + "); got " + got.ToString() + " want " + want.ToString();
    }
  }
  return "";
}

}  // namespace meshflow::testing

#endif  // MESHFLOW_OPS_TEST_UTIL_H_
