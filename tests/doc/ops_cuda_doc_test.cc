// Every example in ops/cuda/cuda_op_kernels.h and ops/cuda/op_kernels_launch.h is compiled here;
// keep them identical.
//
// The examples need a GPU (and device tensors): they are compiled and linked in functions that no
// test calls (ops/cuda/cuda_op_kernels_test.cc runs the same calls on a device); what runs without
// a device is checked.
#include <cstdint>
#include <memory>
#include <string>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/cuda/cuda_op_kernels.h"
#include "meshflow/ops/cuda/op_kernels_launch.h"
#include "meshflow/ops/device_op_kernels.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {
namespace doc_examples {

// ops/cuda/cuda_op_kernels.h (x, w: device tensors on cuda:0; stream: a CUDA stream of cuda:0).
Status CudaOpKernelsExample(const Tensor& x, const Tensor& w, const std::shared_ptr<Stream>& stream) {
  MF_ASSIGN_OR_RETURN(DeviceOpKernels * k, DeviceOpKernelsFor(Device::Cuda(0)));
  const Tensor* operands[] = {&x, &w};                    // device tensors on cuda:0
  MF_ASSIGN_OR_RETURN(Tensor y, k->Run(OpSpec::Matmul(), operands, KernelContext{}, stream));
  return Status::Ok();
}

// ops/cuda/op_kernels_launch.h (d_x, d_y: n floats of device memory; stream).
cudaError_t LaunchBodyExample(const void* d_x, void* d_y, int64_t n, cudaStream_t stream) {
  using op_kernels_internal::LaunchBody;
  elementwise::UnaryArgs a{elementwise::ElemType::kF32, UnaryOp::kExp, 1.0, d_x, d_y};
  cudaError_t e = LaunchBody(elementwise::Body::kUnary, &a, n, stream);  // d_y = exp(d_x)
  return e;
}

}  // namespace doc_examples

namespace {

TEST(CudaOpKernelsDocTest, TheFactoryIsRegistered) {
  // Linking //ops/cuda:cuda_op_kernels registered the factory: with a device the kernels exist,
  // without one the factory reports the missing device (not "no op kernels in this program").
  StatusOr<DeviceOpKernels*> k = DeviceOpKernelsFor(Device::Cuda(0));
  if (!k.ok()) {
    EXPECT_EQ(k.status().message().find("no op kernels in this program"), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace meshflow
