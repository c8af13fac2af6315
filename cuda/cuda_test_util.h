// Test helper for CUDA tests: skip a gtest test on machines without a usable CUDA device.
//
//   TEST(MyCudaTest, Kernel) {
//     MF_SKIP_WITHOUT_CUDA_DEVICE();   // GTEST_SKIP() << "no CUDA device: ..." when none is usable
//     ...
//   }
#ifndef MESHFLOW_CUDA_CUDA_TEST_UTIL_H_
#define MESHFLOW_CUDA_CUDA_TEST_UTIL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <string>

#include <gtest/gtest.h>

#include "meshflow/cuda/cuda_status.h"

// Returns from the enclosing test body (GTEST_SKIP) with NoCudaDeviceReason() when no CUDA device
// is usable; does nothing otherwise. A macro because GTEST_SKIP must run in the test body itself.
#define MF_SKIP_WITHOUT_CUDA_DEVICE()                                            \
  do {                                                                           \
    const std::string mf_no_cuda_reason = ::meshflow::NoCudaDeviceReason();      \
    if (!mf_no_cuda_reason.empty()) GTEST_SKIP() << mf_no_cuda_reason;           \
  } while (0)

#endif  // MESHFLOW_CUDA_CUDA_TEST_UTIL_H_
