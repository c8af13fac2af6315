// Tensor: a dense, row-major buffer with a dtype and a shape, on a Device.
//
// The local part of a DTensor. Small and value-semantic (copies copy the bytes). Its storage is a
// TensorBuffer (dtensor/tensor_buffer.h) on a device: the host by default, or a CUDA device (the
// bytes are then device memory, valid in the order of the buffer's home stream). Element access
// (data, At, GetAsDouble, Slice, Insert, ToString, ==) is for host tensors only and aborts with a
// message on a device tensor; kernels and the executor take raw() and dispatch on device().
// Moving between devices is explicit and stream-ordered (CopyTo); copying a device tensor enqueues
// a device-to-device copy on its home stream.
//
//   Tensor t = Tensor::Iota(DType::kF32, {2, 3});             // 0, 1, ..., 5
//   float x = t.At<float>(std::vector<int64_t>{1, 2});        // 5
//   Tensor block = t.Slice(Box{{0, 1}, {2, 2}});              // columns 1..2
#ifndef MESHFLOW_DTENSOR_TENSOR_H_
#define MESHFLOW_DTENSOR_TENSOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

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
#include "meshflow/runtime/region_copy.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor_buffer.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

namespace tensor_internal {
// Aborts with a message naming `what` and the tensor's device: host-only accessors on a device
// tensor (copy it to the host first: Tensor::CopyTo / ToHost).
[[noreturn]] void DeviceTensorOnHost(const char* what, Device device);
}  // namespace tensor_internal

class Tensor {
 public:
  Tensor() = default;  // an f32 scalar (rank 0, one element) holding 0
  // Copies are one memcpy of the bytes (host), or one device-to-device copy enqueued on the home
  // stream (device tensors; aborts when the device is out of memory: use Clone for a Status).
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
  // The same in `reuse`'s memory, on its device (no allocation when its capacity suffices; aborts
  // when a device reallocation fails).
  static Tensor Uninitialized(DType dtype, std::vector<int64_t> shape, TensorBuffer reuse);
  // Contents unspecified, on `device`, valid in `stream`'s order (null: no stream). Errors: the
  // allocator's (out of device memory), a device without a runtime, a negative size.
  static StatusOr<Tensor> Empty(DType dtype, std::vector<int64_t> shape, Device device,
                                std::shared_ptr<Stream> stream = nullptr);
  // Element i (row-major) holds the value i converted to dtype (bf16 rounds).
  static Tensor Iota(DType dtype, std::vector<int64_t> shape);
  // Errors: a negative size; values.size() != prod(shape).
  template <typename T>
  static StatusOr<Tensor> FromVector(std::vector<int64_t> shape, const std::vector<T>& values);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t NumElements() const;
  int64_t NumBytes() const { return bytes_.size(); }
  Device device() const { return bytes_.device(); }
  bool is_host() const { return bytes_.device().is_host(); }
  // The stream the bytes are valid in (device tensors; null on the host).
  const std::shared_ptr<Stream>& stream() const { return bytes_.stream(); }
  const TensorBuffer& buffer() const { return bytes_; }
  TensorBuffer& mutable_buffer() { return bytes_; }

  // The bytes: host memory, or device memory for a device tensor.
  std::byte* raw() { return bytes_.data(); }
  const std::byte* raw() const { return bytes_.data(); }
  // Host tensors only. Precondition: T matches dtype().
  template <typename T>
  std::span<T> data() {
    if (!is_host()) tensor_internal::DeviceTensorOnHost("Tensor::data", device());
    return {reinterpret_cast<T*>(bytes_.data()), static_cast<size_t>(NumElements())};
  }
  template <typename T>
  std::span<const T> data() const {
    if (!is_host()) tensor_internal::DeviceTensorOnHost("Tensor::data", device());
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
  // tensor empty: same dtype, shape [0], no bytes, on the host.
  TensorBuffer ReleaseBuffer();

  // A copy on `device` (host <-> device, or on the same device), enqueued on `stream` (a stream of
  // the device tensor's side; for host -> host any host stream, run at once). The result's bytes
  // are valid once the stream ran the copy: read a host result after stream->Synchronize() (or an
  // event recorded after the call). A host source is staged at the call (it may be freed or changed
  // right after); a device source must stay alive until the stream ran the copy (a block freed
  // before is reused only in its home stream's order: copy on that stream).
  // Errors: allocation, a stream on neither side's device, the copy's.
  StatusOr<Tensor> CopyTo(Device device, std::shared_ptr<Stream> stream) const;
  // CopyTo(Device::Host(), home stream) and a wait for it; a host tensor is copied.
  StatusOr<Tensor> ToHost() const;
  // A copy on the same device and stream, with allocation errors as a Status.
  StatusOr<Tensor> Clone() const;

  // Exact byte equality of dtype, shape and data (host tensors only).
  friend bool operator==(const Tensor& a, const Tensor& b);
  // "f32[2,3]{0, 1, 2, 3, 4, 5}" (data elided past 64 elements).
  std::string ToString() const;

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  static TensorBuffer ZeroScalarBytes();
  TensorBuffer bytes_ = ZeroScalarBytes();
};

// Element `flat` (row-major) as exact text, so that printing then parsing gives the same value:
//   i32, i64   the integer in decimal, every value exactly ("1000001", "9007199254740993").
//   f32, f64   the shortest decimal that parses back (std::from_chars) to the same bits
//              ("0.1", "1e+06", "-0", "inf", "-inf", "nan"; a NaN payload is not kept).
//   bf16       the shortest decimal that, parsed as a float and rounded to bf16 (nearest even),
//              gives the same bits ("0.1" for the bf16 nearest 0.1).
// Precondition: 0 <= flat < NumElements().
std::string FormatElement(const Tensor& t, int64_t flat);
// Element `flat` for a JSON document, whose readers see every number as a double: integers as
// FormatElement ("9007199254740993"); a floating-point element's exact value widened to double,
// as the shortest decimal that parses back to that double (std::to_chars, as base/json.h's
// JsonDouble): the bf16 528 is "528" (FormatElement: "5.3e+02", which a double reader reads as
// 530), 0.1f is "0.10000000149011612" (FormatElement: "0.1"), an f64 as FormatElement. inf, -inf
// and nan (which JSON numbers cannot express) are the strings "\"inf\"", "\"-inf\"", "\"nan\"".
std::string FormatElementJson(const Tensor& t, int64_t flat);

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
