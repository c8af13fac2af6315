// RunKernel's semantics on any backend that can run the kernel bodies of ops/elementwise.h: the
// device kernels' validation, output shapes, launch arguments and phases, written once.
//
// A KernelBackend owns memory and runs bodies: the CUDA backend (ops/cuda/cuda_op_kernels.cc)
// allocates on a device and launches each body as a grid-stride kernel on a stream; the
// HostLoopBackend below allocates host tensors and runs each body in a host loop, so host tests
// check the exact device arithmetic and index math against the CPU kernels (ops/kernels.h).
//
//   HostLoopBackend host;
//   const Tensor x = Tensor::Iota(DType::kF32, {2, 3}), b = Tensor::Iota(DType::kF32, {3});
//   const Tensor* operands[] = {&x, &b};
//   MF_ASSIGN_OR_RETURN(Tensor y, RunSharedKernel(OpSpec::Binary(BinaryOp::kAdd), operands, KernelContext{}, host));
//   // y == RunKernel(OpSpec::Binary(BinaryOp::kAdd), operands).value(): {0, 2, 4, 3, 5, 7}
//
// Semantics: every op of OpParams with the CPU kernels' dtypes (f32, f64, bf16 computed in float
// and rounded once; i32 / i64 where the CPU takes them), shapes (broadcasting, empty dims) and
// KernelContext. Matmul goes to KernelBackend::Matmul (f32 / f64; bf16 through f32). Reductions,
// softmax, norms and cross-entropy fold in the CPU's order (one item per output element or row),
// embedding_grad sums each row's ids in position order after a stable sort, so with the host's
// math library the results are the CPU kernels' bits.
//
// Errors: the CPU kernels' argument errors (INVALID_ARGUMENT / UNIMPLEMENTED naming the op, dtype
// or shape); UNIMPLEMENTED for a shape that needs more than elementwise::kMaxDims non-contiguous
// dims; the backend's errors. Not checked (a device cannot report them without synchronizing):
// ids / targets values. An id outside [0, V) gives a NaN row (zeros for an integer table) and is
// left out of embedding_grad; a target outside [0, C) gives NaN loss and gradient rows.
#ifndef MESHFLOW_OPS_SHARED_KERNELS_H_
#define MESHFLOW_OPS_SHARED_KERNELS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/device_op_kernels.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/runtime/device.h"

namespace meshflow {

// Memory and execution of kernel bodies, in issue order (a stream, or at once on the host).
class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual Device device() const = 0;
  // An uninitialized tensor in the backend's memory.
  virtual StatusOr<Tensor> Allocate(DType dtype, std::vector<int64_t> shape) = 0;
  // elementwise::DispatchBody(body, args, n): body(args, i) for i in [0, n); `args` (the body's
  // *Args struct) is read during the call.
  virtual Status Run(elementwise::Body body, const void* args, int64_t n) = 0;
  virtual Status Copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual Status Zero(void* dst, int64_t bytes) = 0;
  // Stable sort of n (key, value) pairs by key; keys lie in [0, 2^key_bits).
  virtual Status SortPairs(const int64_t* keys_in, int64_t* keys_out, const int64_t* values_in, int64_t* values_out,
                           int64_t n, int key_bits) = 0;
  // Dense row-major c = a x b (rank >= 2, batch dims broadcast; CudaMatmulDevice's contract), f32
  // or f64.
  virtual Status Matmul(const void* a, std::span<const int64_t> a_shape, const void* b,
                        std::span<const int64_t> b_shape, void* c, DType dtype) = 0;
};

// Host memory; bodies run in host loops on the calling thread; matmul is MatmulKernel (OpenBLAS).
class HostLoopBackend final : public KernelBackend {
 public:
  Device device() const override { return Device::Host(); }
  StatusOr<Tensor> Allocate(DType dtype, std::vector<int64_t> shape) override;
  Status Run(elementwise::Body body, const void* args, int64_t n) override;
  Status Copy(void* dst, const void* src, int64_t bytes) override;
  Status Zero(void* dst, int64_t bytes) override;
  Status SortPairs(const int64_t* keys_in, int64_t* keys_out, const int64_t* values_in, int64_t* values_out, int64_t n,
                   int key_bits) override;
  Status Matmul(const void* a, std::span<const int64_t> a_shape, const void* b, std::span<const int64_t> b_shape,
                void* c, DType dtype) override;
};

// RunKernel(op, operands, ctx) with the bodies on `backend` (operands in its memory). The result
// is allocated by the backend.
StatusOr<Tensor> RunSharedKernel(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx,
                                 KernelBackend& backend);

// Cross-entropy or its gradient with the class dim sharded (DeviceVocabShard, ops/device_op_kernels.h):
// the per-row max and sum of exponentials (f64, in the backend's memory) go through
// vocab.all_reduce (kMax, then kSum) between the phases. Errors: op not cross_entropy(_grad),
// RunSharedKernel's, all_reduce's.
StatusOr<Tensor> RunSharedVocabParallel(const OpSpec& op, std::span<const Tensor* const> operands,
                                        const KernelContext& ctx, const DeviceVocabShard& vocab,
                                        KernelBackend& backend);

}  // namespace meshflow

#endif  // MESHFLOW_OPS_SHARED_KERNELS_H_
