#include "meshflow/collectives/reduce.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

namespace meshflow {
namespace {

// Accumulator type per storage type.
template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<BFloat16> {
  using type = float;
};
template <>
struct AccOf<int32_t> {
  using type = int64_t;
};
template <>
struct AccOf<int64_t> {
  using type = __int128;
};

template <typename Acc, typename T>
Acc Load(T v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<Acc>(v);
  }
}

template <typename T, typename Acc>
T Store(Acc v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16(v);
  } else if constexpr (std::is_integral_v<T>) {
    // Modular wrap: two's complement truncation (well defined since C++20).
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename Acc>
Acc Max(Acc acc, Acc x) {
  if constexpr (std::is_floating_point_v<Acc>) {
    return (std::isnan(acc) || acc >= x) ? acc : x;  // x NaN -> acc >= x is false -> NaN
  } else {
    return acc >= x ? acc : x;
  }
}

template <typename Acc>
Acc Min(Acc acc, Acc x) {
  if constexpr (std::is_floating_point_v<Acc>) {
    return (std::isnan(acc) || acc <= x) ? acc : x;
  } else {
    return acc <= x ? acc : x;
  }
}

template <typename T>
void ReduceTyped(std::span<const void* const> inputs, void* out_raw, int64_t count, ReduceOp op) {
  using Acc = typename AccOf<T>::type;
  constexpr int64_t kBlock = 256;
  Acc acc[kBlock];
  T* out = static_cast<T*>(out_raw);
  const int64_t n = static_cast<int64_t>(inputs.size());
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t len = std::min(kBlock, count - b);
    const T* first = static_cast<const T*>(inputs[0]) + b;
    for (int64_t i = 0; i < len; ++i) acc[i] = Load<Acc>(first[i]);
    for (int64_t r = 1; r < n; ++r) {
      const T* x = static_cast<const T*>(inputs[static_cast<size_t>(r)]) + b;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          for (int64_t i = 0; i < len; ++i) acc[i] = acc[i] + Load<Acc>(x[i]);
          break;
        case ReduceOp::kMax:
          for (int64_t i = 0; i < len; ++i) acc[i] = Max<Acc>(acc[i], Load<Acc>(x[i]));
          break;
        case ReduceOp::kMin:
          for (int64_t i = 0; i < len; ++i) acc[i] = Min<Acc>(acc[i], Load<Acc>(x[i]));
          break;
      }
    }
    if (op == ReduceOp::kAvg) {
      const Acc divisor = static_cast<Acc>(n);
      for (int64_t i = 0; i < len; ++i) acc[i] = acc[i] / divisor;  // integers truncate toward zero
    }
    // Every input of this block has been read: writing `out` is safe even when it is an input.
    for (int64_t i = 0; i < len; ++i) out[b + i] = Store<T>(acc[i]);
  }
}

}  // namespace

Status ReduceBuffers(std::span<const void* const> inputs, void* out, int64_t count, DType dtype, ReduceOp op) {
  if (count < 0) return InvalidArgumentError("ReduceBuffers: negative count " + std::to_string(count));
  if (count == 0) return Status();
  if (inputs.empty()) {
    return InvalidArgumentError("ReduceBuffers: no inputs for count " + std::to_string(count));
  }
  if (out == nullptr) {
    return InvalidArgumentError("ReduceBuffers: null output for count " + std::to_string(count));
  }
  for (size_t r = 0; r < inputs.size(); ++r) {
    if (inputs[r] == nullptr) {
      return InvalidArgumentError("ReduceBuffers: input " + std::to_string(r) + " is null for count " +
                                  std::to_string(count));
    }
  }
  VisitDType(dtype, [&](auto t) { ReduceTyped<decltype(t)>(inputs, out, count, op); });
  return Status();
}

}  // namespace meshflow
