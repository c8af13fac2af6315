// Tensor: a dense, row-major, CPU-resident buffer with a dtype and a shape.
//
// The local part of a DTensor. Small and value-semantic (copies copy the bytes).
//
//   Tensor t = Tensor::Iota(DType::kF32, {2, 3});             // 0, 1, ..., 5
//   float x = t.At<float>(std::vector<int64_t>{1, 2});        // 5
//   Tensor block = t.Slice(Box{{0, 1}, {2, 2}});              // columns 1..2
#ifndef MESHFLOW_DTENSOR_TENSOR_H_
#define MESHFLOW_DTENSOR_TENSOR_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/host_cache.h"

namespace meshflow {

namespace tensor_internal {
// std::allocator whose value-initialization (vector::resize, vector(n)) leaves elements
// default-initialized, i.e. uninitialized bytes (Tensor::Uninitialized), and whose storage comes
// from the host block cache (dtensor/host_cache.h). Explicit values (vector(n, v), assign) are
// still written.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    std::construct_at(p, std::forward<Args>(args)...);
  }
  // Storage from the host block cache (dtensor/host_cache.h).
  T* allocate(size_t n) { return static_cast<T*>(AllocateHostBytes(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { DeallocateHostBytes(p, n * sizeof(T)); }
};
}  // namespace tensor_internal

// The byte storage of a Tensor. Growing it (resize) leaves the new bytes unspecified; its
// capacity can pass from one tensor to another (Tensor::ReleaseBuffer, Tensor::Uninitialized), e.g.
// through a pool (runtime/buffer_pool.h).
using TensorBuffer = std::vector<std::byte, tensor_internal::DefaultInitAllocator<std::byte>>;

class Tensor {
 public:
  Tensor() = default;  // an f32 scalar (rank 0, one element) holding 0
  // Copies are one memcpy of the bytes: TensorBuffer's allocator has a construct() member, so a
  // defaulted copy would go through vector's element-by-element (here: byte-by-byte) path.
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  ~Tensor() = default;
  // Zero-filled. Precondition: sizes >= 0.
  static Tensor Zeros(DType dtype, std::vector<int64_t> shape);
  // Contents unspecified: for callers that overwrite every byte (e.g. checkpoint loads), to skip
  // the zero-fill pass. Precondition: sizes >= 0.
  static Tensor Uninitialized(DType dtype, std::vector<int64_t> shape);
  // The same in `reuse`'s memory (no allocation when its capacity suffices).
  static Tensor Uninitialized(DType dtype, std::vector<int64_t> shape, TensorBuffer reuse);
  // Element i (row-major) holds the value i converted to dtype (bf16 rounds).
  static Tensor Iota(DType dtype, std::vector<int64_t> shape);
  // Errors: a negative size; values.size() != prod(shape).
  template <typename T>
  static StatusOr<Tensor> FromVector(std::vector<int64_t> shape, const std::vector<T>& values);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t NumElements() const;
  int64_t NumBytes() const { return static_cast<int64_t>(bytes_.size()); }

  std::byte* raw() { return bytes_.data(); }
  const std::byte* raw() const { return bytes_.data(); }
  // Precondition: T matches dtype().
  template <typename T>
  std::span<T> data() {
    return {reinterpret_cast<T*>(bytes_.data()), static_cast<size_t>(NumElements())};
  }
  template <typename T>
  std::span<const T> data() const {
    return {reinterpret_cast<const T*>(bytes_.data()), static_cast<size_t>(NumElements())};
  }
  template <typename T>
  T& At(std::span<const int64_t> index) {
    return data<T>()[FlatIndex(index)];
  }
  template <typename T>
  const T& At(std::span<const int64_t> index) const {
    return data<T>()[FlatIndex(index)];
  }
  int64_t FlatIndex(std::span<const int64_t> index) const;

  // Element i as a double (for printing and tolerant comparisons).
  double GetAsDouble(int64_t flat) const;
  void SetFromDouble(int64_t flat, double v);

  // Copy of the sub-block `box` (in this tensor's coordinates). Precondition: box inside shape.
  Tensor Slice(const Box& box) const;
  // Writes `block` into this tensor at `offset`. Precondition: fits, same dtype.
  void Insert(std::span<const int64_t> offset, const Tensor& block);

  // Moves the byte storage out, capacity included (for Uninitialized(..., reuse)); leaves this
  // tensor empty: same dtype, shape [0], no bytes.
  TensorBuffer ReleaseBuffer();

  // Exact byte equality of dtype, shape and data.
  friend bool operator==(const Tensor& a, const Tensor& b) {
    return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ && a.bytes_ == b.bytes_;
  }
  // "f32[2,3]{0, 1, 2, 3, 4, 5}" (data elided past 64 elements).
  std::string ToString() const;

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  using Bytes = TensorBuffer;
  Bytes bytes_ = Bytes(4, std::byte{0});
};

// Element `flat` (row-major) as exact text, so that printing then parsing gives the same value:
//   i32, i64   the integer in decimal, every value exactly ("1000001", "9007199254740993").
//   f32, f64   the shortest decimal that parses back (std::from_chars) to the same bits
//              ("0.1", "1e+06", "-0", "inf", "-inf", "nan"; a NaN payload is not kept).
//   bf16       the shortest decimal that, parsed as a float and rounded to bf16 (nearest even),
//              gives the same bits ("0.1" for the bf16 nearest 0.1).
// Precondition: 0 <= flat < NumElements().
std::string FormatElement(const Tensor& t, int64_t flat);
// FormatElement for a JSON document: the same text for finite values; inf, -inf and nan (which
// JSON numbers cannot express) as the strings "\"inf\"", "\"-inf\"", "\"nan\"".
std::string FormatElementJson(const Tensor& t, int64_t flat);

// Copies the region `extent` from src (at src_offset) to dst (at dst_offset); both row-major
// with the given shapes. Innermost runs are memcpy'd. Precondition: regions fit.
void CopyRegion(const std::byte* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                std::byte* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                std::span<const int64_t> extent, int64_t elem_size);

template <typename T>
StatusOr<Tensor> Tensor::FromVector(std::vector<int64_t> shape, const std::vector<T>& values) {
  // Checked before Zeros: a negative size would otherwise become a huge allocation (or, with an
  // even number of negative sizes, a tensor with a negative shape).
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return InvalidArgumentError("FromVector: shape has negative size " + std::to_string(shape[d]) + " at dim " +
                                  std::to_string(d));
    }
  }
  Tensor t = Zeros(DTypeOf<T>::value, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.NumElements()) {
    return InvalidArgumentError("FromVector: " + std::to_string(values.size()) + " values for a tensor of " +
                                std::to_string(t.NumElements()) + " elements");
  }
  std::copy(values.begin(), values.end(), t.data<T>().begin());
  return t;
}

}  // namespace meshflow

#endif  // MESHFLOW_DTENSOR_TENSOR_H_
