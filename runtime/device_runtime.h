// DeviceRuntime: what the runtime needs from a device, behind one interface.
//
// Per device: its allocator (runtime/allocator.h), new asynchronous streams (runtime/stream.h),
// and the stream-ordered byte operations the executor and tensors use: copies (either side may be
// host memory), box-region copies (pack / unpack) and fills. The host runtime is built in; the
// CUDA runtime (runtime/cuda/cuda_device.h) registers itself when linked in, so code above this
// layer never names CUDA: it asks GetDeviceRuntime(tensor.device()).
//
// Ordering rule. The byte operations run in `stream`'s order as of the call, and must be called
// from inside work running on `stream` (Stream::Enqueue): the host runtime performs them at once
// on the calling thread (which is then the stream's worker, or the caller of an inline stream); a
// CUDA runtime enqueues them on the stream's native handle (its Enqueue calls work at once).
// Either way, a sequence of them inside one work item runs in program order.
//
//   DeviceRuntime& rt = HostRuntime();
//   MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, rt.NewStream("copy"));
//   std::vector<float> a(4, 1.0f), b(4, 0.0f);
//   MF_RETURN_IF_ERROR(s->Enqueue([&]() { return rt.Copy(b.data(), a.data(), 16, *s); }));
//   MF_RETURN_IF_ERROR(s->Synchronize());           // b is {1, 1, 1, 1}
//
// Errors: GetDeviceRuntime returns UNAVAILABLE for a CUDA device when no CUDA runtime is linked in
// or the device does not exist (the message says which); byte operations return
// INVALID_ARGUMENT for negative sizes and null pointers with a non-empty size.
#ifndef MESHFLOW_RUNTIME_DEVICE_RUNTIME_H_
#define MESHFLOW_RUNTIME_DEVICE_RUNTIME_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "meshflow/base/status.h"
#include "meshflow/runtime/allocator.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual Device device() const = 0;
  virtual Allocator& allocator() = 0;
  // A new asynchronous stream on this device (the host's: a worker thread, NewHostStream).
  virtual StatusOr<std::shared_ptr<Stream>> NewStream(std::string name) = 0;
  // The stream for compute issued by a rank's thread: the host's runs work inline on the caller
  // (NewInlineHostStream); a CUDA device's is an ordinary asynchronous stream.
  virtual StatusOr<std::shared_ptr<Stream>> NewComputeStream(std::string name) = 0;

  // `bytes` bytes from src to dst (each host memory or this device's); non-overlapping.
  virtual Status Copy(void* dst, const void* src, int64_t bytes, Stream& stream) = 0;
  // CopyRegion (runtime/region_copy.h) on this device's memory.
  virtual Status CopyRegion(const void* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                            void* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                            std::span<const int64_t> extent, int64_t elem_size, Stream& stream) = 0;
  // Each of `count` elements of `elem_size` bytes at dst becomes the elem_size bytes at `value`
  // (host memory, read during the call).
  virtual Status Fill(void* dst, int64_t count, const void* value, int64_t elem_size, Stream& stream) = 0;
};

// The host runtime (never destroyed).
DeviceRuntime& HostRuntime();

// The runtime of `device`: the host's, or the CUDA runtime of that ordinal (created on first use).
StatusOr<DeviceRuntime*> GetDeviceRuntime(Device device);

// For runtime/cuda: installs the factory of CUDA runtimes (one call per process; later calls are
// ignored). Returns true (for static registration).
using CudaRuntimeFactory = StatusOr<std::unique_ptr<DeviceRuntime>> (*)(int ordinal);
bool RegisterCudaRuntimeFactory(CudaRuntimeFactory factory);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_DEVICE_RUNTIME_H_
