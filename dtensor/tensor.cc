#include "meshflow/dtensor/tensor.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <sstream>

namespace meshflow {

Tensor::Tensor(const Tensor& other) : dtype_(other.dtype_), shape_(other.shape_), bytes_() {
  bytes_.resize(other.bytes_.size());  // default-initialized: no fill before the copy
  if (!bytes_.empty()) std::memcpy(bytes_.data(), other.bytes_.data(), bytes_.size());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this == &other) return *this;
  dtype_ = other.dtype_;
  shape_ = other.shape_;
  bytes_.resize(other.bytes_.size());
  if (!bytes_.empty()) std::memcpy(bytes_.data(), other.bytes_.data(), bytes_.size());
  return *this;
}

int64_t Tensor::NumElements() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

Tensor Tensor::Zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.bytes_.assign(static_cast<size_t>(t.NumElements() * DTypeSize(dtype)), std::byte{0});
  return t;
}

Tensor Tensor::Uninitialized(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.bytes_ = Bytes();  // no 4-byte default to copy over
  t.bytes_.resize(static_cast<size_t>(t.NumElements() * DTypeSize(dtype)));
  return t;
}

Tensor Tensor::Uninitialized(DType dtype, std::vector<int64_t> shape, TensorBuffer reuse) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.bytes_ = std::move(reuse);
  t.bytes_.resize(static_cast<size_t>(t.NumElements() * DTypeSize(dtype)));  // within capacity: no allocation
  return t;
}

TensorBuffer Tensor::ReleaseBuffer() {
  Bytes out = std::move(bytes_);
  bytes_ = Bytes();
  shape_.assign(1, 0);
  return out;
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

void CopyRegion(const std::byte* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                std::byte* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                std::span<const int64_t> extent, int64_t elem_size) {
  const int r = static_cast<int>(extent.size());
  for (int d = 0; d < r; ++d) {
    if (extent[d] == 0) return;
  }
  if (r == 0) {
    std::memcpy(dst, src, static_cast<size_t>(elem_size));
    return;
  }
  // Merge trailing dims that are contiguous in both src and dst into one run.
  int inner = r - 1;
  int64_t run = extent[inner];
  while (inner > 0 && extent[inner] == src_shape[inner] && extent[inner] == dst_shape[inner]) {
    --inner;
    run *= extent[inner];
  }
  std::vector<int64_t> src_strides(r, 1), dst_strides(r, 1);
  for (int d = r - 2; d >= 0; --d) {
    src_strides[d] = src_strides[d + 1] * src_shape[d + 1];
    dst_strides[d] = dst_strides[d + 1] * dst_shape[d + 1];
  }
  std::vector<int64_t> idx(inner, 0);  // counters over dims [0, inner)
  const size_t run_bytes = static_cast<size_t>(run * elem_size);
  while (true) {
    int64_t so = 0, doff = 0;
    for (int d = 0; d < r; ++d) {
      const int64_t i = d < inner ? idx[d] : 0;
      so += (src_offset[d] + i) * src_strides[d];
      doff += (dst_offset[d] + i) * dst_strides[d];
    }
    std::memcpy(dst + doff * elem_size, src + so * elem_size, run_bytes);
    int d = inner - 1;
    while (d >= 0 && ++idx[d] == extent[d]) idx[d--] = 0;
    if (d < 0) break;
  }
}

Tensor Tensor::Slice(const Box& box) const {
  Tensor out = Uninitialized(dtype_, box.shape);  // CopyRegion writes every byte
  const std::vector<int64_t> zero(box.shape.size(), 0);
  CopyRegion(raw(), shape_, box.offset, out.raw(), out.shape_, zero, box.shape, DTypeSize(dtype_));
  return out;
}

void Tensor::Insert(std::span<const int64_t> offset, const Tensor& block) {
  const std::vector<int64_t> zero(block.shape_.size(), 0);
  CopyRegion(block.raw(), block.shape_, zero, raw(), shape_, offset, block.shape_, DTypeSize(dtype_));
}

std::string Tensor::ToString() const {
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
  std::string s = FormatElement(t, flat);
  if (IsFloatDType(t.dtype()) && !std::isfinite(t.GetAsDouble(flat))) return "\"" + s + "\"";
  return s;
}

}  // namespace meshflow
