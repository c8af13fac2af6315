// CudaOpKernels on a GPU against the CPU kernels (RunKernel): the op cases of ops/op_test_cases.h
// (every op, dtype and shape kind), the vocab-parallel cross-entropy on two streams, and the
// registration and placement errors (these run without a GPU too).
//
// Tolerances: bitwise where the device does the CPU's operations in the CPU's order with
// correctly rounded IEEE arithmetic (data movement, where, compare, add / sub / mul / div,
// neg / scale / relu / step / sqrt / rsqrt / add_scalar / fill, every reduction, layer / RMS norm,
// embedding, embedding_grad, integers everywhere). Where the device's transcendental functions
// (exp, log, tanh, pow: within a few ulp of glibc's) or cuBLAS's summation order enter, elementwise
// |device - cpu| <= tol * (1 + |cpu|) with tol 1e-12 (f64), 2e-5 (f32), 1.6e-2 (bf16: two bf16
// ulps, one float ulp can flip a rounding); matmul f32 2e-5 * (1 + max |cpu|). NaN and infinities
// must match exactly.
#include "meshflow/ops/cuda/cuda_op_kernels.h"

#include <cuda_runtime.h>

#include <barrier>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/cuda/cuda_status.h"
#include "meshflow/cuda/cuda_test_util.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/ops/device_op_kernels.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/ops/op_test_cases.h"
#include "meshflow/runtime/allocator.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {
namespace {

using testing::Case;

// ---- Device helpers ----

// A new stream on cuda:0 (the CUDA runtime of //runtime/cuda:cuda_device).
std::shared_ptr<Stream> NewDeviceStream(const std::string& name) {
  return GetDeviceRuntime(Device::Cuda(0)).value()->NewStream(name).value();
}

cudaStream_t Native(const std::shared_ptr<Stream>& s) { return static_cast<cudaStream_t>(s->native_handle()); }

Tensor ToDevice(const Tensor& host, const std::shared_ptr<Stream>& stream) {
  Tensor d = Tensor::Empty(host.dtype(), host.shape(), Device::Cuda(0), stream).value();
  if (host.NumBytes() > 0) {
    EXPECT_EQ(cudaMemcpyAsync(d.raw(), host.raw(), static_cast<size_t>(host.NumBytes()), cudaMemcpyHostToDevice,
                              Native(stream)),
              cudaSuccess);
  }
  return d;
}

Tensor ToHost(const Tensor& dev, const std::shared_ptr<Stream>& stream) {
  EXPECT_EQ(cudaStreamSynchronize(Native(stream)), cudaSuccess);
  Tensor h = Tensor::Zeros(dev.dtype(), dev.shape());
  if (h.NumBytes() > 0) {
    EXPECT_EQ(cudaMemcpy(h.raw(), dev.raw(), static_cast<size_t>(h.NumBytes()), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return h;
}

// ---- Comparison ----

// Whether the device runs the CPU's exact operations (see the file comment).
bool Bitwise(const OpSpec& op, DType dtype) {
  if (IsIntDType(dtype)) return true;
  if (op.get<MatmulParams>() || op.get<SoftmaxParams>() || op.get<CrossEntropyParams>() ||
      op.get<CrossEntropyGradParams>()) {
    return false;
  }
  if (const auto* u = op.get<UnaryParams>()) {
    switch (u->op) {
      case UnaryOp::kNeg:
      case UnaryOp::kScale:
      case UnaryOp::kRelu:
      case UnaryOp::kStep:
      case UnaryOp::kSqrt:
      case UnaryOp::kRsqrt:
      case UnaryOp::kAddScalar:
      case UnaryOp::kFill: return true;
      default: return false;
    }
  }
  return true;
}

double Tolerance(DType t) { return t == DType::kF64 ? 1e-12 : t == DType::kF32 ? 2e-5 : 1.6e-2; }

// "" when `got` matches `want` (bitwise, or within the tolerance), else the first difference.
std::string Mismatch(const OpSpec& op, const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return "dtype / shape differ";
  if (Bitwise(op, want.dtype())) return got == want ? "" : "bits differ: got " + got.ToString();
  double scale = 0;
  for (int64_t i = 0; op.get<MatmulParams>() && i < want.NumElements(); ++i) {
    if (std::isfinite(want.GetAsDouble(i))) scale = std::max(scale, std::abs(want.GetAsDouble(i)));
  }
  for (int64_t i = 0; i < want.NumElements(); ++i) {
    const double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    if (std::isnan(w) || std::isinf(w)) {
      if ((std::isnan(w) && std::isnan(g)) || g == w) continue;
    } else if (std::abs(g - w) <= Tolerance(want.dtype()) * (1 + std::max(scale, std::abs(w)))) {
      continue;
    }
    return "element " + std::to_string(i) + ": got " + std::to_string(g) + " want " + std::to_string(w) + "; got " +
           got.ToString();
  }
  return "";
}

// ---- Tests that need no GPU ----

TEST(CudaOpKernelsTest, FactoryIsRegistered) {
  StatusOr<DeviceOpKernels*> k = DeviceOpKernelsFor(Device::Cuda(0));
  if (NoCudaDeviceReason().empty()) {
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ((*k)->device(), Device::Cuda(0));
  } else {  // the factory ran (not "no op kernels in this program") and found no device
    EXPECT_EQ(k.status().code(), StatusCode::kUnavailable) << k.status();
    EXPECT_NE(k.status().message().find("no CUDA device 0"), std::string::npos) << k.status();
  }
}

TEST(CudaOpKernelsTest, PlacementErrors) {
  CudaOpKernels kernels(0);
  const Tensor x = Tensor::Iota(DType::kF32, {2, 2});
  const Tensor* operands[] = {&x};
  const OpSpec op = OpSpec::Unary(UnaryOp::kExp);
  StatusOr<Tensor> y = kernels.Run(op, operands, KernelContext{}, nullptr);
  EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
  const std::shared_ptr<Stream> host = NewHostStream("host");
  y = kernels.Run(op, operands, KernelContext{}, host);
  EXPECT_NE(y.status().message().find("stream 'host' is on host, the kernels on cuda:0"), std::string::npos)
      << y.status();
  const std::shared_ptr<Stream> fake = NewHostStream("fake", Device::Cuda(0));  // reports cuda:0, runs nothing
  y = kernels.Run(op, operands, KernelContext{}, fake);
  EXPECT_NE(y.status().message().find("operand 0 is on host"), std::string::npos) << y.status();
  const Tensor* none[] = {nullptr};
  y = kernels.Run(op, none, KernelContext{}, fake);
  EXPECT_NE(y.status().message().find("stream 'fake' of cuda:0 is not a CUDA stream"), std::string::npos) << y.status();
}

// ---- Tests on the GPU ----

TEST(CudaOpKernelsTest, EveryOpMatchesCpu) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  const std::shared_ptr<Stream> stream = NewDeviceStream("ops");
  CudaOpKernels kernels(0);
  int checked = 0;
  for (const Case& c : testing::AllCases()) {
    StatusOr<Tensor> want = RunKernel(c.op, testing::Ptrs(c.xs), c.ctx);
    std::vector<Tensor> dev;
    for (const Tensor& x : c.xs) dev.push_back(ToDevice(x, stream));
    StatusOr<Tensor> got = kernels.Run(c.op, testing::Ptrs(dev), c.ctx, stream);
    if (!want.ok()) {
      EXPECT_FALSE(got.ok()) << testing::Label(c) << ": cpu " << want.status();
      if (!got.ok()) {
        EXPECT_EQ(got.status().code(), want.status().code()) << testing::Label(c) << ": " << got.status();
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << testing::Label(c) << ": " << got.status();
    EXPECT_EQ(got->device(), Device::Cuda(0));
    const std::string diff = Mismatch(c.op, ToHost(*got, stream), *want);
    EXPECT_EQ(diff, "") << testing::Label(c) << "\n cpu " << want->ToString();
    ++checked;
  }
  EXPECT_GT(checked, 1000);
  EXPECT_TRUE(stream->Synchronize().ok());
}

// ids / targets out of range: NaN rows on the device (the CPU kernels return an error).
TEST(CudaOpKernelsTest, BadIdsGiveNaNRows) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  const std::shared_ptr<Stream> stream = NewDeviceStream("ids");
  CudaOpKernels kernels(0);
  const Tensor table = ToDevice(testing::Random(DType::kF32, {3, 2}, 1), stream);
  const Tensor ids = ToDevice(Tensor::FromVector<int64_t>({2}, {1, 7}).value(), stream);
  const Tensor* operands[] = {&table, &ids};
  StatusOr<Tensor> y = kernels.Run(OpSpec::Embedding(), operands, KernelContext{}, stream);
  ASSERT_TRUE(y.ok()) << y.status();
  const Tensor h = ToHost(*y, stream);
  EXPECT_FALSE(std::isnan(h.GetAsDouble(0)));
  EXPECT_TRUE(std::isnan(h.GetAsDouble(2)));
}

// A rank-order all-reduce of f64 device rows between two threads (staged through the host).
class TwoRankDeviceReduce {
 public:
  Status Reduce(int rank, void* rows, int64_t n, ReduceOp op, cudaStream_t stream) {
    std::vector<double>& mine = slots_[rank];
    mine.resize(static_cast<size_t>(n));
    const size_t bytes = static_cast<size_t>(n) * sizeof(double);
    MF_RETURN_IF_ERROR(CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "test all_reduce"));
    if (n > 0) {
      MF_RETURN_IF_ERROR(
          CheckCuda(cudaMemcpy(mine.data(), rows, bytes, cudaMemcpyDeviceToHost), "d2h", "test all_reduce"));
    }
    sync_.arrive_and_wait();
    std::vector<double> out(static_cast<size_t>(n));
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = op == ReduceOp::kMax ? std::max(slots_[0][i], slots_[1][i]) : slots_[0][i] + slots_[1][i];
    }
    sync_.arrive_and_wait();
    if (n > 0) {  // in stream order (pageable: staged before the call returns, so `out` may go)
      MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpyAsync(rows, out.data(), bytes, cudaMemcpyHostToDevice, stream), "h2d",
                                   "test all_reduce"));
    }
    return Status::Ok();
  }

 private:
  std::barrier<> sync_{2};
  std::vector<double> slots_[2];
};

// Two ranks (threads, one stream each) holding classes [0, split) and [split, C): each rank's device
// result matches the CPU's vocab-parallel kernel of the same rank.
void ExpectVocabParallelMatches(const OpSpec& op, const Tensor& logits, const Tensor& targets, const Tensor* grad,
                                int64_t split) {
  const int64_t c = logits.shape().back();
  TwoRankDeviceReduce reduce;
  std::barrier<> cpu_sync(2);
  std::vector<double> cpu_slots[2];
  Tensor got[2], want[2];
  auto run = [&](int rank) {
    const std::shared_ptr<Stream> stream = NewDeviceStream("vocab" + std::to_string(rank));
    const int64_t lo = rank == 0 ? 0 : split, hi = rank == 0 ? split : c;
    Box box = FullBox(logits.shape());
    box.offset.back() = lo;
    box.shape.back() = hi - lo;
    const Tensor local = logits.Slice(box);
    VocabShard v{lo, c, rank == 0, [&](std::vector<double>& rows, ReduceOp rop) {
                   cpu_slots[rank] = rows;
                   cpu_sync.arrive_and_wait();
                   for (size_t i = 0; i < rows.size(); ++i) {
                     rows[i] = rop == ReduceOp::kMax ? std::max(cpu_slots[0][i], cpu_slots[1][i])
                                                     : cpu_slots[0][i] + cpu_slots[1][i];
                   }
                   cpu_sync.arrive_and_wait();
                   return Status::Ok();
                 }};
    DeviceVocabShard dv{lo, c, rank == 0, [&](void* rows, int64_t n, DType, ReduceOp rop) {
                          return reduce.Reduce(rank, rows, n, rop, Native(stream));
                        }};
    const Tensor d_local = ToDevice(local, stream), d_targets = ToDevice(targets, stream);
    const Tensor d_grad = grad != nullptr ? ToDevice(*grad, stream) : Tensor();
    std::vector<const Tensor*> x = {&d_local, &d_targets};
    if (grad != nullptr) x.push_back(&d_grad);
    CudaOpKernels kernels(0);
    got[rank] = ToHost(kernels.RunVocabParallel(op, x, KernelContext{}, dv, stream).value(), stream);
    if (const auto* p = op.get<CrossEntropyParams>()) {
      want[rank] = CrossEntropyKernel(local, targets, p->reduction, -1, v).value();
    } else {
      want[rank] =
          CrossEntropyGradKernel(local, targets, *grad, op.get<CrossEntropyGradParams>()->reduction, -1, v).value();
    }
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Mismatch(op, got[r], want[r]), "") << op.ToString() << " rank " << r;
}

TEST(CudaOpKernelsTest, VocabParallelMatchesCpu) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  uint32_t seed = 1;
  for (DType t : testing::kFloats) {
    for (LossReduction r : {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone}) {
      for (int64_t split : {0, 4, 9}) {
        const Tensor logits = testing::Random(t, {4, 2, 9}, ++seed, -6, 6);
        const Tensor targets = testing::Ids(DType::kI64, {4, 2}, ++seed, 9);
        const std::vector<int64_t> gs = r == LossReduction::kNone ? std::vector<int64_t>{4, 2} : std::vector<int64_t>{};
        const Tensor g = testing::Random(t, gs, ++seed);
        ExpectVocabParallelMatches(OpSpec::CrossEntropy(r), logits, targets, nullptr, split);
        ExpectVocabParallelMatches(OpSpec::CrossEntropyGrad(r), logits, targets, &g, split);
      }
    }
  }
}

}  // namespace
}  // namespace meshflow
