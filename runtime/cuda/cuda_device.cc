#include "meshflow/runtime/cuda/cuda_device.h"

#include <cstdlib>
#include <utility>

#include "meshflow/cuda/cuda_status.h"
#include "meshflow/runtime/cuda/device_kernels.h"

namespace meshflow {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

std::string DeviceName(int ordinal) { return Device::Cuda(ordinal).ToString(); }

// cudaSetDevice(ordinal); `where` (called on failure only) names the caller.
template <typename Where>
Status SetDevice(int ordinal, const Where& where) {
  const cudaError_t e = cudaSetDevice(ordinal);
  if (e == cudaSuccess) return Status::Ok();
  return CheckCuda(e, "cudaSetDevice", where());
}

// Makes a device current for a scope and restores the caller's device after it: an allocation
// for another GPU (a tensor freed by another rank's thread, say) leaves the thread's device alone.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    ok_ = cudaSetDevice(ordinal) == cudaSuccess;
    (void)cudaGetLastError();
  }
  ~DeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  bool ok() const { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = false;
};

// cudaMalloc / cudaFree on one device: the raw memory under the device's CachingAllocator.
class CudaMemory final : public RawMemory {
 public:
  explicit CudaMemory(int ordinal) : ordinal_(ordinal) {}
  Device device() const override { return Device::Cuda(ordinal_); }
  void* Allocate(size_t bytes) override {
    const DeviceScope scope(ordinal_);
    if (!scope.ok()) return nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory is not sticky: clear it for the next call
      return nullptr;
    }
    return p;
  }
  void Free(void* p, size_t) override {
    const DeviceScope scope(ordinal_);
    (void)cudaFree(p);  // implicitly synchronizes: the block's last stream use has completed
  }

 private:
  int ordinal_;
};

// UNAVAILABLE naming cuda:N when there is no driver, no device, or N is not visible.
Status CheckDeviceExists(int ordinal) {
  const std::string dev = DeviceName(ordinal);
  if (ordinal < 0) return InvalidArgumentError("CUDA runtime for " + dev + ": negative device ordinal");
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError("no CUDA device for " + dev + ": cudaGetDeviceCount returned " +
                            std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")");
  }
  if (ordinal >= n) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return UnavailableError(dev + " does not exist: this process sees " + std::to_string(n) + " CUDA device" +
                            (n == 1 ? "" : "s") +
                            (visible != nullptr ? " (CUDA_VISIBLE_DEVICES=" + std::string(visible) + ")" : ""));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<DeviceRuntime>> RegisteredFactory(int ordinal) { return NewCudaRuntime(ordinal); }

[[maybe_unused]] const bool kCudaRuntimeRegistered = RegisterCudaRuntimeFactory(&RegisteredFactory);

}  // namespace

// ---------------------------------------------------------------------------------------------
// CudaEvent

CudaEvent::CudaEvent(int ordinal, cudaEvent_t event, Status status)
    : ordinal_(ordinal), event_(event), status_(std::move(status)) {}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);  // released once it completed
}

bool CudaEvent::Query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess) (void)cudaGetLastError();
  return true;  // complete, or failed (it will never complete otherwise)
}

Status CudaEvent::Synchronize() const {
  const cudaError_t e = cudaEventSynchronize(event_);
  if (!status_.ok()) return status_;
  if (e == cudaSuccess) return Status::Ok();
  return CheckCuda(e, "cudaEventSynchronize", "event of " + DeviceName(ordinal_));
}

// ---------------------------------------------------------------------------------------------
// CudaStream

StatusOr<std::unique_ptr<CudaStream>> CudaStream::Create(std::string name, int ordinal) {
  const std::string where = "stream '" + name + "' on " + DeviceName(ordinal);
  MF_RETURN_IF_ERROR(SetDevice(ordinal, [&] { return where; }));
  cudaStream_t s = nullptr;
  MF_RETURN_IF_ERROR(
      CheckCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", where));
  return std::unique_ptr<CudaStream>(new CudaStream(std::move(name), ordinal, s));
}

CudaStream::~CudaStream() {
  (void)cudaSetDevice(ordinal_);
  (void)cudaStreamSynchronize(stream_);
  for (const Entry& e : timeline_) {
    if (e.start != nullptr) (void)cudaEventDestroy(e.start);
    if (e.end != nullptr) (void)cudaEventDestroy(e.end);
  }
  (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

std::string CudaStream::Where() const { return "stream '" + name_ + "' on " + DeviceName(ordinal_); }

Status CudaStream::Fail(Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok() && error_.ok()) error_ = s.WithContext("stream '" + name_ + "'");
  return error_;
}

Status CudaStream::Check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::Ok();
  return Fail(CheckCuda(e, call, Where()));
}

Status CudaStream::MakeCurrent() { return Check(cudaSetDevice(ordinal_), "cudaSetDevice"); }

Status CudaStream::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool CudaStream::recording() const {
  std::lock_guard<std::mutex> lock(mu_);
  return record_;
}

cudaEvent_t CudaStream::RecordTimingEvent() {
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (cudaEventRecord(e, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaEventDestroy(e);
    return nullptr;
  }
  return e;
}

Status CudaStream::RunWork(const std::function<Status()>& work, const char* label) {
  if (!work) return InvalidArgumentError(Where() + ": Enqueue of an empty work function");
  MF_RETURN_IF_ERROR(status());
  MF_RETURN_IF_ERROR(MakeCurrent());
  const bool timed = recording();
  Entry entry;
  entry.label = label != nullptr ? label : "";
  if (timed) entry.start = RecordTimingEvent();
  Status s = work();
  if (timed && entry.start != nullptr) entry.end = RecordTimingEvent();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.work_items;
    if (entry.end != nullptr) {
      timeline_.push_back(entry);
    } else if (entry.start != nullptr) {
      (void)cudaEventDestroy(entry.start);
    }
  }
  return Fail(std::move(s));
}

Status CudaStream::Enqueue(std::function<Status()> work, const char* label) { return RunWork(work, label); }

Status CudaStream::RunNow(std::function<Status()> work, const char* label) { return RunWork(work, label); }

StatusOr<std::shared_ptr<Event>> CudaStream::RecordEvent() {
  const Status sticky = status();
  MF_RETURN_IF_ERROR(MakeCurrent());
  cudaEvent_t e = nullptr;
  MF_RETURN_IF_ERROR(Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
  const cudaError_t recorded = cudaEventRecord(e, stream_);
  if (recorded != cudaSuccess) {
    (void)cudaEventDestroy(e);
    return Check(recorded, "cudaEventRecord");
  }
  return std::shared_ptr<Event>(std::make_shared<CudaEvent>(ordinal_, e, sticky));
}

Status CudaStream::WaitEvent(std::shared_ptr<Event> event) {
  if (event == nullptr) return InvalidArgumentError(Where() + ": WaitEvent on a null event");
  MF_RETURN_IF_ERROR(status());
  if (const auto* cuda = dynamic_cast<const CudaEvent*>(event.get())) {
    if (!cuda->recorded_status().ok()) return Fail(cuda->recorded_status());
    MF_RETURN_IF_ERROR(MakeCurrent());
    return Check(cudaStreamWaitEvent(stream_, cuda->native_handle(), 0), "cudaStreamWaitEvent");
  }
  // Another kind of event (a host stream's): block this thread until it completed, so that device
  // work enqueued from here on starts after it.
  if (event->Query()) return Fail(event->Synchronize());
  const Clock::time_point start = Clock::now();
  Status s = event->Synchronize();
  const Clock::time_point end = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.wait_us += MicrosBetween(start, end);
    if (record_) {
      Entry wait;
      wait.label = "wait";
      wait.host_start = start;
      wait.host_end = end;
      timeline_.push_back(wait);
    }
  }
  return Fail(std::move(s));
}

bool CudaStream::Query() {
  const cudaError_t e = cudaStreamQuery(stream_);
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess) (void)Check(e, "cudaStreamQuery");
  return true;
}

Status CudaStream::Synchronize() {
  MF_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  return status();
}

void CudaStream::set_record_timeline(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  record_ = on;
}

std::vector<StreamRecord> CudaStream::TakeTimeline() {
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries.swap(timeline_);
  }
  std::vector<StreamRecord> out;
  if (entries.empty()) return out;
  // The reference: an event recorded after every entry; once it completed, its device time is
  // (within the wake-up latency) the host time at which the wait returned.
  cudaEvent_t ref = nullptr;
  Clock::time_point ref_time;
  if (cudaSetDevice(ordinal_) == cudaSuccess) ref = RecordTimingEvent();
  if (ref != nullptr && cudaEventSynchronize(ref) == cudaSuccess) {
    ref_time = Clock::now();
  } else if (ref != nullptr) {
    (void)cudaEventDestroy(ref);
    ref = nullptr;
  }
  (void)cudaGetLastError();
  // Device time of `e` as a steady_clock time (false when it cannot be read).
  auto host_time = [&](cudaEvent_t e, Clock::time_point* t) {
    float ms = 0;
    if (ref == nullptr || cudaEventElapsedTime(&ms, e, ref) != cudaSuccess) return false;
    *t = ref_time - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
    return true;
  };
  double busy_us = 0;
  for (const Entry& e : entries) {
    StreamRecord r{e.label, e.host_start, e.host_end};
    const bool ok = e.start == nullptr || (host_time(e.start, &r.start) && host_time(e.end, &r.end));
    if (e.start != nullptr) {
      busy_us += ok ? MicrosBetween(r.start, r.end) : 0;
      (void)cudaEventDestroy(e.start);
      (void)cudaEventDestroy(e.end);
    }
    if (ok) out.push_back(r);
  }
  if (ref != nullptr) (void)cudaEventDestroy(ref);
  (void)cudaGetLastError();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.busy_us += busy_us;
  return out;
}

StreamStats CudaStream::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// ---------------------------------------------------------------------------------------------
// CudaRuntime

StatusOr<std::unique_ptr<CudaRuntime>> CudaRuntime::Create(int ordinal) {
  MF_RETURN_IF_ERROR(CheckDeviceExists(ordinal));
  const std::string where = "CUDA runtime for " + DeviceName(ordinal);
  MF_RETURN_IF_ERROR(SetDevice(ordinal, [&] { return where; }));
  size_t free_bytes = 0, total_bytes = 0;
  MF_RETURN_IF_ERROR(CheckCuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo", where));
  const CachingAllocatorOptions options{
      .min_cached_bytes = 0, .granule = 512, .limit_bytes = static_cast<int64_t>(total_bytes)};
  return std::unique_ptr<CudaRuntime>(
      new CudaRuntime(ordinal, NewCachingAllocator(std::make_unique<CudaMemory>(ordinal), options)));
}

StatusOr<std::unique_ptr<DeviceRuntime>> NewCudaRuntime(int ordinal) {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<CudaRuntime> rt, CudaRuntime::Create(ordinal));
  return std::unique_ptr<DeviceRuntime>(std::move(rt));
}

StatusOr<std::shared_ptr<Stream>> CudaRuntime::NewStream(std::string name) {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<CudaStream> s, CudaStream::Create(std::move(name), ordinal_));
  return std::shared_ptr<Stream>(std::move(s));
}

StatusOr<std::shared_ptr<Stream>> CudaRuntime::NewComputeStream(std::string name) {
  return NewStream(std::move(name));  // asynchronous, like every CUDA stream
}

StatusOr<cudaStream_t> CudaRuntime::StreamFor(const Stream& stream, const char* what) const {
  const auto* cuda = dynamic_cast<const CudaStream*>(&stream);
  if (cuda == nullptr || cuda->ordinal() != ordinal_) {
    return InvalidArgumentError(std::string(what) + " on " + DeviceName(ordinal_) + ": stream '" + stream.name() +
                                "' of " + stream.device().ToString() + " is not a CUDA stream of this device");
  }
  MF_RETURN_IF_ERROR(SetDevice(ordinal_, [&] { return std::string(what) + " on stream '" + stream.name() + "'"; }));
  return cuda->cuda_stream();
}

Status CudaRuntime::Copy(void* dst, const void* src, int64_t bytes, Stream& stream) {
  if (bytes < 0) {
    return InvalidArgumentError("Copy on " + DeviceName(ordinal_) + ": negative size " + std::to_string(bytes));
  }
  MF_ASSIGN_OR_RETURN(cudaStream_t s, StreamFor(stream, "Copy"));
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) {
    return InvalidArgumentError("Copy on " + DeviceName(ordinal_) + ": null " + (dst == nullptr ? "dst" : "src") +
                                " for " + std::to_string(bytes) + " bytes");
  }
  const cudaError_t e = cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, s);
  if (e == cudaSuccess) return Status::Ok();
  return CheckCuda(e, "cudaMemcpyAsync",
                   "Copy of " + std::to_string(bytes) + " bytes on stream '" + stream.name() + "'");
}

Status CudaRuntime::CopyRegion(const void* src, std::span<const int64_t> src_shape, std::span<const int64_t> src_offset,
                               void* dst, std::span<const int64_t> dst_shape, std::span<const int64_t> dst_offset,
                               std::span<const int64_t> extent, int64_t elem_size, Stream& stream) {
  MF_ASSIGN_OR_RETURN(cudaStream_t s, StreamFor(stream, "CopyRegion"));
  return CopyRegionOnDevice(src, src_shape, src_offset, dst, dst_shape, dst_offset, extent, elem_size, s);
}

Status CudaRuntime::Fill(void* dst, int64_t count, const void* value, int64_t elem_size, Stream& stream) {
  MF_ASSIGN_OR_RETURN(cudaStream_t s, StreamFor(stream, "Fill"));
  return FillOnDevice(dst, count, value, elem_size, s);
}

}  // namespace meshflow
