#include "meshflow/dtensor/tensor.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <sstream>

#include "meshflow/runtime/device_runtime.h"

namespace meshflow {

namespace tensor_internal {

void DeviceTensorOnHost(const char* what, Device device) {
  std::fprintf(stderr, "meshflow: %s on a tensor on %s: element access needs a host tensor (copy it with "
               "Tensor::ToHost or CopyTo first)\n", what, device.ToString().c_str());
  std::abort();
}

}  // namespace tensor_internal

namespace {

[[noreturn]] void AbortWith(const char* what, const Status& s) {
  std::fprintf(stderr, "meshflow: %s: %s\n", what, s.ToString().c_str());
  std::abort();
}

int64_t BytesOf(DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = DTypeSize(dtype);
  for (int64_t s : shape) n *= s;
  return n;
}

// Copies `bytes` bytes from src to dst in `stream`'s order (host -> host at once).
Status CopyBytesOn(const TensorBuffer& src, TensorBuffer& dst, int64_t bytes, const std::shared_ptr<Stream>& stream) {
  if (bytes == 0) return Status::Ok();
  if (src.device().is_host() && dst.device().is_host()) {
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
    return Status::Ok();
  }
  const Device on = src.device().is_host() ? dst.device() : src.device();
  if (stream == nullptr) {
    return InvalidArgumentError("a copy between " + src.device().ToString() + " and " + dst.device().ToString() +
                                " needs a stream");
  }
  if (stream->device() != on) {
    return InvalidArgumentError("a copy between " + src.device().ToString() + " and " + dst.device().ToString() +
                                " on stream '" + stream->name() + "' of " + stream->device().ToString());
  }
  MF_ASSIGN_OR_RETURN(DeviceRuntime * rt, GetDeviceRuntime(on));
  std::byte* to = dst.data();
  Stream& s = *stream;
  if (src.device().is_host()) {
    // The copy may run after the caller freed or changed the host source (it is stream work): it
    // reads a staged copy the work owns (CUDA stages pageable host memory the same way).
    auto staged = std::make_shared<TensorBuffer>(bytes);
    std::memcpy(staged->data(), src.data(), static_cast<size_t>(bytes));
    return stream->Enqueue([rt, staged, to, bytes, &s]() { return rt->Copy(to, staged->data(), bytes, s); }, "copy");
  }
  const std::byte* from = src.data();
  return stream->Enqueue([rt, from, to, bytes, &s]() { return rt->Copy(to, from, bytes, s); }, "copy");
}

}  // namespace

TensorBuffer Tensor::ZeroScalarBytes() {
  TensorBuffer b(4);
  std::memset(b.data(), 0, 4);
  return b;
}

Tensor::Tensor(const Tensor& other) : dtype_(other.dtype_), shape_(other.shape_), bytes_() {
  if (other.is_host()) {
    bytes_ = TensorBuffer(other.NumBytes());
    if (other.NumBytes() > 0) std::memcpy(bytes_.data(), other.raw(), static_cast<size_t>(other.NumBytes()));
    return;
  }
  StatusOr<Tensor> c = other.Clone();
  if (!c.ok()) AbortWith("copying a device tensor", c.status());
  bytes_ = std::move(c->bytes_);
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this == &other) return *this;
  if (other.is_host() && is_host()) {
    dtype_ = other.dtype_;
    shape_ = other.shape_;
    if (bytes_.capacity() < other.NumBytes()) bytes_ = TensorBuffer(other.NumBytes());
    (void)bytes_.Resize(other.NumBytes());  // within the capacity: cannot fail
    if (other.NumBytes() > 0) std::memcpy(bytes_.data(), other.raw(), static_cast<size_t>(other.NumBytes()));
    return *this;
  }
  Tensor copy(other);
  *this = std::move(copy);
  return *this;
}

int64_t Tensor::NumElements() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

Tensor Tensor::Zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t = Uninitialized(dtype, std::move(shape));
  if (t.NumBytes() > 0) std::memset(t.raw(), 0, static_cast<size_t>(t.NumBytes()));
  return t;
}

Tensor Tensor::Uninitialized(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.bytes_ = TensorBuffer(BytesOf(dtype, t.shape_));
  return t;
}

Tensor Tensor::Uninitialized(DType dtype, std::vector<int64_t> shape, TensorBuffer reuse) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.bytes_ = std::move(reuse);
  const Status s = t.bytes_.Resize(BytesOf(dtype, t.shape_));  // within capacity: no allocation
  if (!s.ok()) AbortWith("Tensor::Uninitialized", s);
  return t;
}

StatusOr<Tensor> Tensor::Empty(DType dtype, std::vector<int64_t> shape, Device device, std::shared_ptr<Stream> stream) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return InvalidArgumentError("Tensor::Empty: shape has negative size " + std::to_string(shape[d]) + " at dim " +
                                  std::to_string(d));
    }
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  MF_ASSIGN_OR_RETURN(t.bytes_, TensorBuffer::Allocate(device, BytesOf(dtype, t.shape_), std::move(stream)));
  return t;
}

TensorBuffer Tensor::ReleaseBuffer() {
  TensorBuffer out = std::move(bytes_);
  bytes_ = TensorBuffer();
  shape_.assign(1, 0);
  return out;
}

StatusOr<Tensor> Tensor::CopyTo(Device device, std::shared_ptr<Stream> stream) const {
  const std::shared_ptr<Stream> home = device.is_host() ? nullptr : stream;
  MF_ASSIGN_OR_RETURN(Tensor out, Empty(dtype_, shape_, device, home));
  MF_RETURN_IF_ERROR(CopyBytesOn(bytes_, out.bytes_, NumBytes(), stream));
  return out;
}

StatusOr<Tensor> Tensor::ToHost() const {
  if (is_host()) return *this;
  MF_ASSIGN_OR_RETURN(Tensor out, CopyTo(Device::Host(), stream()));
  if (stream() == nullptr) return InternalError("ToHost: a device tensor without a stream");
  MF_RETURN_IF_ERROR(stream()->Synchronize());
  return out;
}

StatusOr<Tensor> Tensor::Clone() const {
  if (is_host()) return *this;
  MF_ASSIGN_OR_RETURN(Tensor out, Empty(dtype_, shape_, device(), stream()));
  MF_RETURN_IF_ERROR(CopyBytesOn(bytes_, out.bytes_, NumBytes(), stream()));
  return out;
}

bool operator==(const Tensor& a, const Tensor& b) {
  if (!a.is_host()) tensor_internal::DeviceTensorOnHost("Tensor ==", a.device());
  if (!b.is_host()) tensor_internal::DeviceTensorOnHost("Tensor ==", b.device());
  return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ && a.NumBytes() == b.NumBytes() &&
         (a.NumBytes() == 0 || std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.NumBytes())) == 0);
}

Tensor Tensor::Iota(DType dtype, std::vector<int64_t> shape) {
  Tensor t = Zeros(dtype, std::move(shape));
  const int64_t n = t.NumElements();
  VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    auto d = t.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        d[i] = BFloat16(static_cast<float>(i));
      } else {
        d[i] = static_cast<T>(i);
      }
    }
  });
  return t;
}

int64_t Tensor::FlatIndex(std::span<const int64_t> index) const {
  int64_t flat = 0;
  for (int d = 0; d < rank(); ++d) flat = flat * shape_[d] + index[d];
  return flat;
}

double Tensor::GetAsDouble(int64_t flat) const {
  return VisitDType(dtype_, [&](auto zero) -> double {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, BFloat16>) {
      return static_cast<double>(static_cast<float>(data<T>()[flat]));
    } else {
      return static_cast<double>(data<T>()[flat]);
    }
  });
}

void Tensor::SetFromDouble(int64_t flat, double v) {
  VisitDType(dtype_, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, BFloat16>) {
      data<T>()[flat] = BFloat16(static_cast<float>(v));
    } else {
      data<T>()[flat] = static_cast<T>(v);
    }
  });
}

Tensor Tensor::Slice(const Box& box) const {
  if (!is_host()) tensor_internal::DeviceTensorOnHost("Tensor::Slice", device());
  Tensor out = Uninitialized(dtype_, box.shape);  // CopyRegion writes every byte
  const std::vector<int64_t> zero(box.shape.size(), 0);
  CopyRegion(raw(), shape_, box.offset, out.raw(), out.shape_, zero, box.shape, DTypeSize(dtype_));
  return out;
}

void Tensor::Insert(std::span<const int64_t> offset, const Tensor& block) {
  if (!is_host()) tensor_internal::DeviceTensorOnHost("Tensor::Insert", device());
  if (!block.is_host()) tensor_internal::DeviceTensorOnHost("Tensor::Insert", block.device());
  const std::vector<int64_t> zero(block.shape_.size(), 0);
  CopyRegion(block.raw(), block.shape_, zero, raw(), shape_, offset, block.shape_, DTypeSize(dtype_));
}

std::string Tensor::ToString() const {
  if (!is_host()) {
    std::ostringstream os;
    os << DTypeName(dtype_) << "[";
    for (int d = 0; d < rank(); ++d) os << (d ? "," : "") << shape_[d];
    os << "]@" << device().ToString();
    return os.str();
  }
  std::ostringstream os;
  os << DTypeName(dtype_) << "[";
  for (int d = 0; d < rank(); ++d) os << (d ? "," : "") << shape_[d];
  os << "]{";
  const int64_t n = NumElements();
  for (int64_t i = 0; i < n && i < 64; ++i) os << (i ? ", " : "") << GetAsDouble(i);
  if (n > 64) os << ", ...";
  os << "}";
  return os.str();
}

namespace {

template <typename T>
std::string ShortestChars(T v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// The shortest decimal (general format, 1..9 significant digits) that parses as a float which
// rounds to the bf16 `v`; a float of 9 digits round-trips, so the loop always ends.
std::string ShortestBFloat16(BFloat16 v) {
  const float f = static_cast<float>(v);
  if (!std::isfinite(f)) return ShortestChars(f);
  char buf[64];
  for (int precision = 1; precision < 9; ++precision) {
    const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::general, precision);
    float back = 0;
    const std::from_chars_result p = std::from_chars(buf, r.ptr, back);
    if (p.ec == std::errc() && p.ptr == r.ptr && BFloat16(back) == v) return std::string(buf, r.ptr);
  }
  return ShortestChars(f);
}

}  // namespace

std::string FormatElement(const Tensor& t, int64_t flat) {
  return VisitDType(t.dtype(), [&](auto zero) -> std::string {
    using T = decltype(zero);
    const T v = t.data<T>()[static_cast<size_t>(flat)];
    if constexpr (std::is_same_v<T, BFloat16>) {
      return ShortestBFloat16(v);
    } else {
      return ShortestChars(v);
    }
  });
}

std::string FormatElementJson(const Tensor& t, int64_t flat) {
  if (!IsFloatDType(t.dtype())) return FormatElement(t, flat);
  // f32 and bf16 widen to double exactly; the text is base/json.h's JsonDouble (std::to_chars of
  // the double), with the non-finite values as strings instead of null.
  const double v = t.GetAsDouble(flat);
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  return ShortestChars(v);
}

}  // namespace meshflow
