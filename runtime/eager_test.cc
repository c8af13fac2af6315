// Eager ops on the in-process world: every rule, every strategy, uneven shapes, 1-D meshes of
// 2..4 ranks and a 2x2 mesh. Each strategy is forced (inputs distributed straight into the
// layouts it needs, Partial ones included) and FullTensor of the result is compared with the
// kernel run on the global tensors; the result layout must be the rule's. Then strategy-choice
// sanity checks, the dispatch cache and errors.
#include "meshflow/runtime/eager.h"


#include <gtest/gtest.h>

#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/runtime/strategy_check.h"
#include "meshflow/ops/test_util.h"

namespace meshflow {
namespace {

using testing::Compare;
using testing::GlobalFor;
using testing::WorldOf;

struct OpCase {
  OpSpec op;
  std::vector<std::vector<int64_t>> shapes;
  double offset1 = 0;  // added to operand 1 (keeps divisors away from 0)
};

std::vector<OpCase> AllCases() {
  using S = std::vector<std::vector<int64_t>>;
  return {
      {OpSpec::Matmul(), S{{5, 7}, {7, 3}}},
      {OpSpec::Matmul(), S{{2, 5, 7}, {7, 3}}},        // linear
      {OpSpec::Matmul(), S{{3, 5, 4}, {3, 4, 2}}},     // bmm
      {OpSpec::Matmul(), S{{2, 1, 3, 5}, {3, 5, 2}}},  // broadcast batch
      {OpSpec::Binary(BinaryOp::kAdd), S{{5, 7}, {5, 7}}},
      {OpSpec::Binary(BinaryOp::kAdd), S{{5, 7}, {7}}},
      {OpSpec::Binary(BinaryOp::kSub), S{{5, 1}, {1, 7}}},
      {OpSpec::Binary(BinaryOp::kMul), S{{5, 7}, {5, 1}}},
      {OpSpec::Binary(BinaryOp::kDiv), S{{5, 7}, {7}}, 3.0},
      {OpSpec::Unary(UnaryOp::kNeg), S{{5, 7}}},
      {OpSpec::Unary(UnaryOp::kScale, 2.5), S{{5, 7}}},
      {OpSpec::Unary(UnaryOp::kRelu), S{{5, 7}}},
      {OpSpec::Unary(UnaryOp::kExp), S{{5, 7}}},
      {OpSpec::Unary(UnaryOp::kGelu), S{{5, 7}}},
      {OpSpec::Reduce(ReduceKind::kSum, {1}, false), S{{5, 7}}},
      {OpSpec::Reduce(ReduceKind::kSum, {}, false), S{{5, 7}}},
      {OpSpec::Reduce(ReduceKind::kSum, {0, 2}, true), S{{3, 5, 2}}},
      {OpSpec::Reduce(ReduceKind::kMean, {0}, false), S{{5, 7}}},
      {OpSpec::Reduce(ReduceKind::kMean, {-1}, true), S{{5, 7}}},
      {OpSpec::Reduce(ReduceKind::kMean, {}, false), S{{5, 7}}},
      {OpSpec::Reduce(ReduceKind::kMax, {1}, false), S{{5, 7}}},
      {OpSpec::Reduce(ReduceKind::kMin, {0}, true), S{{5, 7}}},
      {OpSpec::Softmax(1, false), S{{5, 7}}},
      {OpSpec::Softmax(0, false), S{{5, 7}}},
      {OpSpec::Softmax(-1, true), S{{3, 5, 2}}},
  };
}

// Runs every strategy of `c` on `mesh` with `dtype`; returns failures (empty when all pass) and
// the number of strategies checked.
std::vector<std::string> RunAllStrategies(const OpCase& c, const DeviceMesh& mesh, DType dtype, int* checked) {
  std::vector<Tensor> globals;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    globals.push_back(GlobalFor(dtype, c.shapes[i], static_cast<int>(i) + 1, i == 1 ? c.offset1 : 0));
  }
  std::vector<const Tensor*> gp;
  for (const Tensor& g : globals) gp.push_back(&g);
  std::vector<std::string> failures;
  std::vector<const std::vector<int64_t>*> shapes;
  for (const auto& s : c.shapes) shapes.push_back(&s);
  StatusOr<ShardingRule> rule = RuleFor(c.op, shapes);
  if (!rule.ok()) return {rule.status().ToString()};
  const int64_t mean_count = [&] {
    const ReduceParams* rp = c.op.get<ReduceParams>();
    if (rp == nullptr) return int64_t{-1};
    int64_t n = 1;
    const std::vector<int> dims = *NormalizeReduceDims(c.shapes[0], rp->dims);
    for (int d : dims) n *= c.shapes[0][d];
    return n;
  }();
  StatusOr<Tensor> want = RunKernel(c.op, gp, mean_count);
  if (!want.ok()) return {want.status().ToString()};
  const std::vector<Strategy> strategies = EnumerateStrategies(*rule, mesh.ndim());
  *checked += static_cast<int>(strategies.size());
  return testing::CheckStrategiesOnWorld(c.op, *rule, strategies, globals, *want, mesh);
}

TEST(EagerAllStrategies, EveryRuleEveryStrategy) {
  const std::vector<std::vector<int64_t>> meshes = {{2}, {3}, {4}, {2, 2}};
  int checked = 0;
  for (const OpCase& c : AllCases()) {
    for (const auto& ms : meshes) {
      DeviceMesh mesh = *DeviceMesh::Create(ms);
      for (DType t : {DType::kF64, DType::kF32}) {
        std::vector<std::string> f = RunAllStrategies(c, mesh, t, &checked);
        for (size_t i = 0; i < f.size() && i < 5; ++i) ADD_FAILURE() << f[i];
      }
    }
  }
  std::cout << "checked " << checked << " (op, mesh, dtype, strategy) combinations\n";
}

TEST(EagerAllStrategies, BF16) {
  int checked = 0;
  DeviceMesh mesh = *DeviceMesh::Create({2, 2});
  for (const OpCase& c : AllCases()) {
    std::vector<std::string> f = RunAllStrategies(c, mesh, DType::kBF16, &checked);
    for (size_t i = 0; i < f.size() && i < 5; ++i) ADD_FAILURE() << f[i];
  }
}

// Runs `body` on a world of mesh.size() ranks with per-rank ctx.
Status OnMesh(const DeviceMesh& mesh, const std::function<Status(RankContext&, int)>& body) {
  return WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return body(ctx, comm.rank());
  });
}

TEST(StrategyChoice, ColumnShardedWeightNeedsNoCommunication) {
  DeviceMesh mesh = *DeviceMesh::Create({2});
  ThreadWorld& world = WorldOf(2);
  Tensor xg = GlobalFor(DType::kF32, {5, 7}, 1), wg = GlobalFor(DType::kF32, {7, 3}, 2);
  const Tensor* gp[2] = {&xg, &wg};
  Tensor want = *RunKernel(OpSpec::Matmul(), gp);
  // Plans and the strategy choice are made outside the measured run (they move no data anyway).
  world.ResetCounters();
  Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({5, 7}, mesh, {Replicate{}}));
    MF_ASSIGN_OR_RETURN(Layout wl, Layout::Create({7, 3}, mesh, {Shard{1}}));
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(xg, xl, rank));
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(wg, wl, rank));
    const DTensor* in[2] = {&x, &w};
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseStrategy(OpSpec::Matmul(), in));
    EXPECT_EQ(c->strategy.ToString(), "{R} x {S(1)} -> S(1)");
    EXPECT_EQ(c->modelled_us, 0);
    EXPECT_EQ(c->plans[0], nullptr);
    EXPECT_EQ(c->plans[1], nullptr);
    MF_ASSIGN_OR_RETURN(DTensor y, Matmul(x, w, ctx));
    EXPECT_EQ(y.layout().placements(), (Placements{Shard{1}}));
    EXPECT_EQ(ctx.world().rank() >= 0, true);
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(world.counters(r).bytes_received, 0) << "rank " << r;
  // And the values.
  st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(xg, *Layout::Create({5, 7}, mesh, {Replicate{}}), rank));
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(wg, *Layout::Create({7, 3}, mesh, {Shard{1}}), rank));
    MF_ASSIGN_OR_RETURN(DTensor y, Matmul(x, w, ctx));
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
    EXPECT_EQ(Compare(full, want), "");
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
}

// Expected choices for common layouts, on a 1-D mesh of 4 (5 rows: uneven shards 2,2,1,0).
TEST(StrategyChoice, Table) {
  DeviceMesh mesh = *DeviceMesh::Create({4});
  struct Row {
    OpSpec op;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<Placements> in;
    std::string want;  // chosen strategy
    bool free;         // no communication (local slices / R -> P steps are free)
  };
  const std::vector<Row> rows = {
      {OpSpec::Matmul(), {{5, 7}, {7, 3}}, {{Shard{0}}, {Replicate{}}}, "{S(0)} x {R} -> S(0)", true},
      {OpSpec::Matmul(), {{5, 7}, {7, 3}}, {{Shard{1}}, {Shard{0}}}, "{S(1)} x {S(0)} -> P(sum)", true},
      {OpSpec::Matmul(), {{5, 7}, {7, 3}}, {{Partial{}}, {Replicate{}}}, "{P(sum)} x {R} -> P(sum)", true},
      // Replicated inputs stay in place: among free strategies the one that moves fewer inputs
      // wins (a local slice to a sharded output would make the next op that needs it whole gather).
      {OpSpec::Matmul(), {{5, 7}, {7, 3}}, {{Replicate{}}, {Replicate{}}}, "{R} x {R} -> R", true},
      {OpSpec::Transpose(0, 1), {{7, 3}}, {{Replicate{}}}, "{R} -> R", true},
      // A free move still wins over communication: Shard x Replicate slices the replicated operand.
      {OpSpec::Binary(BinaryOp::kMul), {{5, 7}, {5, 7}}, {{Shard{0}}, {Replicate{}}}, "{S(0)} x {S(0)} -> S(0)",
       true},
      {OpSpec::Binary(BinaryOp::kAdd), {{5, 7}, {5, 7}}, {{Partial{}}, {Partial{}}},
       "{P(sum)} x {P(sum)} -> P(sum)", true},
      // R -> P(sum) is a free local step, so a Partial plus a replicated operand stays Partial.
      {OpSpec::Binary(BinaryOp::kAdd), {{5, 7}, {7}}, {{Partial{}}, {Replicate{}}}, "{P(sum)} x {P(sum)} -> P(sum)",
       true},
      {OpSpec::Reduce(ReduceKind::kSum, {0}, false), {{5, 7}}, {{Shard{0}}}, "{S(0)} -> P(sum)", true},
      {OpSpec::Reduce(ReduceKind::kMax, {1}, false), {{5, 7}}, {{Shard{0}}}, "{S(0)} -> S(0)", true},
      {OpSpec::Softmax(1, false), {{5, 7}}, {{Shard{0}}}, "{S(0)} -> S(0)", true},
      {OpSpec::Softmax(1, false), {{5, 7}}, {{Shard{1}}}, "{S(0)} -> S(0)", false},
      {OpSpec::Unary(UnaryOp::kExp), {{5, 7}}, {{Partial{}}}, "{S(0)} -> S(0)", false},
      {OpSpec::Unary(UnaryOp::kNeg), {{5, 7}}, {{Partial{}}}, "{P(sum)} -> P(sum)", true},
  };
  for (const Row& r : rows) {
    std::vector<DTensor> in;
    for (size_t i = 0; i < r.shapes.size(); ++i) {
      in.push_back(*Distribute(GlobalFor(DType::kF32, r.shapes[i], 1),
                               *Layout::Create(r.shapes[i], mesh, r.in[i]), 0));
    }
    std::vector<const DTensor*> ip;
    for (const DTensor& x : in) ip.push_back(&x);
    StatusOr<std::shared_ptr<const StrategyChoice>> c = ChooseStrategy(r.op, ip);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->strategy.ToString(), r.want) << r.op.ToString();
    EXPECT_EQ((*c)->modelled_us == 0, r.free) << r.op.ToString() << " " << (*c)->strategy.ToString();
  }
}

TEST(Eager, MeanOnUnevenShardsIsGlobalMean) {
  // 5 rows over 4 ranks: 2,2,1,0 rows. Averaging local means would be wrong.
  DeviceMesh mesh = *DeviceMesh::Create({4});
  Tensor g = GlobalFor(DType::kF64, {5, 3}, 3);
  std::vector<int> d0 = {0};
  Tensor want = *ReduceKernel(ReduceKind::kMean, g, d0, false);
  Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(g, *Layout::Create({5, 3}, mesh, {Shard{0}}), rank));
    MF_ASSIGN_OR_RETURN(DTensor y, Mean(x, {0}, false, ctx));
    EXPECT_EQ(y.layout().placements(), (Placements{Partial{}}));
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
    EXPECT_EQ(Compare(full, want), "");
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
}

TEST(Eager, ChainedOpsAndPartialAvgInputs) {
  // y = softmax(relu(x @ w + b)) with x row-sharded, w column-sharded, b Partial(avg).
  DeviceMesh mesh = *DeviceMesh::Create({2, 2});
  Tensor xg = GlobalFor(DType::kF64, {5, 7}, 1), wg = GlobalFor(DType::kF64, {7, 3}, 2),
         bg = GlobalFor(DType::kF64, {3}, 3);
  auto ref = [&]() -> Tensor {
    const Tensor* mm[2] = {&xg, &wg};
    Tensor h = *RunKernel(OpSpec::Matmul(), mm);
    h = *BinaryKernel(BinaryOp::kAdd, h, bg);
    h = *UnaryKernel(UnaryOp::kRelu, h);
    return *SoftmaxKernel(h, -1, false);
  }();
  Status st = OnMesh(mesh, [&](RankContext& ctx, int rank) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(xg, *Layout::Create({5, 7}, mesh, {Shard{0}, Replicate{}}), rank));
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(wg, *Layout::Create({7, 3}, mesh, {Replicate{}, Shard{1}}), rank));
    MF_ASSIGN_OR_RETURN(DTensor b, Distribute(bg, *Layout::Create({3}, mesh, {Partial{ReduceOp::kAvg}, Replicate{}}),
                                              rank));
    MF_ASSIGN_OR_RETURN(DTensor h, Matmul(x, w, ctx));
    MF_ASSIGN_OR_RETURN(h, Add(h, b, ctx));
    MF_ASSIGN_OR_RETURN(h, Relu(h, ctx));
    MF_ASSIGN_OR_RETURN(DTensor y, Softmax(h, -1, ctx));
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
    EXPECT_EQ(Compare(full, ref), "");
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
}

TEST(DispatchCache, SecondCallHits) {
  DispatchCache cache;
  DeviceMesh mesh = *DeviceMesh::Create({2});
  DTensor a = *Distribute(GlobalFor(DType::kF32, {5, 7}, 1), *Layout::Create({5, 7}, mesh, {Shard{0}}), 0);
  DTensor b = *Distribute(GlobalFor(DType::kF32, {7, 3}, 1), *Layout::Create({7, 3}, mesh, {Replicate{}}), 0);
  const DTensor* in[2] = {&a, &b};
  auto c1 = ChooseStrategy(OpSpec::Matmul(), in, &cache);
  auto c2 = ChooseStrategy(OpSpec::Matmul(), in, &cache);
  ASSERT_TRUE(c1.ok() && c2.ok());
  EXPECT_EQ(c1->get(), c2->get());
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
  // Another layout or op is another entry; alpha is not part of the key.
  const DTensor* one[1] = {&a};
  ASSERT_TRUE(ChooseStrategy(OpSpec::Unary(UnaryOp::kScale, 2.0), one, &cache).ok());
  ASSERT_TRUE(ChooseStrategy(OpSpec::Unary(UnaryOp::kScale, 3.0), one, &cache).ok());
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.hits(), 2);
}

TEST(Eager, Errors) {
  DeviceMesh mesh = *DeviceMesh::Create({2});
  DTensor a = *Distribute(GlobalFor(DType::kF32, {5, 7}, 1), *Layout::Create({5, 7}, mesh, {Shard{0}}), 0);
  DTensor b = *Distribute(GlobalFor(DType::kF32, {6, 3}, 1), *Layout::Create({6, 3}, mesh, {Replicate{}}), 0);
  DTensor d = *Distribute(GlobalFor(DType::kF64, {7, 3}, 1), *Layout::Create({7, 3}, mesh, {Replicate{}}), 0);
  DTensor i = *Distribute(Tensor::Zeros(DType::kI32, {7, 3}), *Layout::Create({7, 3}, mesh, {Replicate{}}), 0);
  const DTensor* ab[2] = {&a, &b};
  EXPECT_EQ(ChooseStrategy(OpSpec::Matmul(), ab).status().message(),
            "matmul: contracting sizes differ: a [5,7] has k = 7, b [6,3] has k = 6");
  const DTensor* ad[2] = {&a, &d};
  EXPECT_EQ(ChooseStrategy(OpSpec::Matmul(), ad).status().message(), "matmul: operand dtypes differ: f32 vs f64");
  const DTensor* ii[1] = {&i};
  EXPECT_EQ(ChooseStrategy(OpSpec::Unary(UnaryOp::kExp), ii).status().code(), StatusCode::kUnimplemented);
  DeviceMesh other = *DeviceMesh::Create({2}, {"tp"});
  DTensor o = *Distribute(GlobalFor(DType::kF32, {7, 3}, 1), *Layout::Create({7, 3}, other, {Replicate{}}), 0);
  const DTensor* ao[2] = {&a, &o};
  EXPECT_EQ(ChooseStrategy(OpSpec::Matmul(), ao).status().message(),
            "matmul: operands on different meshes: mesh(2) vs mesh(2, [tp])");
  const DTensor* one[1] = {&a};
  EXPECT_EQ(ChooseStrategy(OpSpec::Matmul(), one).status().message(), "matmul: expected 2 operands, got 1");
}

}  // namespace
}  // namespace meshflow
