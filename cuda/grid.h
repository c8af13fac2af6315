// The launch shape of meshflow's grid-stride CUDA kernels (ops/cuda, runtime/cuda): 256 threads
// per block, enough blocks for one element per thread up to 8 x 65535 blocks (grid-stride loops
// cover the rest). Plain C++: included by .cu files (nvcc) and testable on the host.
#ifndef MESHFLOW_CUDA_GRID_H_
#define MESHFLOW_CUDA_GRID_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>

namespace meshflow::cuda_grid {

inline constexpr int kThreads = 256;
inline constexpr int64_t kMaxBlocks = int64_t{65535} * 8;

// Blocks for `work` elements: ceil(work / kThreads), at least 1, at most kMaxBlocks.
constexpr int Blocks(int64_t work) {
  int64_t b = (work + kThreads - 1) / kThreads;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return b < 1 ? 1 : static_cast<int>(b);
}

}  // namespace meshflow::cuda_grid

#endif  // MESHFLOW_CUDA_GRID_H_
