// The single-thread memcpy baseline of the benches that report x_memcpy (executor_bench,
// kernels_bench).
//
//   const double bw = MemcpyBandwidth(bytes);   // bytes per second
#ifndef MESHFLOW_BENCH_MEMCPY_BANDWIDTH_H_
#define MESHFLOW_BENCH_MEMCPY_BANDWIDTH_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace meshflow {

// Bytes per second of a single-thread memcpy of `bytes` (warm buffers, best of a few reps).
inline double MemcpyBandwidth(int64_t bytes) {
  std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes), 0);
  double best = 0;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::max(best, static_cast<double>(bytes) / s);  // rep 0 faults the pages in
  }
  return best;
}

}  // namespace meshflow

#endif  // MESHFLOW_BENCH_MEMCPY_BANDWIDTH_H_
