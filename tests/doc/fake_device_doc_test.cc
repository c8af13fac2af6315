// Every example in runtime/fake_device.h and ops/fake_device_op_kernels.h is compiled and run
// here (a binary of its own: installing the fake GPU fixes the process's CUDA factories).
#include <memory>

#include <gtest/gtest.h>

#include "meshflow/ops/device_op_kernels.h"
#include "meshflow/ops/fake_device_op_kernels.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/fake_device.h"

namespace meshflow {
namespace {

// runtime/fake_device.h
Status FakeDeviceExample() {
  InstallFakeCudaDevices();                        // once per test binary, before any CUDA use
  MF_ASSIGN_OR_RETURN(DeviceRuntime* rt, GetDeviceRuntime(Device::Cuda(0)));
  // rt->NewComputeStream(...) is asynchronous; rt->allocator() caches per stream.

  MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, rt->NewComputeStream("compute"));
  EXPECT_FALSE(s->is_inline());
  EXPECT_EQ(rt->allocator().device(), Device::Cuda(0));
  return Status::Ok();
}

TEST(FakeDeviceDocTest, Example) { EXPECT_EQ(FakeDeviceExample(), Status::Ok()); }

// ops/fake_device_op_kernels.h
TEST(FakeDeviceOpKernelsDocTest, Example) {
  ASSERT_TRUE(InstallFakeCudaDevices());     // runtime/fake_device.h
  ASSERT_TRUE(InstallFakeCudaOpKernels());
  const auto body = []() -> Status {
    MF_ASSIGN_OR_RETURN(DeviceOpKernels* k, DeviceOpKernelsFor(Device::Cuda(0)));

    EXPECT_EQ(k->device(), Device::Cuda(0));
    return Status::Ok();
  };
  EXPECT_EQ(body(), Status::Ok());
}

}  // namespace
}  // namespace meshflow
