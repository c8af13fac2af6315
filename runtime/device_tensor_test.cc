// Tensors on a device (the fake GPU of runtime/fake_device.h: host memory behind asynchronous
// streams): allocation on a device and stream, explicit stream-ordered copies, element access
// refused on the host, buffers handed between streams, device pools.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/dtensor/tensor.h"
#include "meshflow/runtime/buffer_pool.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/fake_device.h"

namespace meshflow {
namespace {

class DeviceTensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(InstallFakeCudaDevices());
    StatusOr<DeviceRuntime*> rt = GetDeviceRuntime(Device::Cuda(0));
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = *rt;
    compute_ = *rt_->NewComputeStream("compute");
    comm_ = *rt_->NewStream("comm");
  }
  DeviceRuntime* rt_ = nullptr;
  std::shared_ptr<Stream> compute_, comm_;
};

TEST_F(DeviceTensorTest, RoundTripThroughTheDevice) {
  const Tensor host = Tensor::Iota(DType::kF32, {64, 33});
  StatusOr<Tensor> dev = host.CopyTo(Device::Cuda(0), compute_);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(dev->device(), Device::Cuda(0));
  EXPECT_FALSE(dev->is_host());
  EXPECT_EQ(dev->stream(), compute_);
  EXPECT_EQ(dev->shape(), host.shape());
  Tensor copy = *dev;  // a device-to-device copy on the home stream
  EXPECT_NE(copy.raw(), dev->raw());
  StatusOr<Tensor> clone = dev->Clone();
  ASSERT_TRUE(clone.ok());
  StatusOr<Tensor> back = copy.ToHost();  // waits for the stream
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, host);
  StatusOr<Tensor> back2 = clone->ToHost();
  ASSERT_TRUE(back2.ok());
  EXPECT_EQ(*back2, host);
  EXPECT_EQ(dev->ToString(), "f32[64,33]@cuda:0");
}

TEST_F(DeviceTensorTest, CopiesNeedAStreamOfTheDevice) {
  const Tensor host = Tensor::Iota(DType::kF32, {4});
  EXPECT_EQ(host.CopyTo(Device::Cuda(0), nullptr).status().code(), StatusCode::kInvalidArgument);
  std::shared_ptr<Stream> other = *GetDeviceRuntime(Device::Cuda(1)).value()->NewStream("other");
  EXPECT_EQ(host.CopyTo(Device::Cuda(0), other).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Empty(DType::kF32, {4}, Device::Cuda(0), other).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DeviceTensorTest, ElementAccessOnTheHostAborts) {
  StatusOr<Tensor> dev = Tensor::Empty(DType::kF32, {4}, Device::Cuda(0), compute_);
  ASSERT_TRUE(dev.ok());
  EXPECT_DEATH((void)dev->data<float>(), "element access needs a host tensor");
  EXPECT_DEATH((void)(*dev == *dev), "cuda:0");
  EXPECT_DEATH((void)dev->Slice(Box{{0}, {2}}), "Tensor::Slice");
}

// A result of the comm stream handed to compute: its block is not reused while comm may still
// write it, even after the compute stream frees it.
TEST_F(DeviceTensorTest, RehomedBufferWaitsForItsOldStream) {
  Allocator& a = rt_->allocator();
  std::atomic<bool> go{false};
  ASSERT_TRUE(comm_->Enqueue([&]() {
                     while (!go.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
                     return Status::Ok();
                   }).ok());
  const MemoryStats before = a.stats();
  {
    StatusOr<TensorBuffer> b = TensorBuffer::Allocate(Device::Cuda(0), 1 << 16, comm_);
    ASSERT_TRUE(b.ok());
    b->Rehome(compute_);
    EXPECT_EQ(b->stream(), compute_);
  }
  EXPECT_EQ(a.stats().pending_bytes, before.pending_bytes + (1 << 16));
  go.store(true);
  ASSERT_TRUE(comm_->Synchronize().ok());
  a.ReleaseCached();  // collects the pending block (its event completed) and frees it
  EXPECT_EQ(a.stats().pending_bytes, before.pending_bytes);
}

TEST_F(DeviceTensorTest, DevicePoolKeepsOnlyItsDeviceAndStream) {
  BufferPool pool(Device::Cuda(0), comm_);
  StatusOr<TensorBuffer> b = pool.Take(4096);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->device(), Device::Cuda(0));
  EXPECT_EQ(b->stream(), comm_);
  pool.Give(std::move(*b));
  EXPECT_EQ(pool.size(), 1u);
  pool.Give(TensorBuffer(4096));  // a host buffer: dropped
  pool.Give(*TensorBuffer::Allocate(Device::Cuda(0), 4096, compute_));  // another home stream: dropped
  EXPECT_EQ(pool.size(), 1u);
}

}  // namespace
}  // namespace meshflow
