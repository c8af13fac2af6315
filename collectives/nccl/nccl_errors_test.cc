// The NCCL row of docs/errors.md (`NcclWorld::Create` without a CUDA device). Kept out of
// tests/errors_test.cc because NCCL targets exist only where @local_cuda found a toolkit
// (third_party/cuda.bzl); the test name follows the table's `ErrorsTest.<Name>` convention.
//
//   bazel test //collectives/nccl:nccl_errors_test
//
// On a machine with a usable CUDA device the row cannot be exercised: the test skips.
#include <string>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/cuda/cuda_status.h"
#include "meshflow/collectives/nccl/nccl_communicator.h"

namespace meshflow {
namespace {

TEST(ErrorsTest, NcclWorldCreate_NoCudaDevice) {
  if (NoCudaDeviceReason().empty()) GTEST_SKIP() << "a CUDA device is present: the no-device row cannot run here";
  StatusOr<std::unique_ptr<NcclWorld>> world = NcclWorld::Create();
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), StatusCode::kUnavailable) << world.status();
  EXPECT_NE(world.status().message().find("NcclWorld::Create: no CUDA device"), std::string::npos)
      << world.status();
}

}  // namespace
}  // namespace meshflow
