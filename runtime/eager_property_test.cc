// Property test: random meshes, uneven shapes, random input layouts (Shard / Replicate /
// Partial of any op, random shard orders) for matmul, add, sum/mean/max, softmax, permute,
// reshape, layer norm, concat, slice, embedding (i64 ids) and cross-entropy. The op picks
// its own strategy (redistributing as needed); FullTensor of the result must equal the kernel
// run on the global tensors.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "meshflow/base/test_cases.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/ops/test_util.h"

namespace meshflow {
namespace {

using testing::Compare;
using testing::PropertyTestCases;
using testing::GlobalFor;
using testing::WorldOf;

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  int U(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  DeviceMesh Mesh() {
    static const std::vector<std::vector<int64_t>> kShapes = {{1}, {2}, {3}, {4}, {2, 2}, {1, 2}, {2, 3}, {3, 2}};
    return *DeviceMesh::Create(kShapes[U(0, static_cast<int>(kShapes.size()) - 1)]);
  }

  Layout RandomLayout(const std::vector<int64_t>& shape, const DeviceMesh& mesh) {
    static const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
    const ReduceOp op = U(0, 1) == 0 ? ReduceOp::kSum : kOps[U(0, 3)];
    const int rank = static_cast<int>(shape.size());
    Placements p;
    for (int m = 0; m < mesh.ndim(); ++m) {
      const int k = U(0, 5);
      if (k <= 2 && rank > 0) {
        p.push_back(Shard{U(0, rank - 1)});
      } else if (k <= 4) {
        p.push_back(Replicate{});
      } else {
        p.push_back(Partial{op});
      }
    }
    ShardOrder order(static_cast<size_t>(rank));
    for (int m = 0; m < mesh.ndim(); ++m) {
      if (IsShard(p[m])) order[std::get<Shard>(p[m]).dim].push_back(m);
    }
    for (auto& o : order) std::shuffle(o.begin(), o.end(), rng_);
    return *Layout::Create(shape, mesh, p, order);
  }

  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
};

struct Case {
  OpSpec op;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> int_bounds = {};  // per operand: > 0 means i64 values in [0, bound)
};

// A random reshape target of [r, c]: merge, split of either dim, or a regrouping.
std::vector<int64_t> RandomReshape(Gen& g, int64_t r, int64_t c) {
  switch (g.U(0, 3)) {
    case 0: return {r * c};
    case 1: return r % 2 == 0 ? std::vector<int64_t>{2, r / 2, c} : std::vector<int64_t>{r, c, 1};
    case 2: return c % 2 == 0 ? std::vector<int64_t>{r, 2, c / 2} : std::vector<int64_t>{1, r, c};
    default: return {c, -1};
  }
}

Case RandomCase(Gen& g) {
  const int64_t r = g.U(1, 6), c = g.U(1, 7);
  switch (g.U(0, 12)) {
    case 6: return {OpSpec::Permute({1, 0}), {{r, c}}};
    case 7: return {OpSpec::Reshape(RandomReshape(g, r, c)), {{r, c}}};
    case 8: return {OpSpec::LayerNorm(1, true, g.U(0, 1) == 1), {{r, c}, {c}, {c}}};
    case 9: return {OpSpec::Concat(g.U(0, 1), 2), {{r, c}, {r, c}}};
    case 10: return {OpSpec::Slice(g.U(0, 1), g.U(-3, 2), g.U(1, 7), g.U(1, 2)), {{r, c}}};
    case 11: return {OpSpec::Embedding(), {{r, c}, {g.U(1, 5)}}, {0, r}};
    case 12: return {OpSpec::CrossEntropy(g.U(0, 1) == 0 ? LossReduction::kMean : LossReduction::kNone),
                     {{r, c}, {r}}, {0, c}};
    default: break;
  }
  switch (g.U(0, 5)) {
    case 0: return {OpSpec::Matmul(), {{r, c}, {c, g.U(1, 5)}}};
    case 1: return {OpSpec::Matmul(), {{g.U(1, 3), r, c}, {c, g.U(0, 4)}}};
    case 2: {
      const int kind = g.U(0, 2);
      std::vector<int64_t> b = kind == 0 ? std::vector<int64_t>{r, c} : kind == 1 ? std::vector<int64_t>{c}
                                                                                   : std::vector<int64_t>{r, 1};
      return {OpSpec::Binary(BinaryOp::kAdd), {{r, c}, b}};
    }
    case 3: {
      static const ReduceKind kKinds[] = {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax, ReduceKind::kMin};
      std::vector<int> dims;
      const int which = g.U(0, 3);
      if (which == 1) dims = {0};
      if (which == 2) dims = {1};
      if (which == 3) dims = {-1, 0};
      return {OpSpec::Reduce(kKinds[g.U(0, 3)], dims, g.U(0, 1) == 1), {{r, c}}};
    }
    case 4: return {OpSpec::Softmax(g.U(0, 1) == 0 ? 0 : -1, g.U(0, 1) == 1), {{r, c}}};
    default: return {OpSpec::Softmax(1, false), {{g.U(1, 3), r, c}}};
  }
}

TEST(EagerProperty, RandomLayouts) {
  Gen g(20240611);
  int cases = 0;
  const int iters = PropertyTestCases(330);
  for (int iter = 0; iter < iters; ++iter) {
    Case c = RandomCase(g);
    const DeviceMesh mesh = g.Mesh();
    const DType dtype = g.U(0, 1) == 0 ? DType::kF64 : DType::kF32;
    std::vector<Tensor> globals;
    std::vector<Layout> layouts;
    if (c.op.get<NormParams>() != nullptr && !c.op.get<NormParams>()->has_bias) c.shapes.pop_back();
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      const int64_t bound = i < c.int_bounds.size() ? c.int_bounds[i] : 0;
      globals.push_back(bound > 0 ? testing::IntsFor(DType::kI64, c.shapes[i], static_cast<int>(i) + iter, bound)
                                  : GlobalFor(dtype, c.shapes[i], static_cast<int>(i) + iter));
      layouts.push_back(g.RandomLayout(c.shapes[i], mesh));
    }
    std::vector<const Tensor*> gp;
    for (const Tensor& t : globals) gp.push_back(&t);
    StatusOr<Tensor> want = RunKernel(c.op, gp);
    ASSERT_TRUE(want.ok()) << want.status();
    std::string what = c.op.ToString() + " on " + mesh.ToString() + " " + std::string(DTypeName(dtype));
    for (const Layout& l : layouts) what += " | " + l.ToString();
    Status st = WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
      MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
      std::vector<DTensor> in;
      for (size_t i = 0; i < globals.size(); ++i) {
        MF_ASSIGN_OR_RETURN(DTensor x, Distribute(globals[i], layouts[i], comm.rank()));
        in.push_back(std::move(x));
      }
      std::vector<const DTensor*> ip;
      for (const DTensor& x : in) ip.push_back(&x);
      MF_ASSIGN_OR_RETURN(DTensor y, RunOp(c.op, ip, ctx));
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
      const std::string diff = Compare(full, *want);
      if (!diff.empty()) return InternalError(diff);
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << what << ": " << st;
    ++cases;
  }
  std::cout << cases << " random cases\n";
}

}  // namespace
}  // namespace meshflow
