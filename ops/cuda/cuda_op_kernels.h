// CudaOpKernels: the DeviceOpKernels (ops/device_op_kernels.h) of one CUDA device.
//
// Overview. Every op of ops/op_spec.h runs on the device with RunKernel's semantics: the shared
// driver (ops/shared_kernels.h) validates the operands like the CPU kernels, allocates the result
// with Tensor::Empty(dtype, shape, Device::Cuda(i), stream) and runs the kernel bodies of
// ops/elementwise.h (the per-element math the CPU kernels use) as grid-stride kernels on the
// stream's cudaStream_t, with no host synchronization. Matmul is cuBLAS (CudaMatmulDevice; bf16
// through f32, rounded once). Reductions, softmax, norms and cross-entropy are one thread per
// output element or row folding in the CPU's order, embedding_grad sums each row's ids in position
// order after a stable cub radix sort: results are deterministic and equal the CPU's bitwise
// except where device transcendental functions (exp, log, tanh, pow: a few ulp) or cuBLAS's
// summation order differ. The vocab-parallel cross-entropy keeps each row's max and sum of
// exponentials in device memory (f64) and all-reduces them through DeviceVocabShard::all_reduce
// between the phases.
//
// Linking //ops/cuda:cuda_op_kernels (alwayslink) registers the factory, so that
// DeviceOpKernelsFor(Device::Cuda(i)) returns these kernels:
//
//   MF_ASSIGN_OR_RETURN(DeviceOpKernels * k, DeviceOpKernelsFor(Device::Cuda(0)));
//   const Tensor* operands[] = {&x, &w};                    // device tensors on cuda:0
//   MF_ASSIGN_OR_RETURN(Tensor y, k->Run(OpSpec::Matmul(), operands, KernelContext{}, stream));
//
// Errors: RunKernel's argument errors (the shared driver's); a null stream or one of another
// device, operands on another device (INVALID_ARGUMENT); UNIMPLEMENTED for a shape needing more
// than 8 non-contiguous dims; allocation errors; CUDA / cuBLAS errors (INTERNAL or UNAVAILABLE,
// naming the call and the op). ids / targets values are not checked on the device: an id outside
// [0, V) gives a NaN row, a target outside [0, C) NaN loss / gradient rows.
#ifndef MESHFLOW_OPS_CUDA_CUDA_OP_KERNELS_H_
#define MESHFLOW_OPS_CUDA_CUDA_OP_KERNELS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <memory>
#include <span>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/device_op_kernels.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

class CudaOpKernels final : public DeviceOpKernels {
 public:
  explicit CudaOpKernels(int ordinal) : device_(Device::Cuda(ordinal)) {}

  Device device() const override { return device_; }
  StatusOr<Tensor> Run(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx,
                       const std::shared_ptr<Stream>& stream) override;
  StatusOr<Tensor> RunVocabParallel(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx,
                                    const DeviceVocabShard& vocab, const std::shared_ptr<Stream>& stream) override;

 private:
  Device device_;
};

// The kernels of CUDA device `ordinal` (the registered factory). Errors: no such device
// (UNAVAILABLE, naming the ordinal and the device count).
StatusOr<std::unique_ptr<DeviceOpKernels>> NewCudaOpKernels(int ordinal);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_CUDA_CUDA_OP_KERNELS_H_
