#include "meshflow/ops/fake_device_op_kernels.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/ops/device_op_kernels.h"
#include "meshflow/ops/shared_kernels.h"

namespace meshflow {
namespace {

// Fake device memory is host memory: the host loop backend's work, run in the stream's order
// (RunNow: at once when the stream is idle, else after the work queued before it).
class FakeBackend final : public KernelBackend {
 public:
  FakeBackend(Device device, std::shared_ptr<Stream> stream) : device_(device), stream_(std::move(stream)) {}
  Device device() const override { return device_; }
  StatusOr<Tensor> Allocate(DType dtype, std::vector<int64_t> shape) override {
    return Tensor::Empty(dtype, std::move(shape), device_, stream_);
  }
  Status Run(elementwise::Body body, const void* args, int64_t n) override {
    return stream_->RunNow([&]() { return host_.Run(body, args, n); }, "kernel");
  }
  Status Copy(void* dst, const void* src, int64_t bytes) override {
    return stream_->RunNow([&]() { return host_.Copy(dst, src, bytes); }, "copy");
  }
  Status Zero(void* dst, int64_t bytes) override {
    return stream_->RunNow([&]() { return host_.Zero(dst, bytes); }, "zero");
  }
  Status SortPairs(const int64_t* keys_in, int64_t* keys_out, const int64_t* values_in, int64_t* values_out, int64_t n,
                   int key_bits) override {
    return stream_->RunNow(
        [&]() { return host_.SortPairs(keys_in, keys_out, values_in, values_out, n, key_bits); }, "sort");
  }
  Status Matmul(const void* a, std::span<const int64_t> a_shape, const void* b, std::span<const int64_t> b_shape,
                void* c, DType dtype) override {
    return stream_->RunNow([&]() { return host_.Matmul(a, a_shape, b, b_shape, c, dtype); }, "matmul");
  }

 private:
  Device device_;
  std::shared_ptr<Stream> stream_;
  HostLoopBackend host_;
};

class FakeKernels final : public DeviceOpKernels {
 public:
  explicit FakeKernels(Device device) : device_(device) {}
  Device device() const override { return device_; }
  StatusOr<Tensor> Run(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx,
                       const std::shared_ptr<Stream>& stream) override {
    MF_RETURN_IF_ERROR(Check(op, operands, stream));
    FakeBackend backend(device_, stream);
    return RunSharedKernel(op, operands, ctx, backend);
  }
  StatusOr<Tensor> RunVocabParallel(const OpSpec& op, std::span<const Tensor* const> operands,
                                    const KernelContext& ctx, const DeviceVocabShard& vocab,
                                    const std::shared_ptr<Stream>& stream) override {
    MF_RETURN_IF_ERROR(Check(op, operands, stream));
    FakeBackend backend(device_, stream);
    return RunSharedVocabParallel(op, operands, ctx, vocab, backend);
  }

 private:
  Status Check(const OpSpec& op, std::span<const Tensor* const> operands, const std::shared_ptr<Stream>& stream) const {
    if (stream == nullptr || stream->device() != device_) {
      return InvalidArgumentError(op.ToString() + ": the fake " + device_.ToString() + " kernels need a stream of it");
    }
    for (size_t i = 0; i < operands.size(); ++i) {
      if (operands[i]->device() != device_) {
        return InvalidArgumentError(op.ToString() + ": operand " + std::to_string(i) + " is on " +
                                    operands[i]->device().ToString() + ", the kernels on " + device_.ToString());
      }
    }
    return Status::Ok();
  }
  Device device_;
};

StatusOr<std::unique_ptr<DeviceOpKernels>> MakeFake(int ordinal) {
  return std::unique_ptr<DeviceOpKernels>(std::make_unique<FakeKernels>(Device::Cuda(ordinal)));
}

}  // namespace

bool InstallFakeCudaOpKernels() {
  RegisterCudaOpKernelsFactory(&MakeFake);
  StatusOr<DeviceOpKernels*> k = DeviceOpKernelsFor(Device::Cuda(0));
  return k.ok() && dynamic_cast<FakeKernels*>(*k) != nullptr;
}

}  // namespace meshflow
