// Every example in cuda/cuda_status.h and ops/cuda/cublas_matmul.h is compiled here; keep them
// identical.
//
// Examples that need a GPU are compiled and linked in functions that no test calls (the CUDA
// tests of //ops/cuda run the same calls on a device); what runs without a device is checked.
#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/cuda/cublas_matmul.h"

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

TEST(CublasMatmulDocTest, ExampleCompilesAndLinks) {
  // Needs a GPU: only referenced, never called.
  auto* example = &doc_examples::CublasMatmulExample;
  EXPECT_NE(example, nullptr);
}

}  // namespace
}  // namespace meshflow
