#include "meshflow/ops/cuda/cuda_op_kernels.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "meshflow/cuda/cuda_status.h"
#include "meshflow/ops/cuda/cublas_matmul.h"
#include "meshflow/ops/cuda/op_kernels_launch.h"
#include "meshflow/ops/shared_kernels.h"

namespace meshflow {
namespace {

// The bodies of ops/elementwise.h on one device's stream. Every CUDA call runs as work of the
// stream (Stream::RunNow: at once on a CUDA stream), so a stream already in error launches nothing
// and a failed launch becomes the stream's sticky error; argument errors do not touch the stream.
class CudaBackend final : public KernelBackend {
 public:
  CudaBackend(Device device, std::shared_ptr<Stream> stream, std::string where)
      : device_(device),
        stream_(std::move(stream)),
        native_(static_cast<cudaStream_t>(stream_->native_handle())),
        where_(std::move(where)) {}

  Device device() const override { return device_; }
  StatusOr<Tensor> Allocate(DType dtype, std::vector<int64_t> shape) override {
    return Tensor::Empty(dtype, std::move(shape), device_, stream_);
  }
  Status Run(elementwise::Body body, const void* args, int64_t n) override {
    const char* name = elementwise::BodyName(body);
    return stream_->RunNow(
        [&]() {
          return CheckCuda(op_kernels_internal::LaunchBody(body, args, n, native_),
                           std::string("kernel launch (") + name + ")", where_);
        },
        name);
  }
  Status Copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return Status::Ok();
    return stream_->RunNow(
        [&]() {
          return CheckCuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, native_),
                           "cudaMemcpyAsync", where_);
        },
        "copy");
  }
  Status Zero(void* dst, int64_t bytes) override {
    if (bytes <= 0) return Status::Ok();
    return stream_->RunNow(
        [&]() {
          return CheckCuda(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), native_), "cudaMemsetAsync", where_);
        },
        "zero");
  }
  Status SortPairs(const int64_t* keys_in, int64_t* keys_out, const int64_t* values_in, int64_t* values_out, int64_t n,
                   int key_bits) override {
    size_t bytes = 0;
    MF_RETURN_IF_ERROR(CheckCuda(op_kernels_internal::SortPairsTempBytes(n, key_bits, &bytes),
                                 "cub::DeviceRadixSort::SortPairs (size)", where_));
    // Freed at return: the stream-ordered allocator reuses it only for later work on this stream.
    MF_ASSIGN_OR_RETURN(Tensor temp, Allocate(DType::kI64, {static_cast<int64_t>((bytes + 7) / 8)}));
    return stream_->RunNow(
        [&]() {
          return CheckCuda(op_kernels_internal::LaunchSortPairs(temp.raw(), bytes, keys_in, keys_out, values_in,
                                                                values_out, n, key_bits, native_),
                           "cub::DeviceRadixSort::SortPairs", where_);
        },
        "sort_pairs");
  }
  Status Matmul(const void* a, std::span<const int64_t> a_shape, const void* b, std::span<const int64_t> b_shape,
                void* c, DType dtype) override {
    return stream_->RunNow([&]() { return CudaMatmulDevice(a, a_shape, b, b_shape, c, dtype, native_); }, "matmul");
  }

 private:
  Device device_;
  std::shared_ptr<Stream> stream_;
  cudaStream_t native_;
  std::string where_;
};

// Makes `ordinal` the calling thread's current device for the launches, and restores the previous
// one on destruction.
class DeviceScope {
 public:
  static StatusOr<DeviceScope> Enter(int ordinal, const std::string& where) {
    int previous = 0;
    MF_RETURN_IF_ERROR(CheckCuda(cudaGetDevice(&previous), "cudaGetDevice", where));
    if (previous != ordinal) MF_RETURN_IF_ERROR(CheckCuda(cudaSetDevice(ordinal), "cudaSetDevice", where));
    return DeviceScope(previous, previous != ordinal);
  }
  DeviceScope(DeviceScope&& other) noexcept : previous_(other.previous_), restore_(other.restore_) {
    other.restore_ = false;
  }
  DeviceScope& operator=(DeviceScope&&) = delete;
  ~DeviceScope() {
    if (restore_) (void)cudaSetDevice(previous_);
  }

 private:
  DeviceScope(int previous, bool restore) : previous_(previous), restore_(restore) {}
  int previous_;
  bool restore_;
};

Status CheckPlacement(const OpSpec& op, std::span<const Tensor* const> operands, Device device,
                      const std::shared_ptr<Stream>& stream) {
  if (stream == nullptr) return InvalidArgumentError(op.ToString() + " on " + device.ToString() + ": null stream");
  if (stream->device() != device) {
    return InvalidArgumentError(op.ToString() + ": stream '" + stream->name() + "' is on " +
                                stream->device().ToString() + ", the kernels on " + device.ToString());
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i] != nullptr && operands[i]->device() != device) {
      return InvalidArgumentError(op.ToString() + ": operand " + std::to_string(i) + " is on " +
                                  operands[i]->device().ToString() + ", the kernels on " + device.ToString());
    }
  }
  if (stream->native_handle() == nullptr) {
    return InvalidArgumentError(op.ToString() + ": stream '" + stream->name() + "' of " + device.ToString() +
                                " is not a CUDA stream (no native handle)");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<DeviceOpKernels>> Factory(int ordinal) { return NewCudaOpKernels(ordinal); }

[[maybe_unused]] const bool kRegistered = RegisterCudaOpKernelsFactory(&Factory);

}  // namespace

StatusOr<Tensor> CudaOpKernels::Run(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx,
                                    const std::shared_ptr<Stream>& stream) {
  MF_RETURN_IF_ERROR(CheckPlacement(op, operands, device_, stream));
  const std::string where = op.ToString() + " on " + device_.ToString();
  MF_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(device_.cuda_ordinal(), where));
  CudaBackend backend(device_, stream, where);
  return RunSharedKernel(op, operands, ctx, backend);
}

StatusOr<Tensor> CudaOpKernels::RunVocabParallel(const OpSpec& op, std::span<const Tensor* const> operands,
                                                 const KernelContext& ctx, const DeviceVocabShard& vocab,
                                                 const std::shared_ptr<Stream>& stream) {
  MF_RETURN_IF_ERROR(CheckPlacement(op, operands, device_, stream));
  const std::string where = op.ToString() + " (vocab-parallel) on " + device_.ToString();
  MF_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(device_.cuda_ordinal(), where));
  CudaBackend backend(device_, stream, where);
  return RunSharedVocabParallel(op, operands, ctx, vocab, backend);
}

StatusOr<std::unique_ptr<DeviceOpKernels>> NewCudaOpKernels(int ordinal) {
  MF_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (ordinal < 0 || ordinal >= count) {
    return UnavailableError("cuda op kernels: no CUDA device " + std::to_string(ordinal) + " (" +
                            std::to_string(count) + " visible)");
  }
  return std::unique_ptr<DeviceOpKernels>(std::make_unique<CudaOpKernels>(ordinal));
}

}  // namespace meshflow
