#include "meshflow/ops/device_op_kernels.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/ops/kernels.h"

namespace meshflow {
namespace {

Status CheckOnDevice(const OpSpec& op, std::span<const Tensor* const> operands, Device device) {
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i] != nullptr && operands[i]->device() != device) {
      return InvalidArgumentError(op.ToString() + ": operand " + std::to_string(i) + " is on " +
                                  operands[i]->device().ToString() + ", the kernels on " + device.ToString());
    }
  }
  return Status::Ok();
}

class HostKernels final : public DeviceOpKernels {
 public:
  Device device() const override { return Device::Host(); }

  StatusOr<Tensor> Run(const OpSpec& op, std::span<const Tensor* const> operands, const KernelContext& ctx,
                       const std::shared_ptr<Stream>&) override {
    MF_RETURN_IF_ERROR(CheckOnDevice(op, operands, Device::Host()));
    return RunKernel(op, operands, ctx);
  }

  StatusOr<Tensor> RunVocabParallel(const OpSpec& op, std::span<const Tensor* const> x, const KernelContext& ctx,
                                    const DeviceVocabShard& vocab, const std::shared_ptr<Stream>&) override {
    MF_RETURN_IF_ERROR(CheckOnDevice(op, x, Device::Host()));
    VocabShard v;
    v.class_offset = vocab.class_offset;
    v.num_classes = vocab.num_classes;
    v.owner = vocab.owner;
    v.all_reduce = [&vocab](std::vector<double>& rows, ReduceOp rop) {
      return vocab.all_reduce(rows.data(), static_cast<int64_t>(rows.size()), DType::kF64, rop);
    };
    if (const auto* ce = op.get<CrossEntropyParams>()) {
      if (x.size() != 2) return InvalidArgumentError("cross_entropy: 2 operands expected");
      return CrossEntropyKernel(*x[0], *x[1], ce->reduction, ctx.mean_count, v);
    }
    if (const auto* g = op.get<CrossEntropyGradParams>()) {
      if (x.size() != 3) return InvalidArgumentError("cross_entropy_grad: 3 operands expected");
      return CrossEntropyGradKernel(*x[0], *x[1], *x[2], g->reduction, ctx.mean_count, v);
    }
    return InvalidArgumentError("RunVocabParallel: " + op.ToString() + " is not cross_entropy(_grad)");
  }
};

struct CudaRegistry {
  std::mutex mu;
  CudaOpKernelsFactory factory = nullptr;
  std::map<int, std::unique_ptr<DeviceOpKernels>> kernels;
};

CudaRegistry& Registry() {
  static CudaRegistry* r = new CudaRegistry;
  return *r;
}

}  // namespace

DeviceOpKernels& HostOpKernels() {
  static DeviceOpKernels* host = new HostKernels;
  return *host;
}

StatusOr<DeviceOpKernels*> DeviceOpKernelsFor(Device device) {
  if (device.is_host()) return &HostOpKernels();
  CudaRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.kernels.find(device.cuda_ordinal());
  if (it != r.kernels.end()) return it->second.get();
  if (r.factory == nullptr) {
    return UnavailableError("no op kernels in this program for " + device.ToString() +
                            ": link //ops/cuda:cuda_op_kernels (built where a CUDA toolkit is found)");
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<DeviceOpKernels> k, r.factory(device.cuda_ordinal()));
  DeviceOpKernels* out = k.get();
  r.kernels.emplace(device.cuda_ordinal(), std::move(k));
  return out;
}

bool RegisterCudaOpKernelsFactory(CudaOpKernelsFactory factory) {
  CudaRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.factory == nullptr) r.factory = factory;
  return true;
}

}  // namespace meshflow
