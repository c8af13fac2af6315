// CudaMatmulKernel (cuBLAS) vs the CPU kernel MatmulKernel (OpenBLAS): shapes with batch broadcasting
// of every kind, empty dims, f32/f64/bf16; plus the device entry point and argument errors. Tests
// that need a GPU skip without one.
#include "meshflow/ops/cuda/cublas_matmul.h"

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/cuda/cuda_test_util.h"
#include "meshflow/ops/kernels.h"

namespace meshflow {
namespace {

Tensor Random(DType dtype, std::vector<int64_t> shape, std::mt19937& rng) {
  Tensor t = Tensor::Zeros(dtype, std::move(shape));
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, u(rng));
  return t;
}

TEST(CudaMatmulTest, ShapeErrorsNeedNoDevice) {
  EXPECT_EQ(MatmulOutputShape(std::vector<int64_t>{3}, std::vector<int64_t>{3, 2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MatmulOutputShape(std::vector<int64_t>{2, 3}, std::vector<int64_t>{4, 2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MatmulOutputShape(std::vector<int64_t>{2, 2, 3}, std::vector<int64_t>{3, 3, 2}).status().code(),
            StatusCode::kInvalidArgument);
  auto shape = MatmulOutputShape(std::vector<int64_t>{5, 1, 2, 3}, std::vector<int64_t>{4, 3, 7});
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(*shape, (std::vector<int64_t>{5, 4, 2, 7}));
  Tensor a = Tensor::Zeros(DType::kI32, {2, 2});
  EXPECT_EQ(CudaMatmulKernel(a, a).status().code(), StatusCode::kInvalidArgument);
}

TEST(CudaMatmulTest, MatchesCpuKernel) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(3);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3}, {3, 4}},          {{1, 1}, {1, 1}},          {{64, 96}, {96, 33}},
      {{4, 5, 6}, {4, 6, 7}},    {{4, 5, 6}, {6, 7}},       {{5, 6}, {3, 6, 2}},
      {{2, 1, 3, 4}, {5, 4, 2}}, {{3, 1, 2, 2}, {1, 4, 2, 3}}, {{0, 3}, {3, 2}},
      {{2, 0}, {0, 3}},          {{0, 2, 3}, {3, 4}},       {{129, 257}, {257, 65}}};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    for (const auto& [sa, sb] : shapes) {
      Tensor a = Random(dtype, sa, rng), b = Random(dtype, sb, rng);
      auto want = MatmulKernel(a, b);
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = CudaMatmulKernel(a, b);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->shape(), want->shape());
      ASSERT_EQ(got->dtype(), dtype);
      const double tol = dtype == DType::kF64 ? 1e-12 : dtype == DType::kF32 ? 1e-5 : 1e-2;
      for (int64_t i = 0; i < want->NumElements(); ++i) {
        const double w = want->GetAsDouble(i), g = got->GetAsDouble(i);
        ASSERT_LE(std::abs(w - g), tol * (1 + std::abs(w)))
            << DTypeName(dtype) << " " << a.ToString() << " element " << i << ": " << g << " vs " << w;
      }
    }
  }
}

TEST(CudaMatmulTest, DeviceEntryPoint) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};  // [2, 3]
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};  // [3, 2]
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  ASSERT_EQ(cudaMalloc(&da, 24), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, 24), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, 16), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), 24, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), 24, cudaMemcpyHostToDevice), cudaSuccess);
  const int64_t sa[] = {2, 3}, sb[] = {3, 2};
  ASSERT_TRUE(CudaMatmulDevice(da, sa, db, sb, dc, DType::kF32, nullptr).ok());
  std::vector<float> c(4);
  ASSERT_EQ(cudaMemcpy(c.data(), dc, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  EXPECT_EQ(CudaMatmulDevice(nullptr, sa, db, sb, dc, DType::kF32, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaMatmulDevice(da, sa, db, sb, dc, DType::kI32, nullptr).code(), StatusCode::kInvalidArgument);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

}  // namespace
}  // namespace meshflow
