// Device pack/unpack, fill and rank-order reduction kernels vs their CPU references (CopyRegion in
// runtime/region_copy.h, a host fill, ReduceBuffers in collectives/reduce.h). Argument checks run
// everywhere; kernel tests skip without a CUDA device.
#include "meshflow/runtime/cuda/device_kernels.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/collectives/reduce.h"
#include "meshflow/cuda/cuda_test_util.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/runtime/region_copy.h"

namespace meshflow {
namespace {

// Device buffer holding a copy of `bytes` host bytes.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : size(n) { EXPECT_EQ(cudaMalloc(&p, n == 0 ? 1 : n), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  void Upload(const void* src) { ASSERT_EQ(cudaMemcpy(p, src, size, cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<std::byte> Download() const {
    std::vector<std::byte> out(size);
    EXPECT_EQ(cudaMemcpy(out.data(), p, size, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  void* p = nullptr;
  size_t size;
};

TEST(CopyRegionOnDeviceTest, ArgumentErrorsNeedNoDevice) {
  const int64_t shape[] = {4, 4}, off[] = {0, 0}, ext[] = {2, 2}, bad_off[] = {3, 0};
  char dummy[64];
  EXPECT_EQ(CopyRegionOnDevice(dummy, shape, off, dummy, shape, bad_off, ext, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  const int64_t rank1[] = {4};
  EXPECT_EQ(CopyRegionOnDevice(dummy, rank1, off, dummy, shape, off, ext, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CopyRegionOnDevice(dummy, shape, off, dummy, shape, off, ext, 0, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CopyRegionOnDevice(nullptr, shape, off, dummy, shape, off, ext, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  const int64_t empty[] = {2, 0};  // empty extent: nothing to do, null pointers allowed
  EXPECT_TRUE(CopyRegionOnDevice(nullptr, shape, off, nullptr, shape, off, empty, 4, nullptr).ok());
  const std::vector<int64_t> big(9, 1);
  Status s = CopyRegionOnDevice(dummy, big, big, dummy, big, big, big, 4, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 9"), std::string::npos) << s;
  const float one = 1.0f;
  EXPECT_EQ(FillOnDevice(dummy, -1, &one, 4, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FillOnDevice(dummy, 4, &one, 0, nullptr).code(), StatusCode::kInvalidArgument);
  s = FillOnDevice(dummy, 4, &one, kMaxDeviceFillElemSize + 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("elem_size 65"), std::string::npos) << s;
  EXPECT_EQ(FillOnDevice(nullptr, 4, &one, 4, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FillOnDevice(dummy, 4, nullptr, 4, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FillOnDevice(dummy, int64_t{1} << 62, &one, 4, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(FillOnDevice(nullptr, 0, nullptr, 4, nullptr).ok());  // nothing to do
  EXPECT_EQ(ReduceOnDevice(dummy, 0, 4, 4, dummy, DType::kF32, ReduceOp::kSum, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReduceOnDevice(dummy, 2, 2, 4, dummy, DType::kF32, ReduceOp::kSum, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(CopyRegionOnDeviceTest, RandomBoxesMatchCpuCopyRegion) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(7);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 200; ++trial) {
    const int rank = uni(0, 5);
    const int64_t elem = std::vector<int64_t>{1, 2, 4, 8, 16, 3, 12}[static_cast<size_t>(uni(0, 6))];
    std::vector<int64_t> src_shape(rank), dst_shape(rank), src_off(rank), dst_off(rank), ext(rank);
    for (int d = 0; d < rank; ++d) {
      ext[d] = uni(0, 5);
      src_shape[d] = ext[d] + uni(0, 3);
      dst_shape[d] = ext[d] + uni(0, 3);
      src_off[d] = uni(0, static_cast<int>(src_shape[d] - ext[d]));
      dst_off[d] = uni(0, static_cast<int>(dst_shape[d] - ext[d]));
    }
    int64_t src_n = elem, dst_n = elem;
    for (int d = 0; d < rank; ++d) src_n *= src_shape[d], dst_n *= dst_shape[d];
    std::vector<std::byte> src(static_cast<size_t>(src_n)), dst(static_cast<size_t>(dst_n));
    for (auto& b : src) b = static_cast<std::byte>(uni(0, 255));
    for (auto& b : dst) b = static_cast<std::byte>(uni(0, 255));
    std::vector<std::byte> want = dst;
    CopyRegion(src.data(), src_shape, src_off, want.data(), dst_shape, dst_off, ext, elem);
    DeviceBuffer dsrc(src.size()), ddst(dst.size());
    dsrc.Upload(src.data());
    ddst.Upload(dst.data());
    ASSERT_TRUE(CopyRegionOnDevice(dsrc.p, src_shape, src_off, ddst.p, dst_shape, dst_off, ext, elem, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(ddst.Download(), want) << "trial " << trial << " rank " << rank << " elem " << elem;
  }
}

TEST(FillOnDeviceTest, RandomFillsMatchAHostFill) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(5);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 200; ++trial) {
    // Element sizes of every kernel path, offsets that break alignment, uniform and mixed values.
    const int64_t elem = std::vector<int64_t>{1, 2, 4, 8, 16, 3, 12, 64}[static_cast<size_t>(uni(0, 7))];
    const int64_t count = uni(0, 3000), offset = uni(0, 9);
    std::vector<std::byte> value(static_cast<size_t>(elem));
    const bool uniform = uni(0, 3) == 0;
    const auto first = static_cast<std::byte>(uni(0, 255));
    for (auto& b : value) b = uniform ? first : static_cast<std::byte>(uni(0, 255));
    const int64_t total = offset + count * elem + 7;
    std::vector<std::byte> before(static_cast<size_t>(total));
    for (auto& b : before) b = static_cast<std::byte>(uni(0, 255));
    std::vector<std::byte> want = before;
    for (int64_t i = 0; i < count; ++i) std::memcpy(want.data() + offset + i * elem, value.data(), value.size());
    DeviceBuffer d(before.size());
    d.Upload(before.data());
    ASSERT_TRUE(FillOnDevice(static_cast<std::byte*>(d.p) + offset, count, value.data(), elem, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d.Download(), want) << "trial " << trial << " elem " << elem << " count " << count << " offset " << offset;
  }
}

TEST(ReduceOnDeviceTest, MatchesReduceBuffersBitForBit) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(11);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      for (int n : {1, 2, 3, 7}) {
        const int64_t count = 1000, stride = 1003;
        const int64_t es = DTypeSize(dtype);
        std::vector<std::byte> in(static_cast<size_t>(n * stride * es));
        VisitDType(dtype, [&](auto tag) {
          using T = decltype(tag);
          T* p = reinterpret_cast<T*>(in.data());
          std::uniform_real_distribution<double> real(-100, 100);
          for (int64_t i = 0; i < n * stride; ++i) {
            double v = real(rng);
            if constexpr (std::is_same_v<T, BFloat16>) {
              p[i] = BFloat16(static_cast<float>(v));
            } else if constexpr (std::is_integral_v<T>) {
              // Large magnitudes so that i32 sums wrap and i64 averages need 128 bits.
              p[i] = static_cast<T>(static_cast<int64_t>(v * 1e7) * (sizeof(T) == 8 ? 1000000000LL : 30LL));
            } else {
              p[i] = static_cast<T>(v);
            }
          }
          if constexpr (!std::is_integral_v<T> && !std::is_same_v<T, BFloat16>) {
            p[5] = std::numeric_limits<T>::quiet_NaN();     // NaN propagates
            p[6] = static_cast<T>(0.0);
            if (n >= 2) p[stride + 6] = static_cast<T>(-0.0);  // signed zeros: the earliest wins
          }
        });
        std::vector<const void*> inputs;
        for (int r = 0; r < n; ++r) inputs.push_back(in.data() + r * stride * es);
        std::vector<std::byte> want(static_cast<size_t>(count * es));
        ASSERT_TRUE(ReduceBuffers(inputs, want.data(), count, dtype, op).ok());
        DeviceBuffer din(in.size()), dout(want.size());
        din.Upload(in.data());
        ASSERT_TRUE(ReduceOnDevice(din.p, n, stride, count, dout.p, dtype, op, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(dout.Download(), want) << DTypeName(dtype) << " " << ReduceOpName(op) << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace meshflow
