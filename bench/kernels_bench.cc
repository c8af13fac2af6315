// CPU kernels against what the machine can do, in one run (ops/kernels.h, ops/blas.h).
//
//   bazel run --config=opt //bench:kernels_bench -- --benchmark_min_time=0.2
//
// BM_Matmul/N: MatmulKernel on f32 [N, N] x [N, N] (one BLAS thread, the default). Counters:
//   GFLOPs     2 N^3 per call / time
//   x_sgemm    our GFLOP/s / cblas_sgemm called directly on the same operands, timed in this
//              benchmark right after ours (best of 5 calls, warm): the kernel's overhead around
//              the BLAS (allocation of the result, dispatch, checks)
// BM_Sgemm/N: cblas_sgemm alone. BM_EigenGemm/N: Eigen's GEMM on row-major maps, compiled with
// this binary's flags: the CPU matmul before issue 35.
// BM_Elementwise/<op>/<rows>: the element-wise, reduction, softmax and norm kernels on f32
// [rows, 1024] (add: + a [1024] bias; gelu; sum over the last dim; softmax over the last dim;
// layer norm over the last dim with weight and bias). Counters: ns_per_element; x_memcpy: bytes
// read + written per second over a single-thread memcpy's (the kernel at memory speed: 1).
// The vectorized loops run at the CPU's best level (MESHFLOW_CPU_VECTOR=baseline caps them).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "meshflow/base/lcg.h"
#include "meshflow/bench/memcpy_bandwidth.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/blas.h"
#include "meshflow/ops/kernels.h"

namespace meshflow {
namespace {

Tensor Random(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = Tensor::Zeros(DType::kF32, std::move(shape));
  auto p = t.data<float>();
  Lcg32 g(seed);
  for (float& x : p) x = static_cast<float>(g.Next24()) / static_cast<float>(1 << 24) - 0.5f;
  return t;
}

template <typename F>
double BestSeconds(int reps, F f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = Random({n, n}, 1), b = Random({n, n}, 2);
  double seconds = 0;
  int64_t calls = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<Tensor> c = MatmulKernel(a, b);
    benchmark::DoNotOptimize(c);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++calls;
    if (!c.ok()) {
      state.SkipWithError(c.status().ToString().c_str());
      return;
    }
  }
  const double flops = 2.0 * static_cast<double>(n * n * n);
  std::vector<float> c(static_cast<size_t>(n * n));
  const int N = static_cast<int>(n);
  const double direct = BestSeconds(5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a.data<float>().data(), N,
                b.data<float>().data(), N, 0.0f, c.data(), N);
    benchmark::ClobberMemory();
  });
  const double ours = seconds / static_cast<double>(calls);
  state.counters["GFLOPs"] = flops / ours / 1e9;
  state.counters["sgemm_GFLOPs"] = flops / direct / 1e9;
  state.counters["x_sgemm"] = direct / ours;
  state.SetLabel(BlasCoreName());
}
BENCHMARK(BM_Matmul)->RangeMultiplier(2)->Range(64, 1024)->Unit(benchmark::kMicrosecond);

void BM_Sgemm(benchmark::State& state) {
  const int N = static_cast<int>(state.range(0));
  const Tensor a = Random({N, N}, 1), b = Random({N, N}, 2);
  std::vector<float> c(static_cast<size_t>(N) * N);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a.data<float>().data(), N,
                b.data<float>().data(), N, 0.0f, c.data(), N);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * N * N * static_cast<double>(N),
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sgemm)->RangeMultiplier(2)->Range(64, 1024)->Unit(benchmark::kMicrosecond);

void BM_EigenGemm(benchmark::State& state) {
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t n = state.range(0);
  const Tensor a = Random({n, n}, 1), b = Random({n, n}, 2);
  Mat c(n, n);
  Eigen::Map<const Mat> A(a.data<float>().data(), n, n), B(b.data<float>().data(), n, n);
  for (auto _ : state) {
    c.noalias() = A * B;
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(n * n * n),
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_EigenGemm)->RangeMultiplier(2)->Range(64, 1024)->Unit(benchmark::kMicrosecond);

enum ElementwiseOp { kAdd, kGelu, kSum, kSoftmax, kLayerNorm };
const char* const kOpNames[] = {"add", "gelu", "sum", "softmax", "layer_norm"};

void BM_Elementwise(benchmark::State& state) {
  const auto op = static_cast<ElementwiseOp>(state.range(0));
  const int64_t rows = state.range(1), d = 1024;
  const Tensor x = Random({rows, d}, 3), bias = Random({d}, 4), weight = Random({d}, 5);
  int64_t bytes = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<Tensor> y = Tensor();
    switch (op) {
      case kAdd: y = BinaryKernel(BinaryOp::kAdd, x, bias); break;
      case kGelu: y = UnaryKernel(UnaryOp::kGelu, x); break;
      case kSum: y = ReduceKernel(ReduceKind::kSum, x, std::vector<int>{1}, false); break;
      case kSoftmax: y = SoftmaxKernel(x, -1, false); break;
      case kLayerNorm: y = NormKernel(NormKind::kLayerNorm, x, 1, &weight, &bias, 1e-5); break;
    }
    benchmark::DoNotOptimize(y);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!y.ok()) {
      state.SkipWithError(y.status().ToString().c_str());
      return;
    }
    bytes = x.NumBytes() + y->NumBytes();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  const double per_op = seconds / static_cast<double>(state.iterations());
  state.counters["ns_per_element"] = per_op * 1e9 / static_cast<double>(x.NumElements());
  // A memcpy of half the bytes reads and writes them all.
  state.counters["x_memcpy"] = static_cast<double>(bytes) / 2 / MemcpyBandwidth(bytes / 2) / per_op;
  state.SetLabel(kOpNames[op]);
}
BENCHMARK(BM_Elementwise)
    ->ArgsProduct({{kAdd, kGelu, kSum, kSoftmax, kLayerNorm}, {256}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
