// The CUDA device layer: GetDeviceRuntime on machines with and without a GPU (runs everywhere),
// then, on a GPU, streams and events (ordering, cross-stream waits, waits on host events, sticky
// errors, timelines), copies, region copies and fills against host references, and the caching
// allocator over cudaMalloc (per-stream reuse, cross-stream frees, out of memory).
#include "meshflow/runtime/cuda/cuda_device.h"

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/cuda/cuda_test_util.h"
#include "meshflow/runtime/allocator.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/region_copy.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {
namespace {

using ::testing::HasSubstr;

// Runs everywhere: without a usable device the registered factory says so (UNAVAILABLE naming
// cuda:0); with one it returns the GPU's CudaRuntime.
TEST(CudaRuntimeTest, GetDeviceRuntimeWithOrWithoutADevice) {
  StatusOr<DeviceRuntime*> rt = GetDeviceRuntime(Device::Cuda(0));
  const std::string no_device = NoCudaDeviceReason();
  if (!no_device.empty()) {
    ASSERT_EQ(rt.status().code(), StatusCode::kUnavailable) << rt.status();
    EXPECT_THAT(rt.status().message(), HasSubstr("cuda:0")) << rt.status();
    EXPECT_THAT(rt.status().message(),
                ::testing::AnyOf(HasSubstr("no CUDA device for cuda:0"), HasSubstr("cuda:0 does not exist")))
        << rt.status();
    EXPECT_THAT(rt.status().message(), ::testing::Not(HasSubstr("no CUDA runtime in this program")));
  } else {
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_EQ((*rt)->device(), Device::Cuda(0));
    EXPECT_NE(dynamic_cast<CudaRuntime*>(*rt), nullptr);
    StatusOr<DeviceRuntime*> again = GetDeviceRuntime(Device::Cuda(0));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *rt);  // one runtime per ordinal
  }
  // One past the visible devices never exists; a negative ordinal is a bad argument.
  const StatusOr<int> visible = CudaDeviceCount();
  const int count = visible.ok() ? *visible : 0;
  StatusOr<DeviceRuntime*> past = GetDeviceRuntime(Device::Cuda(count));
  EXPECT_EQ(past.status().code(), StatusCode::kUnavailable) << past.status();
  EXPECT_THAT(past.status().message(), HasSubstr(Device::Cuda(count).ToString()));
  EXPECT_EQ(GetDeviceRuntime(Device::Cuda(-1)).status().code(), StatusCode::kInvalidArgument);
}

CudaRuntime& Runtime() { return *dynamic_cast<CudaRuntime*>(GetDeviceRuntime(Device::Cuda(0)).value()); }

std::shared_ptr<Stream> NewStream(const std::string& name) { return Runtime().NewStream(name).value(); }

// A device buffer of `bytes` from the runtime's allocator, for `stream`; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(int64_t bytes, Stream& stream) : bytes_(bytes), stream_(&stream) {
    p_ = Runtime().allocator().Allocate(bytes, &stream).value();
  }
  ~DeviceBuffer() { Runtime().allocator().Deallocate(p_, bytes_, stream_); }
  void* get() const { return p_; }

 private:
  int64_t bytes_;
  Stream* stream_;
  void* p_ = nullptr;
};

TEST(CudaStreamTest, WorkRunsAtOnceAndDeviceWorkInStreamOrder) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::shared_ptr<Stream> s = NewStream("s");
  EXPECT_FALSE(s->is_inline());
  EXPECT_EQ(s->device(), Device::Cuda(0));
  unsigned flags = 0;
  ASSERT_EQ(cudaStreamGetFlags(CudaStreamOf(*s), &flags), cudaSuccess);
  EXPECT_EQ(flags, static_cast<unsigned>(cudaStreamNonBlocking));
  const int64_t n = 16 << 20;  // 64 MiB of floats: the fills take a while
  DeviceBuffer d(n * 4, *s);
  std::vector<float> back(static_cast<size_t>(n));
  bool ran = false;
  for (int i = 1; i <= 8; ++i) {
    const float v = static_cast<float>(i);
    ASSERT_TRUE(s->Enqueue([&, v]() {
                   ran = true;
                   return Runtime().Fill(d.get(), n, &v, 4, *s);
                 }).ok());
    EXPECT_TRUE(ran);  // the work itself ran on this thread, now
  }
  ASSERT_TRUE(s->RunNow([&]() { return Runtime().Copy(back.data(), d.get(), n * 4, *s); }).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  EXPECT_TRUE(s->Query());
  EXPECT_EQ(back.front(), 8.0f);
  EXPECT_EQ(back.back(), 8.0f);
  EXPECT_EQ(s->stats().work_items, 9);
}

TEST(CudaStreamTest, EventsOrderStreams) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::shared_ptr<Stream> producer = NewStream("producer"), consumer = NewStream("consumer");
  const int64_t n = 16 << 20;
  DeviceBuffer a(n * 4, *producer), b(n * 4, *consumer);
  for (int round = 1; round <= 3; ++round) {
    const float v = static_cast<float>(round);
    ASSERT_TRUE(producer
                    ->Enqueue([&]() {
                      for (int k = 0; k < 4; ++k) MF_RETURN_IF_ERROR(Runtime().Fill(a.get(), n, &v, 4, *producer));
                      return Status::Ok();
                    })
                    .ok());
    StatusOr<std::shared_ptr<Event>> done = producer->RecordEvent();
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_NE(dynamic_cast<CudaEvent*>(done->get()), nullptr);
    ASSERT_TRUE(consumer->WaitEvent(*done).ok());
    float got = 0;
    ASSERT_TRUE(consumer
                    ->RunNow([&]() -> Status {
                      MF_RETURN_IF_ERROR(Runtime().Copy(b.get(), a.get(), n * 4, *consumer));
                      return Runtime().Copy(&got, static_cast<float*>(b.get()) + n - 1, 4, *consumer);
                    })
                    .ok());
    ASSERT_TRUE(consumer->Synchronize().ok());
    EXPECT_TRUE((*done)->Query());
    EXPECT_TRUE((*done)->Synchronize().ok());
    EXPECT_EQ(got, v) << "round " << round;
  }
  EXPECT_EQ(StreamWaitStream(*consumer, *producer), Status::Ok());
}

TEST(CudaStreamTest, WaitOnAHostEventBlocksTheCaller) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::unique_ptr<Stream> host = NewHostStream("host");
  std::shared_ptr<Stream> s = NewStream("s");
  s->set_record_timeline(true);
  std::atomic<bool> host_done{false};
  ASSERT_TRUE(host->Enqueue([&]() {
                    std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    host_done = true;
                    return Status::Ok();
                  })
                  .ok());
  StatusOr<std::shared_ptr<Event>> e = host->RecordEvent();
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(s->WaitEvent(*e).ok());
  EXPECT_TRUE(host_done);  // the wait returned only after the host work ran
  EXPECT_GT(s->stats().wait_us, 10000);
  const std::vector<StreamRecord> timeline = s->TakeTimeline();
  ASSERT_EQ(timeline.size(), 1u);
  EXPECT_STREQ(timeline[0].label, "wait");
  // A host event carrying an error hands it to the CUDA stream.
  ASSERT_TRUE(host->Enqueue([]() { return InternalError("host work failed"); }).ok());
  e = host->RecordEvent();
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(s->WaitEvent(*e).message(), HasSubstr("host work failed"));
  EXPECT_THAT(s->Synchronize().message(), HasSubstr("host work failed"));
}

TEST(CudaStreamTest, ErrorsAreSticky) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::shared_ptr<Stream> s = NewStream("broken"), other = NewStream("other");
  EXPECT_EQ(s->WaitEvent(nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Enqueue(nullptr).code(), StatusCode::kInvalidArgument);
  const Status failed = s->Enqueue([]() { return InternalError("kernel launch failed"); });
  EXPECT_EQ(failed.code(), StatusCode::kInternal);
  EXPECT_THAT(failed.message(), HasSubstr("stream 'broken'"));
  bool ran = false;
  EXPECT_EQ(s->Enqueue([&]() {
    ran = true;
    return Status::Ok();
  }),
            failed);
  EXPECT_FALSE(ran);  // skipped
  EXPECT_EQ(s->status(), failed);
  StatusOr<std::shared_ptr<Event>> e = s->RecordEvent();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->Synchronize(), failed);                                          // events after the error carry it
  EXPECT_THAT(other->WaitEvent(*e).message(), HasSubstr("kernel launch failed"));  // a waiter takes it over
  EXPECT_THAT(other->Synchronize().message(), HasSubstr("stream 'other'"));
  EXPECT_EQ(s->Synchronize(), failed);
}

TEST(CudaStreamTest, TimelineRecordsDeviceTimes) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  std::shared_ptr<Stream> s = NewStream("timed");
  const int64_t n = 32 << 20;
  DeviceBuffer d(n * 4, *s);
  ASSERT_TRUE(s->Synchronize().ok());
  s->set_record_timeline(true);
  const auto before = std::chrono::steady_clock::now();
  const char* labels[] = {"fill a", "fill b", "fill c"};
  for (const char* label : labels) {
    const float v = 3.0f;
    ASSERT_TRUE(s->Enqueue([&]() { return Runtime().Fill(d.get(), n, &v, 4, *s); }, label).ok());
  }
  const std::vector<StreamRecord> timeline = s->TakeTimeline();
  const auto after = std::chrono::steady_clock::now();
  ASSERT_EQ(timeline.size(), 3u);
  const auto slack = std::chrono::milliseconds(2);
  for (size_t i = 0; i < timeline.size(); ++i) {
    EXPECT_STREQ(timeline[i].label, labels[i]);
    EXPECT_LE(timeline[i].start, timeline[i].end);
    EXPECT_GE(timeline[i].start, before - slack);
    EXPECT_LE(timeline[i].end, after + slack);
    if (i > 0) {
      EXPECT_LE(timeline[i - 1].end, timeline[i].start + std::chrono::microseconds(5));
    }
  }
  EXPECT_GT(s->stats().busy_us, 0);
  EXPECT_TRUE(s->TakeTimeline().empty());
}

TEST(CudaRuntimeTest, CopiesRegionsAndFillsMatchTheHost) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  CudaRuntime& rt = Runtime();
  std::shared_ptr<Stream> s = NewStream("bytes");
  std::vector<float> src(32), region(8, -1.0f), filled(37, -1.0f);
  for (int i = 0; i < 32; ++i) src[static_cast<size_t>(i)] = static_cast<float>(i);
  DeviceBuffer a(32 * 4, *s), b(8 * 4, *s), c(38 * 4, *s);
  const int64_t shape[] = {4, 8}, off[] = {1, 2}, ext[] = {2, 4}, zero[] = {0, 0};
  const float half = 0.5f;
  ASSERT_TRUE(s->Enqueue([&]() -> Status {
                 MF_RETURN_IF_ERROR(rt.Copy(a.get(), src.data(), 32 * 4, *s));  // host -> device
                 MF_RETURN_IF_ERROR(rt.CopyRegion(a.get(), shape, off, b.get(), ext, zero, ext, 4, *s));
                 MF_RETURN_IF_ERROR(rt.Copy(region.data(), b.get(), 8 * 4, *s));  // device -> host
                 // 37 floats at an offset of one float: not 8-byte aligned, fill kernel path
                 MF_RETURN_IF_ERROR(rt.Fill(static_cast<float*>(c.get()) + 1, 37, &half, 4, *s));
                 return rt.Copy(filled.data(), static_cast<float*>(c.get()) + 1, 37 * 4, *s);
               }).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  std::vector<float> want(8);
  CopyRegion(reinterpret_cast<const std::byte*>(src.data()), shape, off, reinterpret_cast<std::byte*>(want.data()), ext,
             zero, ext, 4);
  EXPECT_EQ(region, want);
  EXPECT_EQ(filled, std::vector<float>(37, 0.5f));
  // A 12-byte element (byte kernel) and a uniform byte value (cudaMemsetAsync).
  const unsigned char twelve[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<unsigned char> bytes(36);
  const unsigned char seven = 7;
  ASSERT_TRUE(s->RunNow([&]() -> Status {
                 MF_RETURN_IF_ERROR(rt.Fill(c.get(), 3, twelve, 12, *s));
                 MF_RETURN_IF_ERROR(rt.Fill(static_cast<std::byte*>(c.get()) + 36, 4, &seven, 1, *s));
                 return rt.Copy(bytes.data(), c.get(), 36, *s);
               }).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  for (size_t i = 0; i < 36; ++i) EXPECT_EQ(bytes[i], twelve[i % 12]) << i;
}

TEST(CudaRuntimeTest, ByteOperationErrors) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  CudaRuntime& rt = Runtime();
  std::unique_ptr<Stream> host = NewHostStream("host");
  std::shared_ptr<Stream> s = NewStream("s");
  float x = 0;
  const Status wrong = rt.Copy(&x, &x, 4, *host);
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), HasSubstr("stream 'host' of host is not a CUDA stream of this device"));
  EXPECT_EQ(rt.Copy(&x, &x, -1, *s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.Copy(nullptr, &x, 4, *s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.Fill(&x, 1, &x, 0, *s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.Fill(nullptr, 1, &x, 4, *s).code(), StatusCode::kInvalidArgument);
  const int64_t shape[] = {2}, off[] = {1}, ext[] = {2};
  EXPECT_EQ(rt.CopyRegion(&x, shape, off, &x, shape, off, ext, 4, *s).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(rt.Copy(nullptr, nullptr, 0, *s).ok());
  EXPECT_TRUE(s->Synchronize().ok());  // argument errors outside work do not break the stream
}

TEST(CudaAllocatorTest, CachesPerStreamAndReportsOutOfMemory) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  Allocator& alloc = Runtime().allocator();
  EXPECT_EQ(alloc.device(), Device::Cuda(0));
  std::shared_ptr<Stream> s1 = NewStream("s1"), s2 = NewStream("s2");
  const MemoryStats start = alloc.stats();
  void* p = alloc.Allocate(1000, s1.get()).value();
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  alloc.Deallocate(p, 1000, s1.get());
  EXPECT_EQ(alloc.Allocate(1000, s1.get()).value(), p);  // the same stream reuses it at once
  EXPECT_EQ(alloc.stats().hits, start.hits + 1);
  // Used by s2 too: kept pending until s2 ran past the free, then reused.
  const int64_t n = 16 << 20;
  DeviceBuffer big(n * 4, *s2);
  const float one = 1.0f;
  ASSERT_TRUE(s2->Enqueue([&]() {
                  for (int k = 0; k < 8; ++k) MF_RETURN_IF_ERROR(Runtime().Fill(big.get(), n, &one, 4, *s2));
                  return Status::Ok();
                }).ok());
  Stream* uses[] = {s2.get()};
  alloc.Deallocate(p, 1000, s1.get(), uses);
  ASSERT_TRUE(s2->Synchronize().ok());
  EXPECT_EQ(alloc.Allocate(1000, s1.get()).value(), p);
  alloc.Deallocate(p, 1000, s1.get());
  // Far more than any GPU has: RESOURCE_EXHAUSTED naming the device and the size.
  StatusOr<void*> huge = alloc.Allocate(int64_t{1} << 50, s1.get());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(huge.status().message(), HasSubstr("cuda:0"));
  EXPECT_THAT(huge.status().message(), HasSubstr(std::to_string(int64_t{1} << 50)));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failed cudaMalloc left no error behind
}

}  // namespace
}  // namespace meshflow
