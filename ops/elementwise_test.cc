// The device kernel bodies (elementwise.h), run in host loops on host memory by HostLoopBackend
// through the device driver (shared_kernels.h), against the CPU kernels (RunKernel): every op,
// every unary / binary / compare / reduce / norm / loss variant, every dtype the CPU takes,
// broadcasting, uneven and empty shapes, bf16. The CPU kernels run their scalar loops here
// (CpuVectorLevel::kScalar; the vectorized f32 loops are tested against those in kernels_test):
// the order of operations is the CPU's everywhere and the host's math library serves both, so
// every result must be bitwise equal (Tensor ==, NaN payloads included). The GPU run of the same bodies is ops/cuda/cuda_op_kernels_test.cc.
#include "meshflow/ops/elementwise.h"

#include <barrier>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/ops/cpu_vector.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/ops/op_test_cases.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/shared_kernels.h"

namespace meshflow {
namespace {

const bool kScalarKernels = SetCpuVectorLevel(CpuVectorLevel::kScalar).ok();

namespace ew = elementwise;
using testing::Case;
using testing::Ids;
using testing::kFloats;
using testing::Label;
using testing::Ptrs;
using testing::Random;

// RunKernel and the shared bodies agree: both OK with the same bits, or the same error code.
void ExpectSame(const Case& c) {
  const std::vector<const Tensor*> p = Ptrs(c.xs);
  StatusOr<Tensor> want = RunKernel(c.op, p, c.ctx);
  HostLoopBackend host;
  StatusOr<Tensor> got = RunSharedKernel(c.op, p, c.ctx, host);
  ASSERT_EQ(got.ok(), want.ok()) << Label(c) << ": device " << got.status() << ", cpu " << want.status();
  if (!want.ok()) {
    EXPECT_EQ(got.status().code(), want.status().code()) << Label(c) << ": " << got.status() << " vs " << want.status();
    return;
  }
  EXPECT_TRUE(*got == *want) << Label(c) << "\n device " << got->ToString() << "\n cpu    " << want->ToString();
}

void ExpectAllSame(const std::vector<Case>& cases) {
  for (const Case& c : cases) ExpectSame(c);
}

// ---- Tests ----

TEST(ElementwiseTest, CpuKernelsRunTheirScalarLoops) {
  ASSERT_TRUE(kScalarKernels);
  EXPECT_EQ(ActiveCpuVectorLevel(), CpuVectorLevel::kScalar);
}

TEST(ElementwiseTest, Bf16ConversionsMatchBFloat16) {
  for (uint32_t b = 0; b < 65536; ++b) {
    BFloat16 ref;
    ref.bits = static_cast<uint16_t>(b);
    const float want = static_cast<float>(ref), got = ew::Bf16ToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0) << b;
  }
  std::mt19937 rng(5);
  std::vector<uint32_t> patterns = {0u,          0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                    0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x00008000u, 0x7f7f8000u};
  for (int i = 0; i < 1000000; ++i) patterns.push_back(rng());
  for (uint32_t u : patterns) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    ASSERT_EQ(ew::FloatToBf16(f), BFloat16(f).bits) << std::hex << u;
  }
}

TEST(ElementwiseTest, BinaryMatchesCpu) { ExpectAllSame(testing::BinaryCases()); }
TEST(ElementwiseTest, UnaryMatchesCpu) { ExpectAllSame(testing::UnaryCases()); }
TEST(ElementwiseTest, CompareAndWhereMatchCpu) { ExpectAllSame(testing::CompareWhereCases()); }
TEST(ElementwiseTest, ReduceMatchesCpu) { ExpectAllSame(testing::ReduceCases()); }
TEST(ElementwiseTest, SoftmaxAndNormsMatchCpu) { ExpectAllSame(testing::SoftmaxNormCases()); }
TEST(ElementwiseTest, DataMovementMatchesCpu) { ExpectAllSame(testing::MovementCases()); }
TEST(ElementwiseTest, EmbeddingAndGradMatchCpu) { ExpectAllSame(testing::EmbeddingCases()); }
TEST(ElementwiseTest, CrossEntropyAndGradMatchCpu) { ExpectAllSame(testing::LossCases()); }
TEST(ElementwiseTest, MatmulMatchesCpu) { ExpectAllSame(testing::MatmulCases()); }

// Every alternative of OpParams and every op-kind value is covered by the cases above (with every
// dtype the CPU kernels take for it, by construction of the generators).
TEST(ElementwiseTest, CasesCoverEveryOpAndVariant) {
  std::set<size_t> params;
  std::set<int> unary, binary, compare, reduce, norm, loss;
  {
    for (const Case& c : testing::AllCases()) {
      params.insert(c.op.params.index());
      if (const auto* p = c.op.get<UnaryParams>()) unary.insert(static_cast<int>(p->op));
      if (const auto* p = c.op.get<BinaryParams>()) binary.insert(static_cast<int>(p->op));
      if (const auto* p = c.op.get<CompareParams>()) compare.insert(static_cast<int>(p->op));
      if (const auto* p = c.op.get<ReduceParams>()) reduce.insert(static_cast<int>(p->kind));
      if (const auto* p = c.op.get<NormParams>()) norm.insert(static_cast<int>(p->kind));
      if (const auto* p = c.op.get<CrossEntropyParams>()) loss.insert(static_cast<int>(p->reduction));
      if (const auto* p = c.op.get<CrossEntropyGradParams>()) loss.insert(10 + static_cast<int>(p->reduction));
    }
  }
  EXPECT_EQ(params.size(), std::variant_size_v<OpParams>);
  EXPECT_EQ(unary.size(), static_cast<size_t>(UnaryOp::kFill) + 1);
  EXPECT_EQ(binary.size(), 4u);
  EXPECT_EQ(compare.size(), 6u);
  EXPECT_EQ(reduce.size(), 4u);
  EXPECT_EQ(norm.size(), 2u);
  EXPECT_EQ(loss.size(), 6u);
}

// Operand count and shape errors name the op like the CPU's.
TEST(ElementwiseTest, ArgumentErrors) {
  HostLoopBackend host;
  const Tensor x = Random(DType::kF32, {2, 3}, 1);
  const Tensor* one[] = {&x};
  StatusOr<Tensor> y = RunSharedKernel(OpSpec::Matmul(), one, KernelContext{}, host);
  EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("expected 2 operands, got 1"), std::string::npos) << y.status();
  const Tensor b = Random(DType::kF32, {4}, 2);
  const Tensor* two[] = {&x, &b};
  y = RunSharedKernel(OpSpec::Binary(BinaryOp::kAdd), two, KernelContext{}, host);
  EXPECT_NE(y.status().message().find("[2,3] and [4] do not broadcast"), std::string::npos) << y.status();
  // More than kMaxDims dims that cannot merge: UNIMPLEMENTED naming the shape.
  const Tensor big = Random(DType::kF32, {2, 2, 2, 2, 2, 2, 2, 2, 2}, 3);
  const Tensor* p[] = {&big};
  y = RunSharedKernel(OpSpec::Permute({8, 7, 6, 5, 4, 3, 2, 1, 0}), p, KernelContext{}, host);
  EXPECT_EQ(y.status().code(), StatusCode::kUnimplemented) << y.status();
  EXPECT_NE(y.status().message().find("[2,2,2,2,2,2,2,2,2]"), std::string::npos) << y.status();
}

// Device kernels do not check ids / targets (that would need a host synchronization): NaN rows.
TEST(ElementwiseTest, BadIdsGiveNaNRows) {
  HostLoopBackend host;
  const Tensor table = Random(DType::kF32, {3, 2}, 1);
  Tensor ids = Ids(DType::kI64, {2}, 2, 3);
  ids.data<int64_t>()[1] = 7;
  const Tensor* e[] = {&table, &ids};
  StatusOr<Tensor> y = RunSharedKernel(OpSpec::Embedding(), e, KernelContext{}, host);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_FALSE(std::isnan(y->GetAsDouble(0)));
  EXPECT_TRUE(std::isnan(y->GetAsDouble(2)) && std::isnan(y->GetAsDouble(3)));
  EXPECT_FALSE(RunKernel(OpSpec::Embedding(), e).ok());
  const Tensor logits = Random(DType::kF32, {2, 3}, 3);
  const Tensor* ce[] = {&logits, &ids};
  y = RunSharedKernel(OpSpec::CrossEntropy(LossReduction::kNone), ce, KernelContext{}, host);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_FALSE(std::isnan(y->GetAsDouble(0)));
  EXPECT_TRUE(std::isnan(y->GetAsDouble(1)));
}

// ---- Vocab-parallel cross-entropy: two ranks (threads), each holding some classes ----

// A rank-order all-reduce of f64 rows between two threads.
class TwoRankReduce {
 public:
  void Reduce(int rank, double* rows, int64_t n, ReduceOp op) {
    slots_[rank].assign(rows, rows + n);
    sync_.arrive_and_wait();
    for (int64_t i = 0; i < n; ++i) {
      const double a = slots_[0][static_cast<size_t>(i)], b = slots_[1][static_cast<size_t>(i)];
      rows[i] = op == ReduceOp::kMax ? std::max(a, b) : a + b;
    }
    sync_.arrive_and_wait();
  }

 private:
  std::barrier<> sync_{2};
  std::vector<double> slots_[2];
};

// logits [..., C] split at class `split` over two ranks: each rank's shared result equals the CPU's.
void ExpectVocabParallelSame(const OpSpec& op, const Tensor& logits, const Tensor& targets, const Tensor* grad,
                             int64_t split, int64_t mean_count) {
  const int64_t c = logits.shape().back();
  TwoRankReduce cpu_reduce, dev_reduce;
  StatusOr<Tensor> cpu[2] = {Tensor(), Tensor()}, dev[2] = {Tensor(), Tensor()};
  auto run = [&](int rank) {
    const int64_t lo = rank == 0 ? 0 : split, hi = rank == 0 ? split : c;
    Box box = FullBox(logits.shape());
    box.offset.back() = lo;
    box.shape.back() = hi - lo;
    const Tensor local = logits.Slice(box);
    VocabShard v{lo, c, rank == 0, [&](std::vector<double>& rows, ReduceOp rop) {
                   cpu_reduce.Reduce(rank, rows.data(), static_cast<int64_t>(rows.size()), rop);
                   return Status::Ok();
                 }};
    DeviceVocabShard dv{lo, c, rank == 0, [&](void* rows, int64_t n, DType dtype, ReduceOp rop) {
                          EXPECT_EQ(dtype, DType::kF64);
                          dev_reduce.Reduce(rank, static_cast<double*>(rows), n, rop);
                          return Status::Ok();
                        }};
    std::vector<const Tensor*> x = {&local, &targets};
    if (grad != nullptr) x.push_back(grad);
    KernelContext ctx;
    ctx.mean_count = mean_count;
    HostLoopBackend host;
    dev[rank] = RunSharedVocabParallel(op, x, ctx, dv, host);
    if (const auto* p = op.get<CrossEntropyParams>()) {
      cpu[rank] = CrossEntropyKernel(local, targets, p->reduction, mean_count, v);
    } else {
      cpu[rank] =
          CrossEntropyGradKernel(local, targets, *grad, op.get<CrossEntropyGradParams>()->reduction, mean_count, v);
    }
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(cpu[r].ok() && dev[r].ok())
        << op.ToString() << " rank " << r << ": " << cpu[r].status() << " / " << dev[r].status();
    EXPECT_TRUE(*cpu[r] == *dev[r]) << op.ToString() << " rank " << r << "\n device " << dev[r]->ToString()
                                    << "\n cpu    " << cpu[r]->ToString();
  }
}

TEST(ElementwiseTest, VocabParallelMatchesCpu) {
  uint32_t seed = 900;
  for (DType t : kFloats) {
    for (LossReduction r : {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone}) {
      for (int64_t split : {0, 3, 4, 9}) {
        const Tensor logits = Random(t, {4, 2, 9}, ++seed, -6, 6);
        const Tensor targets = Ids(DType::kI32, {4, 2}, ++seed, 9);
        const Tensor g =
            Random(t, r == LossReduction::kNone ? std::vector<int64_t>{4, 2} : std::vector<int64_t>{}, ++seed);
        ExpectVocabParallelSame(OpSpec::CrossEntropy(r), logits, targets, nullptr, split, split == 4 ? 20 : -1);
        ExpectVocabParallelSame(OpSpec::CrossEntropyGrad(r), logits, targets, &g, split, split == 3 ? 20 : -1);
      }
    }
  }
}

TEST(ElementwiseTest, VocabParallelRejectsOtherOps) {
  HostLoopBackend host;
  const Tensor x = Random(DType::kF32, {2, 3}, 1);
  const Tensor* one[] = {&x};
  DeviceVocabShard v{0, 3, true, [](void*, int64_t, DType, ReduceOp) { return Status::Ok(); }};
  EXPECT_EQ(RunSharedVocabParallel(OpSpec::Unary(UnaryOp::kExp), one, KernelContext{}, v, host).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshflow
