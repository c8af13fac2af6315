// DeviceOpKernels: the kernels of every op on one kind of device, behind one interface.
//
// The eager runtime (runtime/eager.h) runs an op's local step through the DeviceOpKernels of the
// rank's device: the host's wrap the CPU kernels (ops/kernels.h, RunKernel), a CUDA device's are
// the .cu kernels of ops/cuda/ (registered when //ops/cuda:cuda_op_kernels is linked in). Every
// device kernel has RunKernel's semantics (shapes, broadcasting, dtype contract, numerics up to
// summation order); the per-element math is written once (ops/elementwise.h) and shared by both.
//
//   MF_ASSIGN_OR_RETURN(DeviceOpKernels * k, DeviceOpKernelsFor(x.device()));
//   const Tensor* operands[] = {&x, &w};
//   MF_ASSIGN_OR_RETURN(Tensor y, k->Run(OpSpec::Matmul(), operands, KernelContext{}, stream));
//
// Ordering: a kernel is issued on `stream` (the rank's compute stream). The host's run at once on
// the calling thread (an inline stream). A device's are enqueued on the stream and return at once;
// the result is allocated on the device with `stream` as its home and is valid in its order.
//
// Errors: RunKernel's argument errors; operands on different devices or on another device than
// the kernels' (INVALID_ARGUMENT); UNIMPLEMENTED naming the op and dtype where a device has no
// kernel; allocation errors; UNAVAILABLE from DeviceOpKernelsFor for a device without kernels.
#ifndef MESHFLOW_OPS_DEVICE_OP_KERNELS_H_
#define MESHFLOW_OPS_DEVICE_OP_KERNELS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

// Vocab-parallel cross-entropy on a device (VocabShard of ops/kernels.h with device rows): the
// local logits hold classes [class_offset, class_offset + C_l) of num_classes; `all_reduce`
// reduces `count` per-row statistics of `dtype` (f64 on the host, f32 or f64 on a device) in place
// in device memory over the ranks that hold the other classes, ordered after the work issued on the
// kernel's stream so far and before the work issued after it (kMax, then kSum).
struct DeviceVocabShard {
  int64_t class_offset = 0;
  int64_t num_classes = 0;
  bool owner = true;  // holds class 0: contributes logsumexp
  std::function<Status(void* rows, int64_t count, DType dtype, ReduceOp op)> all_reduce;
};

class DeviceOpKernels {
 public:
  virtual ~DeviceOpKernels() = default;
  virtual Device device() const = 0;
  // RunKernel(op, operands, ctx) on this device, issued on `stream`.
  virtual StatusOr<Tensor> Run(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx,
                               const std::shared_ptr<Stream>& stream) = 0;
  // Cross-entropy or its gradient (op: CrossEntropyParams / CrossEntropyGradParams) with the class
  // dim sharded: CrossEntropyKernel / CrossEntropyGradKernel with a VocabShard (ops/kernels.h).
  virtual StatusOr<Tensor> RunVocabParallel(const OpSpec& op, std::span<const Tensor* const> operands,
                                            const KernelContext& ctx, const DeviceVocabShard& vocab,
                                            const std::shared_ptr<Stream>& stream) = 0;
};

// The host's kernels (the CPU kernels; never destroyed).
DeviceOpKernels& HostOpKernels();

// The kernels of `device`: the host's, or those of the CUDA device of that ordinal (created on
// first use). Errors: UNAVAILABLE when no CUDA kernels are linked in.
StatusOr<DeviceOpKernels*> DeviceOpKernelsFor(Device device);

// For ops/cuda: installs the factory of CUDA kernels (one per process; later calls are ignored).
using CudaOpKernelsFactory = StatusOr<std::unique_ptr<DeviceOpKernels>> (*)(int ordinal);
bool RegisterCudaOpKernelsFactory(CudaOpKernelsFactory factory);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_DEVICE_OP_KERNELS_H_
