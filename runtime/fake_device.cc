#include "meshflow/runtime/fake_device.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "meshflow/runtime/allocator.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/region_copy.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {
namespace {

class FakeMemory final : public RawMemory {
 public:
  explicit FakeMemory(Device device) : device_(device) {}
  Device device() const override { return device_; }
  void* Allocate(size_t bytes) override { return std::malloc(bytes); }
  void Free(void* p, size_t) override { std::free(p); }

 private:
  Device device_;
};

class FakeRuntime final : public DeviceRuntime {
 public:
  explicit FakeRuntime(Device device)
      : device_(device),
        allocator_(NewCachingAllocator(std::make_unique<FakeMemory>(device),
                                       CachingAllocatorOptions{.min_cached_bytes = 0, .granule = 512})) {}
  Device device() const override { return device_; }
  Allocator& allocator() override { return *allocator_; }
  StatusOr<std::shared_ptr<Stream>> NewStream(std::string name) override {
    return std::shared_ptr<Stream>(NewHostStream(std::move(name), device_));
  }
  StatusOr<std::shared_ptr<Stream>> NewComputeStream(std::string name) override {
    return std::shared_ptr<Stream>(NewHostStream(std::move(name), device_));  // asynchronous, like a GPU's
  }
  Status Copy(void* dst, const void* src, int64_t bytes, Stream& stream) override {
    MF_RETURN_IF_ERROR(CheckStream(stream));
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::Ok();
  }
  Status CopyRegion(const void* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                    void* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                    std::span<const int64_t> extent, int64_t elem_size, Stream& stream) override {
    MF_RETURN_IF_ERROR(CheckStream(stream));
    ::meshflow::CopyRegion(static_cast<const std::byte*>(src), src_shape, src_offset, static_cast<std::byte*>(dst),
                           dst_shape, dst_offset, extent, elem_size);
    return Status::Ok();
  }
  Status Fill(void* dst, int64_t count, const void* value, int64_t elem_size, Stream& stream) override {
    MF_RETURN_IF_ERROR(CheckStream(stream));
    auto* out = static_cast<std::byte*>(dst);
    for (int64_t i = 0; i < count; ++i) std::memcpy(out + i * elem_size, value, static_cast<size_t>(elem_size));
    return Status::Ok();
  }

 private:
  Status CheckStream(const Stream& stream) const {
    if (stream.device() == device_) return Status::Ok();
    return InvalidArgumentError("fake " + device_.ToString() + ": byte operation on stream '" + stream.name() +
                                "' of " + stream.device().ToString());
  }
  Device device_;
  std::unique_ptr<Allocator> allocator_;
};

StatusOr<std::unique_ptr<DeviceRuntime>> MakeFake(int ordinal) {
  return std::unique_ptr<DeviceRuntime>(std::make_unique<FakeRuntime>(Device::Cuda(ordinal)));
}

}  // namespace

bool InstallFakeCudaDevices() {
  RegisterCudaRuntimeFactory(&MakeFake);
  StatusOr<DeviceRuntime*> rt = GetDeviceRuntime(Device::Cuda(0));
  return rt.ok() && dynamic_cast<FakeRuntime*>(*rt) != nullptr;
}

}  // namespace meshflow
