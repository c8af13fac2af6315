// Every example in cuda/cuda_status.h, runtime/cuda/cuda_device.h, runtime/cuda/device_kernels.h,
// runtime/cuda/device_kernels_launch.h and ops/cuda/cublas_matmul.h is compiled here; keep them
// identical.
//
// Examples that need a GPU are compiled and linked in functions that no test calls (the CUDA
// tests of //runtime/cuda and //ops/cuda run the same calls on a device), or run only where a device
// is present; what runs without a device is checked.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/cuda/cublas_matmul.h"
#include "meshflow/runtime/allocator.h"
#include "meshflow/runtime/cuda/cuda_device.h"
#include "meshflow/runtime/cuda/device_kernels.h"
#include "meshflow/runtime/cuda/device_kernels_launch.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {
namespace doc_examples {

// ops/cuda/cublas_matmul.h (a, b: host tensors; d_a, d_b, d_c: device buffers; stream). Needs a
// GPU: compiled, not run.
Status CublasMatmulExample(const Tensor& a, const Tensor& b, const void* d_a, const void* d_b, void* d_c,
                           cudaStream_t stream) {
  MF_ASSIGN_OR_RETURN(Tensor c, CudaMatmulKernel(a, b));              // host tensors
  const int64_t a_shape[] = {8, 64, 32}, b_shape[] = {32, 16};        // d_c: [8, 64, 16]
  MF_RETURN_IF_ERROR(CudaMatmulDevice(d_a, a_shape, d_b, b_shape, d_c, DType::kF32, stream));
  return Status::Ok();
}

// runtime/cuda/device_kernels.h (d_tensor: a device 4x8 f32 tensor; d_block: a device buffer
// of 2x4 floats; stream).
Status CopyRegionOnDeviceExample(const void* d_tensor, void* d_block, cudaStream_t stream) {
  // Pack block [1:3, 2:6] of a device 4x8 f32 tensor into a dense 2x4 device buffer:
  const int64_t shape[] = {4, 8}, off[] = {1, 2}, ext[] = {2, 4}, zero[] = {0, 0};
  MF_RETURN_IF_ERROR(CopyRegionOnDevice(d_tensor, shape, off, d_block, ext, zero, ext, 4, stream));
  // Set the 8 floats of the block to 1.5 (the value is read from host memory during the call):
  const float one_and_a_half = 1.5f;
  MF_RETURN_IF_ERROR(FillOnDevice(d_block, 8, &one_and_a_half, sizeof(float), stream));
  return Status::Ok();
}

// runtime/cuda/device_kernels_launch.h (stream; the fields of `a` are filled in before the launch).
cudaError_t LaunchBoxCopyExample(const void* src, void* dst, cudaStream_t stream) {
  using device_kernels_internal::BoxCopyArgs;
  using device_kernels_internal::LaunchBoxCopy;
  BoxCopyArgs a;  // shapes, offsets and extent of a row-major region copy (rank <= kMaxBoxRank)
  a.src = src;
  a.dst = dst;
  a.rank = 1;
  a.elem_size = 4;
  a.src_shape[0] = a.dst_shape[0] = a.extent[0] = 8;
  cudaError_t e = LaunchBoxCopy(a, stream);
  return e;
}

// runtime/cuda/cuda_device.h (needs a GPU: run only where one is present).
Status CudaDeviceExample() {
  MF_ASSIGN_OR_RETURN(DeviceRuntime* rt, GetDeviceRuntime(Device::Cuda(0)));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, rt->NewStream("copy"));
  std::vector<float> host(256, 1.0f), back(256);
  MF_ASSIGN_OR_RETURN(void* d, rt->allocator().Allocate(1024, s.get()));
  const float two = 2.0f;
  MF_RETURN_IF_ERROR(s->Enqueue([&]() -> Status {        // runs now; the copies run later
    MF_RETURN_IF_ERROR(rt->Copy(d, host.data(), 1024, *s));
    MF_RETURN_IF_ERROR(rt->Fill(d, 128, &two, sizeof(float), *s));   // first half := 2
    return rt->Copy(back.data(), d, 1024, *s);
  }));
  MF_RETURN_IF_ERROR(s->Synchronize());                    // back: 128 x 2.0f, 128 x 1.0f
  rt->allocator().Deallocate(d, 1024, s.get());

  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i], i < 128 ? 2.0f : 1.0f) << i;
  return Status::Ok();
}

}  // namespace doc_examples

namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// cuda/cuda_status.h (dst, src, n, s: the arguments of a device copy).
Status CudaStatusExample(void* dst, const void* src, size_t n, cudaStream_t s) {
  MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s), "cudaMemcpyAsync",
                               "nccl all_gather on group [0,1]"));
  // INTERNAL: cudaMemcpyAsync failed: cudaErrorInvalidValue (invalid argument) in nccl all_gather ...
  return Status::Ok();
}

TEST(CudaStatusDocTest, CheckCudaMessage) {
  // The message of the example's comment, for the error it names.
  EXPECT_EQ(CheckCuda(cudaErrorInvalidValue, "cudaMemcpyAsync", "nccl all_gather on group [0,1]").ToString(),
            "INTERNAL: cudaMemcpyAsync failed: cudaErrorInvalidValue (invalid argument) in nccl all_gather on "
            "group [0,1]");

  // The example itself, copying 16 bytes between null pointers: an error on every machine (with a
  // device the invalid value of the comment; without one, no device or no driver).
  const Status s = CudaStatusExample(nullptr, nullptr, 16, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), StartsWith("cudaMemcpyAsync failed: "));
  EXPECT_THAT(s.message(), EndsWith(" in nccl all_gather on group [0,1]"));
  if (NoCudaDeviceReason().empty()) {
    EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
    EXPECT_THAT(s.message(), HasSubstr("cudaErrorInvalidValue")) << s;
  }
}

TEST(CudaDeviceDocTest, Example) {
  if (!NoCudaDeviceReason().empty()) {
    // No GPU: GetDeviceRuntime says so (UNAVAILABLE), and the example returns that error.
    EXPECT_EQ(doc_examples::CudaDeviceExample().code(), StatusCode::kUnavailable);
    return;
  }
  EXPECT_EQ(doc_examples::CudaDeviceExample(), Status::Ok());
}

TEST(DeviceKernelsDocTest, ExamplesCompileAndLink) {
  // They need device buffers: only referenced, never called (//runtime/cuda:device_kernels_test
  // runs the same calls on a device).
  const std::vector<const void*> examples = {
      reinterpret_cast<const void*>(&doc_examples::CopyRegionOnDeviceExample),
      reinterpret_cast<const void*>(&doc_examples::LaunchBoxCopyExample),
  };
  for (const void* f : examples) EXPECT_NE(f, nullptr);
}

TEST(CublasMatmulDocTest, ExampleCompilesAndLinks) {
  // Needs a GPU: only referenced, never called.
  auto* example = &doc_examples::CublasMatmulExample;
  EXPECT_NE(example, nullptr);
}

}  // namespace
}  // namespace meshflow
