// The CUDA device layer: streams, events, the device allocator and the DeviceRuntime of a GPU.
//
// Overview. Linking //runtime/cuda:cuda_device registers the CUDA runtime factory
// (RegisterCudaRuntimeFactory, runtime/device_runtime.h) from a static initializer, so
// GetDeviceRuntime(Device::Cuda(i)) returns a CudaRuntime for GPU i and code above the device
// layer never names CUDA. A CudaRuntime (one per ordinal, created on first use) has:
//   - allocator(): a CachingAllocator (runtime/allocator.h) over cudaMalloc / cudaFree, blocks
//     cached per stream (min_cached_bytes 0, granule 512, limit: the device's memory; an
//     allocation that fails frees the cache and tries again);
//   - NewStream / NewComputeStream: CudaStreams, both asynchronous (cudaStreamNonBlocking);
//   - Copy (cudaMemcpyAsync, cudaMemcpyDefault: either side may be host memory), CopyRegion
//     (CopyRegionOnDevice) and Fill (FillOnDevice), enqueued on the stream's cudaStream_t.
//
// CudaStream follows runtime/stream.h with these CUDA specifics:
//   - Enqueue(work) and RunNow(work) call `work` at once on the caller's thread, with the stream's
//     device made current (cudaSetDevice); `work` must only enqueue device work on
//     native_handle() (kernels, async copies, NCCL calls). Both return once `work` returned: the
//     device work completes later, in stream order. They return `work`'s own error at once.
//   - RecordEvent records a CudaEvent (cudaEventRecord, timing disabled); WaitEvent on a CudaEvent
//     of any device is cudaStreamWaitEvent (no host wait); WaitEvent on any other Event (a host
//     stream's) blocks the calling thread until that event completed, so device work enqueued
//     afterwards starts after it.
//   - Query is cudaStreamQuery; Synchronize is cudaStreamSynchronize, then the sticky error.
//   - Sticky errors: a work item's failed Status, a failed CUDA call of the stream (asynchronous
//     faults reported by Query / Synchronize included) and the error of an event the stream waited
//     on become the stream's error; later Enqueue / RunNow calls return it without running work,
//     and events recorded afterwards carry it (their Synchronize returns it once the device work
//     before them completed).
//   - Timeline: with set_record_timeline(true) every work item is bracketed by two timing events;
//     TakeTimeline waits for them, then turns device times into steady_clock times against a
//     reference event it records and waits for itself (precision: about a microsecond). stats():
//     work items run; busy_us: device time of the items resolved by TakeTimeline (device time is
//     measured only while the timeline is recorded); wait_us: host time blocked on non-CUDA events.
//   - The destructor waits for the stream's work (cudaStreamSynchronize), then destroys it.
//
//   MF_ASSIGN_OR_RETURN(DeviceRuntime* rt, GetDeviceRuntime(Device::Cuda(0)));
//   MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, rt->NewStream("copy"));
//   std::vector<float> host(256, 1.0f), back(256);
//   MF_ASSIGN_OR_RETURN(void* d, rt->allocator().Allocate(1024, s.get()));
//   const float two = 2.0f;
//   MF_RETURN_IF_ERROR(s->Enqueue([&]() -> Status {        // runs now; the copies run later
//     MF_RETURN_IF_ERROR(rt->Copy(d, host.data(), 1024, *s));
//     MF_RETURN_IF_ERROR(rt->Fill(d, 128, &two, sizeof(float), *s));   // first half := 2
//     return rt->Copy(back.data(), d, 1024, *s);
//   }));
//   MF_RETURN_IF_ERROR(s->Synchronize());                    // back: 128 x 2.0f, 128 x 1.0f
//   rt->allocator().Deallocate(d, 1024, s.get());
//
// Errors: GetDeviceRuntime(Device::Cuda(i)) returns UNAVAILABLE naming cuda:i when no driver or no
// device is present or i is not a visible device (INVALID_ARGUMENT for i < 0); CUDA failures are
// Status values naming the call and the stream or device (cuda/cuda_status.h); byte operations
// return INVALID_ARGUMENT for a stream that is not a CUDA stream of the runtime's device, negative
// sizes and null pointers with a non-empty size.
//
// Threading: as runtime/stream.h. A stream's methods may be called from any thread; the CUDA calls
// make the stream's device current on the calling thread first.
#ifndef MESHFLOW_RUNTIME_CUDA_CUDA_DEVICE_H_
#define MESHFLOW_RUNTIME_CUDA_CUDA_DEVICE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/allocator.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

// An event of a CudaStream: a cudaEvent_t plus the stream's sticky error at record time.
class CudaEvent final : public Event {
 public:
  // Takes ownership of `event` (recorded on a stream of `ordinal`).
  CudaEvent(int ordinal, cudaEvent_t event, Status status);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  Device device() const override { return Device::Cuda(ordinal_); }
  // cudaEventQuery: true once the device work before the record completed (or failed).
  bool Query() const override;
  // cudaEventSynchronize; then the recorded sticky error, else OK (or the CUDA error).
  Status Synchronize() const override;
  cudaEvent_t native_handle() const { return event_; }
  // The recording stream's sticky error at record time (OK if none).
  const Status& recorded_status() const { return status_; }

 private:
  int ordinal_;
  cudaEvent_t event_;
  Status status_;
};

class CudaStream final : public Stream {
 public:
  // A new non-blocking CUDA stream on device `ordinal`. Errors: CUDA failures (naming the stream).
  static StatusOr<std::unique_ptr<CudaStream>> Create(std::string name, int ordinal);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const override { return Device::Cuda(ordinal_); }
  const std::string& name() const override { return name_; }
  Status Enqueue(std::function<Status()> work, const char* label = nullptr) override;
  Status RunNow(std::function<Status()> work, const char* label = nullptr) override;
  StatusOr<std::shared_ptr<Event>> RecordEvent() override;
  Status WaitEvent(std::shared_ptr<Event> event) override;
  bool Query() override;
  Status Synchronize() override;
  Status status() const override;
  void* native_handle() const override { return stream_; }
  cudaStream_t cuda_stream() const { return stream_; }
  int ordinal() const { return ordinal_; }

  void set_record_timeline(bool on) override;
  std::vector<StreamRecord> TakeTimeline() override;
  StreamStats stats() const override;

 private:
  // A timeline entry: a work item bracketed by timing events, or a host-side wait (host times).
  struct Entry {
    const char* label = "";
    cudaEvent_t start = nullptr, end = nullptr;
    std::chrono::steady_clock::time_point host_start, host_end;
  };

  CudaStream(std::string name, int ordinal, cudaStream_t stream)
      : name_(std::move(name)), ordinal_(ordinal), stream_(stream) {}
  // "stream 'NAME' on cuda:N", for messages.
  std::string Where() const;
  // cudaSetDevice(ordinal_); a failure becomes the sticky error.
  Status MakeCurrent();
  // Makes `s` the sticky error if there is none (with the stream's name); returns the sticky error.
  Status Fail(Status s);
  // CheckCuda(e, call, Where()), made sticky when it fails.
  Status Check(cudaError_t e, const char* call);
  bool recording() const;
  // Creates and records a timing event (nullptr when that fails: the item is then not timed).
  cudaEvent_t RecordTimingEvent();
  Status RunWork(const std::function<Status()>& work, const char* label);

  const std::string name_;
  const int ordinal_;
  cudaStream_t stream_;
  mutable std::mutex mu_;
  Status error_;
  bool record_ = false;
  std::vector<Entry> timeline_;
  StreamStats stats_;
};

// The DeviceRuntime of one GPU (see the file comment). GetDeviceRuntime creates one per ordinal.
class CudaRuntime final : public DeviceRuntime {
 public:
  // Errors: ordinal < 0 (INVALID_ARGUMENT); no driver, no device, ordinal not visible
  // (UNAVAILABLE naming cuda:N); CUDA failures.
  static StatusOr<std::unique_ptr<CudaRuntime>> Create(int ordinal);

  Device device() const override { return Device::Cuda(ordinal_); }
  int ordinal() const { return ordinal_; }
  Allocator& allocator() override { return *allocator_; }
  StatusOr<std::shared_ptr<Stream>> NewStream(std::string name) override;
  StatusOr<std::shared_ptr<Stream>> NewComputeStream(std::string name) override;

  Status Copy(void* dst, const void* src, int64_t bytes, Stream& stream) override;
  Status CopyRegion(const void* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset, void* dst,
                    std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                    std::span<const int64_t> extent, int64_t elem_size, Stream& stream) override;
  Status Fill(void* dst, int64_t count, const void* value, int64_t elem_size, Stream& stream) override;

 private:
  CudaRuntime(int ordinal, std::unique_ptr<Allocator> allocator)
      : ordinal_(ordinal), allocator_(std::move(allocator)) {}
  // The stream's cudaStream_t, with this device made current; INVALID_ARGUMENT naming `what` and
  // the stream when it is not a CUDA stream of this device.
  StatusOr<cudaStream_t> StreamFor(const Stream& stream, const char* what) const;

  int ordinal_;
  std::unique_ptr<Allocator> allocator_;
};

// The factory //runtime/cuda:cuda_device registers (CudaRuntime::Create as a DeviceRuntime).
StatusOr<std::unique_ptr<DeviceRuntime>> NewCudaRuntime(int ordinal);

// The cudaStream_t of a stream (nullptr for host streams).
inline cudaStream_t CudaStreamOf(const Stream& stream) { return static_cast<cudaStream_t>(stream.native_handle()); }

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_CUDA_CUDA_DEVICE_H_
