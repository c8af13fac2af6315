#include "meshflow/dtensor/tensor.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meshflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};

int64_t Prod(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

// Row-major multi-index of flat index f.
std::vector<int64_t> Unflatten(const std::vector<int64_t>& shape, int64_t f) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = f % shape[d];
    f /= shape[d];
  }
  return idx;
}

TEST(TensorTest, DefaultIsF32ScalarZero) {
  Tensor t;
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.rank(), 0);
  EXPECT_EQ(t.NumElements(), 1);
  EXPECT_EQ(t.NumBytes(), 4);
  EXPECT_EQ(t.data<float>()[0], 0.0f);
  EXPECT_EQ(t.ToString(), "f32[]{0}");
  EXPECT_EQ(t, Tensor::Zeros(DType::kF32, {}));
}

TEST(TensorTest, UninitializedHasTheShapeAndSizeAndIsWritable) {
  for (DType dt : kAllDTypes) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{}, {0}, {3}, {2, 3}, {2, 0, 4}}) {
      Tensor t = Tensor::Uninitialized(dt, shape);
      EXPECT_EQ(t.dtype(), dt);
      EXPECT_EQ(t.shape(), shape);
      EXPECT_EQ(t.NumBytes(), Prod(shape) * DTypeSize(dt));
      if (t.NumBytes() > 0) std::memset(t.raw(), 0, static_cast<size_t>(t.NumBytes()));
      EXPECT_EQ(t, Tensor::Zeros(dt, shape));
    }
  }
}

TEST(TensorTest, ZerosAllDTypes) {
  for (DType dt : kAllDTypes) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{}, {0}, {3}, {2, 3}, {2, 0, 4}, {1, 2, 3, 4}}) {
      const Tensor t = Tensor::Zeros(dt, shape);
      EXPECT_EQ(t.dtype(), dt);
      EXPECT_EQ(t.shape(), shape);
      EXPECT_EQ(t.rank(), static_cast<int>(shape.size()));
      EXPECT_EQ(t.NumElements(), Prod(shape));
      EXPECT_EQ(t.NumBytes(), Prod(shape) * DTypeSize(dt));
      for (int64_t i = 0; i < t.NumElements(); ++i) EXPECT_EQ(t.GetAsDouble(i), 0.0);
      for (int64_t b = 0; b < t.NumBytes(); ++b) EXPECT_EQ(t.raw()[b], std::byte{0});
    }
  }
}

TEST(TensorTest, IotaAllDTypes) {
  for (DType dt : kAllDTypes) {
    const Tensor t = Tensor::Iota(dt, {2, 3, 4});
    EXPECT_EQ(t.NumElements(), 24);
    for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(t.GetAsDouble(i), static_cast<double>(i)) << DTypeName(dt);
  }
  const Tensor f = Tensor::Iota(DType::kF32, {2, 3});
  EXPECT_THAT(std::vector<float>(f.data<float>().begin(), f.data<float>().end()), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(f.At<float>(std::vector<int64_t>{1, 2}), 5.0f);
  const Tensor i64 = Tensor::Iota(DType::kI64, {4});
  EXPECT_THAT(std::vector<int64_t>(i64.data<int64_t>().begin(), i64.data<int64_t>().end()), ElementsAre(0, 1, 2, 3));
  // bf16 rounds: 257 -> 256, 259 -> 260 (nearest even).
  const Tensor b = Tensor::Iota(DType::kBF16, {300});
  EXPECT_EQ(b.GetAsDouble(256), 256.0);
  EXPECT_EQ(b.GetAsDouble(257), 256.0);
  EXPECT_EQ(b.GetAsDouble(258), 258.0);
  EXPECT_EQ(b.GetAsDouble(259), 260.0);
  EXPECT_EQ(b.data<BFloat16>()[257], BFloat16(256.0f));
  // Empty and scalar.
  EXPECT_EQ(Tensor::Iota(DType::kI32, {0, 5}).NumElements(), 0);
  EXPECT_EQ(Tensor::Iota(DType::kI32, {}).GetAsDouble(0), 0.0);
}

template <typename T>
void CheckFromVector(std::vector<T> values) {
  const std::vector<int64_t> shape = {2, static_cast<int64_t>(values.size() / 2)};
  auto t = Tensor::FromVector<T>(shape, values);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DTypeOf<T>::value);
  EXPECT_EQ(t->shape(), shape);
  ASSERT_EQ(t->template data<T>().size(), values.size());
  EXPECT_EQ(std::memcmp(t->raw(), values.data(), values.size() * sizeof(T)), 0);
  auto bad = Tensor::FromVector<T>({3, 3}, values);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr(std::to_string(values.size()) + " values for a tensor of 9 elements"));
}

TEST(TensorTest, FromVectorAllDTypes) {
  CheckFromVector<float>({1.5f, -2.0f, 3.25f, 0.0f});
  CheckFromVector<double>({1e300, -2.0, 3.25, -0.0});
  CheckFromVector<BFloat16>({BFloat16(1.0f), BFloat16(-3.0f), BFloat16(0.5f), BFloat16(7.0f)});
  CheckFromVector<int32_t>({1, -2, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()});
  CheckFromVector<int64_t>({int64_t{1} << 62, -2, 3, std::numeric_limits<int64_t>::min()});
  // Regression: negative sizes used to reach Zeros (a huge allocation, or for {-1, -2} a tensor
  // with a negative shape and 2 elements).
  auto neg = Tensor::FromVector<float>({-1, -2}, {1.0f, 2.0f});
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(neg.status().message(), HasSubstr("negative size -1 at dim 0"));
  EXPECT_FALSE(Tensor::FromVector<int32_t>({3, -1}, {}).ok());
  auto empty = Tensor::FromVector<float>({0, 3}, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->NumElements(), 0);
  auto scalar = Tensor::FromVector<int32_t>({}, {42});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->GetAsDouble(0), 42.0);
}

TEST(TensorTest, FlatIndexAndAt) {
  Tensor t = Tensor::Iota(DType::kI32, {2, 3, 4});
  EXPECT_EQ(t.FlatIndex(std::vector<int64_t>{1, 2, 3}), 23);
  EXPECT_EQ(t.FlatIndex(std::vector<int64_t>{1, 0, 1}), 13);
  EXPECT_EQ(t.FlatIndex(std::vector<int64_t>{0, 0, 0}), 0);
  t.At<int32_t>(std::vector<int64_t>{1, 1, 1}) = -7;
  EXPECT_EQ(t.data<int32_t>()[17], -7);
  EXPECT_EQ(Tensor().FlatIndex(std::vector<int64_t>{}), 0);
}

TEST(TensorTest, GetSetAsDouble) {
  for (DType dt : kAllDTypes) {
    Tensor t = Tensor::Zeros(dt, {3});
    t.SetFromDouble(0, 5.0);
    t.SetFromDouble(1, -3.0);
    t.SetFromDouble(2, 1024.0);
    EXPECT_EQ(t.GetAsDouble(0), 5.0);
    EXPECT_EQ(t.GetAsDouble(1), -3.0);
    EXPECT_EQ(t.GetAsDouble(2), 1024.0);
  }
  Tensor b = Tensor::Zeros(DType::kBF16, {1});
  b.SetFromDouble(0, 1.0 + 1.0 / 256);  // tie -> 1
  EXPECT_EQ(b.GetAsDouble(0), 1.0);
  b.SetFromDouble(0, std::nan(""));
  EXPECT_TRUE(std::isnan(b.GetAsDouble(0)));
  Tensor i = Tensor::Zeros(DType::kI32, {1});
  i.SetFromDouble(0, 2.9);  // truncation, like static_cast
  EXPECT_EQ(i.GetAsDouble(0), 2.0);
}

// Reference slice by element-wise copy through multi-indices.
Tensor RefSlice(const Tensor& t, const Box& box) {
  Tensor out = Tensor::Zeros(t.dtype(), box.shape);
  const int64_t es = DTypeSize(t.dtype());
  for (int64_t f = 0; f < out.NumElements(); ++f) {
    std::vector<int64_t> idx = Unflatten(box.shape, f);
    for (size_t d = 0; d < idx.size(); ++d) idx[d] += box.offset[d];
    std::memcpy(out.raw() + f * es, t.raw() + t.FlatIndex(idx) * es, static_cast<size_t>(es));
  }
  return out;
}

// Random box inside `shape` (possibly empty in some dims).
Box RandomBox(std::mt19937& rng, const std::vector<int64_t>& shape) {
  Box b;
  for (int64_t n : shape) {
    const int64_t lo = std::uniform_int_distribution<int64_t>(0, n)(rng);
    const int64_t hi = std::uniform_int_distribution<int64_t>(lo, n)(rng);
    b.offset.push_back(lo);
    b.shape.push_back(hi - lo);
  }
  return b;
}

std::vector<int64_t> RandomShape(std::mt19937& rng, int rank, int64_t max_size) {
  std::vector<int64_t> s;
  for (int d = 0; d < rank; ++d) s.push_back(std::uniform_int_distribution<int64_t>(0, max_size)(rng));
  return s;
}

TEST(TensorTest, SliceHandPicked) {
  const Tensor t = Tensor::Iota(DType::kF32, {2, 3});
  const Tensor block = t.Slice(Box{{0, 1}, {2, 2}});
  EXPECT_THAT(block.shape(), ElementsAre(2, 2));
  EXPECT_EQ(block, *Tensor::FromVector<float>({2, 2}, {1, 2, 4, 5}));
  const Tensor row = t.Slice(Box{{1, 0}, {1, 3}});
  EXPECT_EQ(row, *Tensor::FromVector<float>({1, 3}, {3, 4, 5}));
  const Tensor empty = t.Slice(Box{{1, 3}, {1, 0}});
  EXPECT_THAT(empty.shape(), ElementsAre(1, 0));
  EXPECT_EQ(empty.NumBytes(), 0);
  EXPECT_EQ(t.Slice(FullBox(t.shape())), t);
  const Tensor s = Tensor::Iota(DType::kI64, {});
  EXPECT_EQ(s.Slice(Box{{}, {}}), s);
}

TEST(TensorTest, SliceAndInsertRandomOneToFourDims) {
  std::mt19937 rng(20240611);
  for (int iter = 0; iter < 400; ++iter) {
    const int rank = 1 + iter % 4;
    const DType dt = kAllDTypes[iter % 5];
    const std::vector<int64_t> shape = RandomShape(rng, rank, rank <= 2 ? 7 : 4);
    Tensor t = Tensor::Iota(dt, shape);
    const Box box = RandomBox(rng, shape);
    const Tensor got = t.Slice(box);
    ASSERT_EQ(got, RefSlice(t, box)) << "shape rank " << rank << " box " << box.ToString();

    // Insert a block of distinct values at a random box, compare element-wise.
    Tensor block = Tensor::Zeros(dt, box.shape);
    for (int64_t i = 0; i < block.NumElements(); ++i) block.SetFromDouble(i, -1.0 - static_cast<double>(i % 100));
    Tensor dst = t;
    dst.Insert(box.offset, block);
    ASSERT_EQ(dst.Slice(box), block);
    const int64_t es = DTypeSize(dt);
    for (int64_t f = 0; f < dst.NumElements(); ++f) {
      const std::vector<int64_t> idx = Unflatten(shape, f);
      if (!box.Contains(idx)) {
        ASSERT_EQ(std::memcmp(dst.raw() + f * es, t.raw() + f * es, static_cast<size_t>(es)), 0)
            << "element " << f << " outside the box changed";
      }
    }
  }
}

TEST(TensorTest, InsertHandPicked) {
  Tensor t = Tensor::Zeros(DType::kI32, {3, 4});
  t.Insert(std::vector<int64_t>{1, 1}, *Tensor::FromVector<int32_t>({2, 2}, {1, 2, 3, 4}));
  EXPECT_EQ(t, *Tensor::FromVector<int32_t>({3, 4}, {0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0}));
  // Inserting an empty block changes nothing.
  const Tensor before = t;
  t.Insert(std::vector<int64_t>{3, 0}, Tensor::Zeros(DType::kI32, {0, 4}));
  t.Insert(std::vector<int64_t>{0, 2}, Tensor::Zeros(DType::kI32, {3, 0}));
  EXPECT_EQ(t, before);
  // Full-width rows (the contiguous fast path).
  t.Insert(std::vector<int64_t>{1, 0}, *Tensor::FromVector<int32_t>({2, 4}, {9, 9, 9, 9, 8, 8, 8, 8}));
  EXPECT_EQ(t, *Tensor::FromVector<int32_t>({3, 4}, {0, 0, 0, 0, 9, 9, 9, 9, 8, 8, 8, 8}));
  // Rank 0.
  Tensor s;
  s.Insert(std::vector<int64_t>{}, *Tensor::FromVector<float>({}, {3.5f}));
  EXPECT_EQ(s.GetAsDouble(0), 3.5);
}

TEST(CopyRegionTest, BetweenDifferentShapesAndOffsets) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = 1 + iter % 4;
    const std::vector<int64_t> src_shape = RandomShape(rng, rank, 5);
    const std::vector<int64_t> dst_shape = RandomShape(rng, rank, 5);
    std::vector<int64_t> extent(rank), so(rank), doff(rank);
    for (int d = 0; d < rank; ++d) {
      const int64_t max_e = std::min(src_shape[d], dst_shape[d]);
      extent[d] = std::uniform_int_distribution<int64_t>(0, max_e)(rng);
      so[d] = std::uniform_int_distribution<int64_t>(0, src_shape[d] - extent[d])(rng);
      doff[d] = std::uniform_int_distribution<int64_t>(0, dst_shape[d] - extent[d])(rng);
    }
    const Tensor src = Tensor::Iota(DType::kF64, src_shape);
    Tensor dst = Tensor::Zeros(DType::kF64, dst_shape);
    for (int64_t i = 0; i < dst.NumElements(); ++i) dst.SetFromDouble(i, -1);
    CopyRegion(src.raw(), src.shape(), so, dst.raw(), dst.shape(), doff, extent, 8);
    for (int64_t f = 0; f < dst.NumElements(); ++f) {
      const std::vector<int64_t> idx = Unflatten(dst_shape, f);
      bool inside = true;
      std::vector<int64_t> sidx(rank);
      for (int d = 0; d < rank; ++d) {
        inside = inside && idx[d] >= doff[d] && idx[d] < doff[d] + extent[d];
        sidx[d] = idx[d] - doff[d] + so[d];
      }
      const double want = inside ? static_cast<double>(src.FlatIndex(sidx)) : -1.0;
      ASSERT_EQ(dst.GetAsDouble(f), want) << "iter " << iter << " element " << f;
    }
  }
}

TEST(CopyRegionTest, ScalarAndElemSize) {
  const int16_t src = 0x1234;
  int16_t dst = 0;
  CopyRegion(reinterpret_cast<const std::byte*>(&src), {}, {}, reinterpret_cast<std::byte*>(&dst), {}, {}, {}, 2);
  EXPECT_EQ(dst, 0x1234);
}

TEST(TensorTest, EqualityIsBitExact) {
  const Tensor a = *Tensor::FromVector<float>({2}, {0.0f, 1.0f});
  const Tensor b = *Tensor::FromVector<float>({2}, {-0.0f, 1.0f});
  EXPECT_FALSE(a == b);  // 0.0 == -0.0 numerically but not bitwise
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor n1 = *Tensor::FromVector<float>({1}, {nan});
  EXPECT_EQ(n1, n1);  // same NaN bits
  EXPECT_FALSE(*Tensor::FromVector<float>({2}, {1, 2}) == *Tensor::FromVector<float>({1, 2}, {1, 2}));
  EXPECT_FALSE(Tensor::Zeros(DType::kI32, {2}) == Tensor::Zeros(DType::kF32, {2}));
}

TEST(TensorTest, ToString) {
  EXPECT_EQ(Tensor::Iota(DType::kF32, {2, 3}).ToString(), "f32[2,3]{0, 1, 2, 3, 4, 5}");
  EXPECT_EQ(Tensor::Iota(DType::kI64, {0}).ToString(), "i64[0]{}");
  EXPECT_EQ(Tensor::Iota(DType::kBF16, {2}).ToString(), "bf16[2]{0, 1}");
  EXPECT_EQ(Tensor::Zeros(DType::kF64, {1, 1}).ToString(), "f64[1,1]{0}");
  EXPECT_EQ((*Tensor::FromVector<float>({2}, {0.5f, -2.25f})).ToString(), "f32[2]{0.5, -2.25}");
  const std::string big = Tensor::Iota(DType::kI32, {100}).ToString();
  EXPECT_THAT(big, HasSubstr("62, 63, ...}"));
  EXPECT_THAT(big, ::testing::Not(HasSubstr("64")));
  EXPECT_EQ(Tensor::Iota(DType::kI32, {64}).ToString().find("..."), std::string::npos);
}

TEST(FormatElementTest, IntegersExactly) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not a double
  const Tensor i64 = *Tensor::FromVector<int64_t>(
      {5}, {1000001, big, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::lowest(), -7});
  EXPECT_EQ(FormatElement(i64, 0), "1000001");
  EXPECT_EQ(FormatElement(i64, 1), "9007199254740993");
  EXPECT_EQ(FormatElement(i64, 2), "9223372036854775807");
  EXPECT_EQ(FormatElement(i64, 3), "-9223372036854775808");
  EXPECT_EQ(FormatElement(i64, 4), "-7");
  EXPECT_EQ(FormatElementJson(i64, 1), "9007199254740993");
  const Tensor i32 = *Tensor::FromVector<int32_t>({2}, {std::numeric_limits<int32_t>::lowest(), 16777217});
  EXPECT_EQ(FormatElement(i32, 0), "-2147483648");
  EXPECT_EQ(FormatElement(i32, 1), "16777217");
}

TEST(FormatElementTest, FloatsRoundTrip) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor f32 = *Tensor::FromVector<float>(
      {8}, {0.1f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1000001.0f, 16777216.0f, 1e-45f});
  EXPECT_EQ(FormatElement(f32, 0), "0.1");
  EXPECT_EQ(FormatElement(f32, 1), "-0");
  EXPECT_EQ(FormatElement(f32, 2), "inf");
  EXPECT_EQ(FormatElement(f32, 3), "-inf");
  EXPECT_EQ(FormatElement(f32, 4), "nan");
  EXPECT_EQ(FormatElement(f32, 5), "1000001");
  EXPECT_EQ(FormatElementJson(f32, 2), "\"inf\"");
  EXPECT_EQ(FormatElementJson(f32, 3), "\"-inf\"");
  EXPECT_EQ(FormatElementJson(f32, 4), "\"nan\"");
  EXPECT_EQ(FormatElementJson(f32, 1), "-0");
  for (int64_t i : {0, 1, 2, 3, 5, 6, 7}) {
    const std::string s = FormatElement(f32, i);
    float back = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), back);
    ASSERT_EQ(r.ec, std::errc()) << s;
    EXPECT_EQ(std::bit_cast<uint32_t>(back), std::bit_cast<uint32_t>(f32.data<float>()[i])) << s;
  }
  const Tensor f64 = *Tensor::FromVector<double>({3}, {0.1, 1.0 / 3.0, 9007199254740993.0});
  EXPECT_EQ(FormatElement(f64, 0), "0.1");
  EXPECT_EQ(FormatElement(f64, 1), "0.3333333333333333");
  // Random bit patterns of f32 and f64 round-trip bit for bit (NaNs aside).
  std::mt19937_64 rng(7);
  for (int k = 0; k < 2000; ++k) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    const double d = std::bit_cast<double>(static_cast<uint64_t>(rng()));
    if (std::isnan(f) || std::isnan(d)) continue;
    const Tensor tf = *Tensor::FromVector<float>({1}, {f});
    const Tensor td = *Tensor::FromVector<double>({1}, {d});
    const std::string sf = FormatElement(tf, 0), sd = FormatElement(td, 0);
    float bf = 0;
    double bd = 0;
    std::from_chars(sf.data(), sf.data() + sf.size(), bf);
    std::from_chars(sd.data(), sd.data() + sd.size(), bd);
    EXPECT_EQ(std::bit_cast<uint32_t>(bf), std::bit_cast<uint32_t>(f)) << sf;
    EXPECT_EQ(std::bit_cast<uint64_t>(bd), std::bit_cast<uint64_t>(d)) << sd;
  }
}

// JSON readers see doubles: FormatElementJson prints a float element's exact value as a double.
TEST(FormatElementTest, JsonPrintsTheExactValueAsADouble) {
  Tensor bf = Tensor::Zeros(DType::kBF16, {3});
  bf.data<BFloat16>()[0] = BFloat16(528.0f);
  bf.data<BFloat16>()[1] = BFloat16(0.1f);
  bf.data<BFloat16>()[2] = BFloat16(-3.0f);
  ASSERT_EQ(static_cast<float>(bf.data<BFloat16>()[0]), 528.0f);
  EXPECT_EQ(FormatElementJson(bf, 0), "528");
  EXPECT_EQ(FormatElement(bf, 0), "5.3e+02");  // the shortest bf16 text: 530 to a double reader
  EXPECT_EQ(FormatElementJson(bf, 1), "0.10009765625");
  EXPECT_EQ(FormatElementJson(bf, 2), "-3");
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor f32 = *Tensor::FromVector<float>(
      {7}, {0.1f, -0.0f, 1000001.0f, 1e-45f, inf, -inf, std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(FormatElementJson(f32, 0), "0.10000000149011612");
  EXPECT_EQ(FormatElementJson(f32, 1), "-0");
  EXPECT_EQ(FormatElementJson(f32, 2), "1000001");
  EXPECT_EQ(FormatElementJson(f32, 3), "1.401298464324817e-45");
  EXPECT_EQ(FormatElementJson(f32, 4), "\"inf\"");
  EXPECT_EQ(FormatElementJson(f32, 5), "\"-inf\"");
  EXPECT_EQ(FormatElementJson(f32, 6), "\"nan\"");
  const Tensor f64 = *Tensor::FromVector<double>({2}, {0.1, 9007199254740993.0});
  EXPECT_EQ(FormatElementJson(f64, 0), "0.1");
  EXPECT_EQ(FormatElementJson(f64, 1), "9007199254740992");
  // Every finite bf16, and random f32 bit patterns: a double reader gets exactly the element.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    BFloat16 v;
    v.bits = static_cast<uint16_t>(bits);
    if (!std::isfinite(static_cast<float>(v))) continue;
    bf.data<BFloat16>()[0] = v;
    const std::string s = FormatElementJson(bf, 0);
    double back = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), back);
    ASSERT_EQ(r.ec, std::errc()) << s;
    ASSERT_EQ(back, static_cast<double>(static_cast<float>(v))) << s;
  }
  std::mt19937_64 rng(11);
  for (int k = 0; k < 2000; ++k) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isfinite(f)) continue;
    const Tensor t = *Tensor::FromVector<float>({1}, {f});
    const std::string s = FormatElementJson(t, 0);
    double back = 0;
    std::from_chars(s.data(), s.data() + s.size(), back);
    EXPECT_EQ(back, static_cast<double>(f)) << s;
  }
}

TEST(FormatElementTest, BFloat16ShortestThatRoundTrips) {
  Tensor t = Tensor::Zeros(DType::kBF16, {1});
  auto format = [&](float f) {
    t.data<BFloat16>()[0] = BFloat16(f);
    return FormatElement(t, 0);
  };
  EXPECT_EQ(format(0.1f), "0.1");
  EXPECT_EQ(format(-0.0f), "-0");
  EXPECT_EQ(format(257.0f), "256");  // bf16 holds 256 and 258, 257 rounds to even
  EXPECT_EQ(format(3.0f), "3");
  EXPECT_EQ(format(-std::numeric_limits<float>::infinity()), "-inf");
  // Every finite bf16 round-trips through float parsing.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    BFloat16 v;
    v.bits = static_cast<uint16_t>(bits);
    if (std::isnan(static_cast<float>(v))) continue;
    t.data<BFloat16>()[0] = v;
    const std::string s = FormatElement(t, 0);
    float back = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), back);
    ASSERT_EQ(r.ec, std::errc()) << s;
    ASSERT_EQ(BFloat16(back).bits, v.bits) << s;
  }
}

}  // namespace
}  // namespace meshflow
