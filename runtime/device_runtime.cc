#include "meshflow/runtime/device_runtime.h"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "meshflow/runtime/region_copy.h"

namespace meshflow {
namespace {

Status CheckBytes(const char* what, const void* dst, const void* src, int64_t bytes) {
  if (bytes < 0) return InvalidArgumentError(std::string(what) + ": negative size " + std::to_string(bytes));
  if (bytes > 0 && (dst == nullptr || src == nullptr)) {
    return InvalidArgumentError(std::string(what) + ": null pointer for " + std::to_string(bytes) + " bytes");
  }
  return Status::Ok();
}

class HostRuntimeImpl final : public DeviceRuntime {
 public:
  Device device() const override { return Device::Host(); }
  Allocator& allocator() override { return HostAllocator(); }
  StatusOr<std::shared_ptr<Stream>> NewStream(std::string name) override {
    return std::shared_ptr<Stream>(NewHostStream(std::move(name)));
  }
  StatusOr<std::shared_ptr<Stream>> NewComputeStream(std::string name) override {
    return std::shared_ptr<Stream>(NewInlineHostStream(std::move(name)));
  }
  Status Copy(void* dst, const void* src, int64_t bytes, Stream&) override {
    MF_RETURN_IF_ERROR(CheckBytes("Copy", dst, src, bytes));
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::Ok();
  }
  Status CopyRegion(const void* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                    void* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                    std::span<const int64_t> extent, int64_t elem_size, Stream&) override {
    ::meshflow::CopyRegion(static_cast<const std::byte*>(src), src_shape, src_offset, static_cast<std::byte*>(dst),
                           dst_shape, dst_offset, extent, elem_size);
    return Status::Ok();
  }
  Status Fill(void* dst, int64_t count, const void* value, int64_t elem_size, Stream&) override {
    MF_RETURN_IF_ERROR(CheckBytes("Fill", dst, value, count));
    if (elem_size < 1) return InvalidArgumentError("Fill: element size " + std::to_string(elem_size) + " < 1");
    auto* out = static_cast<std::byte*>(dst);
    for (int64_t i = 0; i < count; ++i) std::memcpy(out + i * elem_size, value, static_cast<size_t>(elem_size));
    return Status::Ok();
  }
};

struct CudaRegistry {
  std::mutex mu;
  CudaRuntimeFactory factory = nullptr;
  std::map<int, std::unique_ptr<DeviceRuntime>> runtimes;
};

CudaRegistry& Registry() {
  static CudaRegistry* r = new CudaRegistry;  // never destroyed, like the host allocator
  return *r;
}

}  // namespace

DeviceRuntime& HostRuntime() {
  static DeviceRuntime* host = new HostRuntimeImpl;
  return *host;
}

StatusOr<DeviceRuntime*> GetDeviceRuntime(Device device) {
  if (device.is_host()) return &HostRuntime();
  CudaRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.runtimes.find(device.cuda_ordinal());
  if (it != r.runtimes.end()) return it->second.get();
  if (r.factory == nullptr) {
    return UnavailableError("no CUDA runtime in this program for " + device.ToString() +
                            ": link //runtime/cuda:cuda_device (built where a CUDA toolkit is found)");
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<DeviceRuntime> rt, r.factory(device.cuda_ordinal()));
  DeviceRuntime* out = rt.get();
  r.runtimes.emplace(device.cuda_ordinal(), std::move(rt));
  return out;
}

bool RegisterCudaRuntimeFactory(CudaRuntimeFactory factory) {
  CudaRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.factory == nullptr) r.factory = factory;
  return true;
}

}  // namespace meshflow
