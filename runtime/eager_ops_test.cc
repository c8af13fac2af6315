// Every strategy of the data-movement, normalization, embedding, concat / slice, cross-entropy
// (vocab-parallel included), integer and rank-1 matmul rules, on uneven shapes, on 1-D (2, 3
// ranks) and 2-D (2x2) meshes of the in-process world. Each strategy is forced (inputs distributed straight into the layouts it
// needs, Partial ones included); EvaluateStrategy may reject it (reshape: a Shard that is not
// exact under torch.chunk on this mesh; slice: a Shard of the sliced dim whose selection is not the
// result's chunks) with FAILED_PRECONDITION, otherwise FullTensor of the
// result must equal the kernel on the global tensors and the result layout must be the rule's.
// Brute-force oracles pin the reshape and slice rejections: a strategy is accepted iff every
// rank's local reshape / slice holds exactly the right elements. Then RunStrategy, cached dispatch from
// arbitrary layouts, and dtype errors.

#include <gtest/gtest.h>

#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/runtime/strategy_check.h"
#include "meshflow/ops/test_util.h"

namespace meshflow {
namespace {

using testing::Compare;
using testing::GlobalFor;
using testing::IntsFor;
using testing::WorldOf;

constexpr DType kFloat = DType::kF32;  // placeholder: "the float dtype under test"

struct Operand {
  std::vector<int64_t> shape;
  std::optional<DType> dtype = std::nullopt;  // nullopt: the float dtype under test
  int64_t bound = 0;           // integers: values in [0, bound) (ids, targets) when > 0
};

struct OpCase {
  OpSpec op;
  std::vector<Operand> operands;
  bool int_only = false;  // run once (integer operands only), not per float dtype
};

std::vector<OpCase> AllCases() {
  const DType i32 = DType::kI32, i64 = DType::kI64;
  return {
      {OpSpec::Permute({2, 0, 1}), {{{5, 3, 7}}}},
      {OpSpec::Permute({-1, 0}), {{{5, 7}, i64}}, true},
      {OpSpec::Transpose(0, -1), {{{5, 7}}}},
      {OpSpec::Transpose(1, 2), {{{3, 5, 2}}}},
      {OpSpec::Reshape({24}), {{{6, 4}}}},
      {OpSpec::Reshape({20}), {{{5, 4}}}},
      {OpSpec::Reshape({5, 4}), {{{20}}}},
      {OpSpec::Reshape({4, -1}), {{{12}}}},
      {OpSpec::Reshape({3, 8}), {{{4, 6}}}},
      {OpSpec::Reshape({6, 5}), {{{2, 3, 5}}}},
      {OpSpec::Reshape({2, 3, 5}), {{{6, 5}}}},
      {OpSpec::Reshape({12, 1}), {{{3, 1, 4}}}},
      {OpSpec::Reshape({1, 7, 5}), {{{7, 5}}}},
      {OpSpec::Reshape({3, 0}), {{{0, 3}}}},
      {OpSpec::Reshape({2, 6}), {{{3, 4}, i32}}, true},
      {OpSpec::LayerNorm(1, true, true), {{{5, 7}}, {{7}}, {{7}}}},
      {OpSpec::LayerNorm(2, true, false), {{{3, 5, 4}}, {{5, 4}}}},
      {OpSpec::LayerNorm(1, false, false, 1e-3), {{{3, 5, 2}}}},
      {OpSpec::RmsNorm(1, true), {{{5, 7}}, {{7}}}},
      {OpSpec::RmsNorm(2, false), {{{3, 5, 2}}}},
      {OpSpec::Embedding(), {{{7, 5}}, {{5}, i64, 7}}},
      {OpSpec::Embedding(), {{{7, 3}}, {{3, 2}, i32, 7}}},
      {OpSpec::Embedding(), {{{5, 3}, i64}, {{7}, i32, 5}}, true},
      {OpSpec::Concat(0, 3), {{{2, 3}}, {{3, 3}}, {{1, 3}}}},
      {OpSpec::Concat(-1, 2), {{{5, 2}}, {{5, 3}}}},
      {OpSpec::Concat(1, 1), {{{3, 5}}}},
      {OpSpec::Concat(0, 2), {{{3, 2}, i32}, {{2, 2}, i32}}, true},
      {OpSpec::Slice(0, 1, 6, 2), {{{7, 5}}}},
      {OpSpec::Slice(1, -4, INT64_MAX, 1), {{{7, 5}}}},
      {OpSpec::Slice(-1, 0, 3, 1), {{{3, 5, 2}}}},
      {OpSpec::Slice(0, 5, 2, 1), {{{7, 5}}}},
      {OpSpec::Slice(0, 0, 8, 2), {{{8, 3}}}},
      {OpSpec::Slice(1, 1, INT64_MAX, 3), {{{2, 12}}}},
      {OpSpec::Slice(0, 3, 7, 1), {{{7, 2}, i64}}, true},
      {OpSpec::CrossEntropy(LossReduction::kMean), {{{7, 5}}, {{7}, i64, 5}}},
      {OpSpec::CrossEntropy(LossReduction::kSum), {{{7, 5}}, {{7}, i32, 5}}},
      {OpSpec::CrossEntropy(LossReduction::kNone), {{{7, 5}}, {{7}, i64, 5}}},
      {OpSpec::CrossEntropy(LossReduction::kMean), {{{3, 5, 4}}, {{3, 5}, i32, 4}}},
      {OpSpec::CrossEntropy(LossReduction::kNone), {{{4, 2}}, {{4}, i64, 2}}},  // empty class chunks
      {OpSpec::CrossEntropy(LossReduction::kSum), {{{0, 5}}, {{0}, i64, 5}}},   // no rows
      {OpSpec::Binary(BinaryOp::kAdd), {{{5, 7}, i32}, {{7}, i32}}, true},
      {OpSpec::Binary(BinaryOp::kSub), {{{5, 1}, i64}, {{1, 7}, i64}}, true},
      {OpSpec::Binary(BinaryOp::kMul), {{{5, 7}, i64}, {{5, 7}, i64}}, true},
      {OpSpec::Unary(UnaryOp::kNeg), {{{5, 7}, i32}}, true},
      {OpSpec::Reduce(ReduceKind::kSum, {1}, false), {{{5, 7}, i64}}, true},
      {OpSpec::Reduce(ReduceKind::kMax, {0}, true), {{{5, 7}, i32}}, true},
      {OpSpec::Reduce(ReduceKind::kMin, {}, false), {{{5, 7}, i64}}, true},
      {OpSpec::Matmul(), {{{7}}, {{7, 3}}}},
      {OpSpec::Matmul(), {{{5, 7}}, {{7}}}},
      {OpSpec::Matmul(), {{{7}}, {{7}}}},
      {OpSpec::Matmul(), {{{2, 5, 7}}, {{7}}}},
      {OpSpec::Matmul(), {{{7}}, {{2, 7, 3}}}},
      // The ops of the gradient path (autograd/).
      {OpSpec::Unary(UnaryOp::kTanh), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kSigmoid), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kSilu), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kSqrt), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kRsqrt), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kPow, 3.0), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kAddScalar, 0.5), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kLog), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kStep), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kGeluDeriv), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kSiluDeriv), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kTanhDeriv), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kSigmoidDeriv), {{{5, 7}}}},
      {OpSpec::Unary(UnaryOp::kFill, 0.5), {{{5, 7}}}},
      {OpSpec::Compare(CompareOp::kLt), {{{5, 7}}, {{7}}}},
      {OpSpec::Compare(CompareOp::kEq), {{{5, 1}}, {{1, 7}}}},
      {OpSpec::Compare(CompareOp::kGe), {{{5, 7}, i64}, {{5, 7}, i64}}, true},
      {OpSpec::Where(), {{{5, 7}}, {{5, 7}}, {{7}}}},
      {OpSpec::Where(), {{{5, 1}, i32}, {{1, 7}}, {{5, 7}}}},
      {OpSpec::Expand({5, 7}), {{{7}}}},
      {OpSpec::Expand({3, 5, 2}), {{{5, 1}}}},
      {OpSpec::Expand({4, 3}), {{{4, 1}}}},
      {OpSpec::EmbeddingGrad(7), {{{5, 3}}, {{5}, i64, 7}}},
      {OpSpec::EmbeddingGrad(6), {{{3, 2, 4}}, {{3, 2}, i32, 6}}},
      {OpSpec::SliceGrad({7, 5}, 0, 1, 6, 2), {{{3, 5}}}},
      {OpSpec::SliceGrad({3, 5, 2}, -1, 0, 1, 1), {{{3, 5, 1}}}},
      {OpSpec::SliceGrad({2, 12}, 1, 1, INT64_MAX, 3), {{{2, 4}}}},
      {OpSpec::CrossEntropyGrad(LossReduction::kMean), {{{7, 5}}, {{7}, i64, 5}, {{}}}},
      {OpSpec::CrossEntropyGrad(LossReduction::kSum), {{{7, 5}}, {{7}, i32, 5}, {{}}}},
      {OpSpec::CrossEntropyGrad(LossReduction::kNone), {{{7, 5}}, {{7}, i64, 5}, {{7}}}},
      {OpSpec::CrossEntropyGrad(LossReduction::kMean), {{{3, 5, 4}}, {{3, 5}, i32, 4}, {{}}}},
  };
}

std::vector<Tensor> Globals(const OpCase& c, DType float_dtype) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < c.operands.size(); ++i) {
    const Operand& o = c.operands[i];
    const DType t = o.dtype.value_or(float_dtype);
    const int seed = static_cast<int>(i) + 1;
    if (t == DType::kI32 || t == DType::kI64) {
      out.push_back(IntsFor(t, o.shape, seed, o.bound));
    } else {
      out.push_back(GlobalFor(t, o.shape, seed));
    }
  }
  return out;
}

// Brute force: is the local reshape exact on every rank (same global elements in the same
// order)? Global flat indices as i64 iota, sliced by each rank's boxes.
bool ReshapeOracle(const Layout& in, const Layout& out) {
  const Tensor x = Tensor::Iota(DType::kI64, in.global_shape());
  const Tensor y = *ReshapeKernel(x, out.global_shape());
  const std::vector<Box> bi = in.AllLocalBoxes(), bo = out.AllLocalBoxes();
  for (size_t r = 0; r < bi.size(); ++r) {
    const Tensor a = x.Slice(bi[r]), b = y.Slice(bo[r]);
    if (a.NumElements() != b.NumElements()) return false;
    for (int64_t i = 0; i < a.NumElements(); ++i) {
      if (a.data<int64_t>()[i] != b.data<int64_t>()[i]) return false;
    }
  }
  return true;
}

// Brute force: does every rank's input box select exactly its result box along the sliced dim?
bool SliceOracle(const OpSpec& op, const Layout& in, const Layout& out) {
  const SliceRange s = *NormalizeSlice(in.global_shape(), op.get<SliceParams>()->dim, op.get<SliceParams>()->start, op.get<SliceParams>()->end, op.get<SliceParams>()->step);
  const std::vector<Box> bi = in.AllLocalBoxes(), bo = out.AllLocalBoxes();
  for (size_t r = 0; r < bi.size(); ++r) {
    const Interval a = bi[r].dim(s.dim), b = bo[r].dim(s.dim);
    std::vector<int64_t> selected, want;
    for (int64_t j = 0; j < s.size; ++j) {
      const int64_t src = s.start + j * s.step;
      if (src >= a.begin && src < a.end) selected.push_back(j);
    }
    for (int64_t j = b.begin; j < b.end; ++j) want.push_back(j);
    if (selected != want) return false;
  }
  return true;
}

struct Counts {
  int checked = 0;
  int rejected = 0;
};

// Runs every strategy of `c` on `mesh`; returns failures (empty when all pass).
std::vector<std::string> RunAllStrategies(const OpCase& c, const DeviceMesh& mesh, DType float_dtype,
                                          Counts* counts) {
  const std::vector<Tensor> globals = Globals(c, float_dtype);
  std::vector<const Tensor*> gp;
  std::vector<const std::vector<int64_t>*> shapes;
  for (const Tensor& g : globals) {
    gp.push_back(&g);
    shapes.push_back(&g.shape());
  }
  StatusOr<ShardingRule> rule = RuleFor(c.op, shapes);
  if (!rule.ok()) return {rule.status().ToString()};
  StatusOr<Tensor> want = RunKernel(c.op, gp);
  if (!want.ok()) return {want.status().ToString()};
  const std::vector<Strategy> strategies = EnumerateStrategies(*rule, mesh.ndim());
  // Which strategies EvaluateStrategy accepts (decided before running; same on every rank).
  std::vector<bool> accepted;
  std::vector<std::string> failures;
  for (const Strategy& s : strategies) {
    std::vector<Layout> ls;
    std::vector<const Layout*> lp;
    std::vector<DType> dts;
    for (size_t i = 0; i < globals.size(); ++i) {
      ls.push_back(*Layout::Create(c.operands[i].shape, mesh, s.operands[i]));
      dts.push_back(globals[i].dtype());
    }
    for (const Layout& l : ls) lp.push_back(&l);
    StatusOr<StrategyChoice> ch = EvaluateStrategy(c.op, *rule, s, lp, dts);
    accepted.push_back(ch.ok());
    const std::string what = c.op.ToString() + " on " + mesh.ToString() + " strategy " + s.ToString();
    const bool mesh_dependent = c.op.get<ReshapeParams>() != nullptr || c.op.get<SliceParams>() != nullptr;
    if (!ch.ok() && (!mesh_dependent || ch.status().code() != StatusCode::kFailedPrecondition)) {
      failures.push_back(what + ": unexpected rejection " + ch.status().ToString());
    }
    if (CheckStrategyOnMesh(c.op, *rule, s, mesh).ok() != ch.ok()) {
      failures.push_back(what + ": CheckStrategyOnMesh disagrees with EvaluateStrategy");
    }
    if (c.op.get<SliceParams>() != nullptr) {
      const Layout out = *Layout::Create(rule->result_shape, mesh, s.result);
      if (ch.ok() != SliceOracle(c.op, ls[0], out)) {
        failures.push_back(what + ": EvaluateStrategy " + (ch.ok() ? "accepts" : "rejects") +
                           " but the brute-force slice oracle disagrees");
      }
    }
    if (c.op.get<ReshapeParams>() != nullptr) {
      const Layout out = *Layout::Create(rule->result_shape, mesh, s.result);
      if (ch.ok() != ReshapeOracle(ls[0], out)) {
        failures.push_back(what + ": EvaluateStrategy " + (ch.ok() ? "accepts" : "rejects") +
                           " but the brute-force oracle disagrees");
      }
    }
    counts->checked += 1;
    counts->rejected += ch.ok() ? 0 : 1;
  }
  std::vector<Strategy> run;
  for (size_t k = 0; k < strategies.size(); ++k) {
    if (accepted[k]) run.push_back(strategies[k]);
  }
  for (std::string& f : testing::CheckStrategiesOnWorld(c.op, *rule, run, globals, *want, mesh)) {
    failures.push_back(std::move(f));
  }
  return failures;
}

TEST(EagerNewOps, EveryRuleEveryStrategy) {
  const std::vector<std::vector<int64_t>> meshes = {{2}, {3}, {2, 2}};
  Counts counts;
  for (const OpCase& c : AllCases()) {
    for (const auto& ms : meshes) {
      const DeviceMesh mesh = *DeviceMesh::Create(ms);
      const std::vector<DType> dtypes =
          c.int_only ? std::vector<DType>{kFloat} : std::vector<DType>{DType::kF64, DType::kF32};
      for (DType t : dtypes) {
        std::vector<std::string> f = RunAllStrategies(c, mesh, t, &counts);
        for (size_t i = 0; i < f.size() && i < 5; ++i) ADD_FAILURE() << f[i];
      }
    }
  }
  std::cout << "checked " << counts.checked << " (op, mesh, dtype, strategy) combinations, " << counts.rejected
            << " rejected as inexact reshapes / slices\n";
  EXPECT_GT(counts.rejected, 0);
}

TEST(EagerNewOps, BF16) {
  Counts counts;
  const DeviceMesh mesh = *DeviceMesh::Create({2, 2});
  for (const OpCase& c : AllCases()) {
    if (c.int_only) continue;
    std::vector<std::string> f = RunAllStrategies(c, mesh, DType::kBF16, &counts);
    for (size_t i = 0; i < f.size() && i < 5; ++i) ADD_FAILURE() << f[i];
  }
}

// Expected accept / reject of specific reshape strategies (the torch.chunk conditions).
TEST(EagerNewOps, ReshapeExactness) {
  auto accepts = [](std::vector<int64_t> in, std::vector<int64_t> out, std::vector<int64_t> mesh_shape,
                    Placements p) {
    const DeviceMesh mesh = *DeviceMesh::Create(mesh_shape);
    const OpSpec op = OpSpec::Reshape(out);
    const std::vector<const std::vector<int64_t>*> shapes = {&in};
    const ShardingRule rule = *RuleFor(op, shapes);
    for (const Strategy& s : EnumerateStrategies(rule, mesh.ndim())) {
      if (s.operands[0] != p) continue;
      const Layout l = *Layout::Create(in, mesh, p);
      const Layout* lp[1] = {&l};
      StatusOr<StrategyChoice> c = EvaluateStrategy(op, rule, s, lp, DType::kF32);
      return c.ok() ? std::string("ok") : std::string(StatusCodeName(c.status().code()));
    }
    return std::string("no such strategy");
  };
  // Merge [a, b] -> [a*b]: exact iff the chunks of a times b are the chunks of a*b.
  EXPECT_EQ(accepts({4, 3}, {12}, {2}, {Shard{0}}), "ok");
  EXPECT_EQ(accepts({3, 4}, {12}, {2}, {Shard{0}}), "FAILED_PRECONDITION");  // [0,8) vs [0,6)
  EXPECT_EQ(accepts({6, 4}, {24}, {3}, {Shard{0}}), "ok");
  EXPECT_EQ(accepts({6, 4}, {24}, {4}, {Shard{0}}), "FAILED_PRECONDITION");  // chunk 2 rows vs 6 elems
  // Split [a*b] -> [a, b]: exact iff a's chunks times b line up with the chunks of a*b.
  EXPECT_EQ(accepts({20}, {5, 4}, {2}, {Shard{0}}), "FAILED_PRECONDITION");  // [0,10) vs [0,12)
  EXPECT_EQ(accepts({20}, {4, 5}, {2}, {Shard{0}}), "ok");
  // Two mesh dims on the same factor: every nesting level must line up.
  EXPECT_EQ(accepts({8, 3}, {24}, {2, 2}, {Shard{0}, Shard{0}}), "ok");
  EXPECT_EQ(accepts({6, 3}, {18}, {2, 2}, {Shard{0}, Shard{0}}), "FAILED_PRECONDITION");
  // Minor dims of a split / merge group are never sharded; 1:1 groups always keep it.
  EXPECT_EQ(accepts({4, 3}, {12}, {2}, {Shard{1}}), "no such strategy");
  EXPECT_EQ(accepts({5, 3, 2}, {5, 6}, {3}, {Shard{0}}), "ok");
}

// Slices keep a Shard of the sliced dim exactly when each rank selects its chunk of the result.
TEST(EagerNewOps, SliceExactness) {
  auto accepts = [](std::vector<int64_t> in, OpSpec op, std::vector<int64_t> mesh_shape, Placements p) {
    const DeviceMesh mesh = *DeviceMesh::Create(mesh_shape);
    const std::vector<const std::vector<int64_t>*> shapes = {&in};
    const ShardingRule rule = *RuleFor(op, shapes);
    for (const Strategy& s : EnumerateStrategies(rule, mesh.ndim())) {
      if (s.operands[0] != p) continue;
      const Status st = CheckStrategyOnMesh(op, rule, s, mesh);
      return st.ok() ? std::string("ok") : std::string(StatusCodeName(st.code()));
    }
    return std::string("no such strategy");
  };
  EXPECT_EQ(accepts({8}, OpSpec::Slice(0, 0, 8, 2), {2}, {Shard{0}}), "ok");            // {0,2},{4,6}
  EXPECT_EQ(accepts({8}, OpSpec::Slice(0, 0, 8, 2), {2, 2}, {Shard{0}, Shard{0}}), "ok");
  EXPECT_EQ(accepts({8}, OpSpec::Slice(0, 1, 8, 1), {2}, {Shard{0}}), "FAILED_PRECONDITION");
  EXPECT_EQ(accepts({8}, OpSpec::Slice(0, 1, 8, 2), {2}, {Shard{0}}), "ok");            // {1,3},{5,7}
  EXPECT_EQ(accepts({7}, OpSpec::Slice(0, 0, 7, 2), {3}, {Shard{0}}), "FAILED_PRECONDITION");
  EXPECT_EQ(accepts({6, 4}, OpSpec::Slice(1, 1, 3, 1), {3}, {Shard{0}}), "ok");         // other dim
}

TEST(EagerNewOps, RunStrategyAndCachedDispatch) {
  const DeviceMesh mesh = *DeviceMesh::Create({3});
  const Tensor table = GlobalFor(DType::kF32, {7, 5}, 1), ids = IntsFor(DType::kI64, {4, 2}, 2, 7);
  const Tensor want = *EmbeddingKernel(table, ids);
  DispatchCache cache;
  Status st = WorldOf(3).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(DTensor t, Distribute(table, *Layout::Create({7, 5}, mesh, {Shard{0}}), comm.rank()));
    MF_ASSIGN_OR_RETURN(DTensor i, Distribute(ids, *Layout::Create({4, 2}, mesh, {Shard{1}}), comm.rank()));
    const DTensor* in[2] = {&t, &i};
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseStrategy(OpSpec::Embedding(), in, &cache));
    MF_ASSIGN_OR_RETURN(DTensor y, RunStrategy(OpSpec::Embedding(), *c, in, ctx));
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
    if (std::string d = Compare(full, want); !d.empty()) return InternalError(d);
    // The row-sharded table stays in place: no plan for it, result Partial(sum).
    if (c->plans[0] != nullptr || !IsPartial(c->result.placement(0))) {
      return InternalError("unexpected choice " + c->strategy.ToString());
    }
    // Mixed dtypes hit the cache.
    MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c2, ChooseStrategy(OpSpec::Embedding(), in, &cache));
    if (!(c2->strategy == c->strategy) || cache.hits() == 0) return InternalError("cache miss on the second call");
    // RunStrategy checks the inputs against the choice.
    const DTensor* swapped[2] = {&t, &t};
    if (RunStrategy(OpSpec::Embedding(), *c, swapped, ctx).ok()) return InternalError("accepted bad input");
    // Reshape from a layout whose Shard cannot be kept: redistributed first, still exact.
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(table, *Layout::Create({7, 5}, mesh, {Shard{0}}), comm.rank()));
    MF_ASSIGN_OR_RETURN(DTensor r, Reshape(x, {35}, ctx));
    MF_ASSIGN_OR_RETURN(Tensor rf, FullTensor(r, ctx));
    if (std::string d = Compare(rf, *ReshapeKernel(table, std::vector<int64_t>{35})); !d.empty()) {
      return InternalError(d);
    }
    // Cross-entropy mean over uneven row shards divides by the global count.
    const Tensor logits = GlobalFor(DType::kF64, {7, 5}, 3), targets = IntsFor(DType::kI32, {7}, 4, 5);
    MF_ASSIGN_OR_RETURN(DTensor l, Distribute(logits, *Layout::Create({7, 5}, mesh, {Shard{0}}), comm.rank()));
    MF_ASSIGN_OR_RETURN(DTensor tg, Distribute(targets, *Layout::Create({7}, mesh, {Shard{0}}), comm.rank()));
    MF_ASSIGN_OR_RETURN(DTensor loss, CrossEntropy(l, tg, LossReduction::kMean, ctx));
    if (!IsPartial(loss.layout().placement(0))) return InternalError("loss " + loss.layout().ToString());
    MF_ASSIGN_OR_RETURN(Tensor lf, FullTensor(loss, ctx));
    if (std::string d = Compare(lf, *CrossEntropyKernel(logits, targets, LossReduction::kMean)); !d.empty()) {
      return InternalError(d);
    }
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// Logits that arrive sharded on the classes (a column-parallel lm head) stay in place: the loss is
// vocab-parallel (no gather of the logits) and exact on uneven class chunks.
TEST(EagerNewOps, VocabParallelCrossEntropyIsChosen) {
  const DeviceMesh mesh = *DeviceMesh::Create({3});
  const Tensor logits = GlobalFor(DType::kF32, {4, 7}, 5), targets = IntsFor(DType::kI64, {4}, 6, 7);
  for (LossReduction red : {LossReduction::kMean, LossReduction::kNone}) {
    const Tensor want = *CrossEntropyKernel(logits, targets, red);
    Status st = WorldOf(3).Run([&](Communicator& comm) -> Status {
      MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
      MF_ASSIGN_OR_RETURN(DTensor l, Distribute(logits, *Layout::Create({4, 7}, mesh, {Shard{1}}), comm.rank()));
      MF_ASSIGN_OR_RETURN(DTensor t, Distribute(targets, *Layout::Create({4}, mesh, {Replicate{}}), comm.rank()));
      const DTensor* in[2] = {&l, &t};
      MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseStrategy(OpSpec::CrossEntropy(red), in));
      if (c->plans[0] != nullptr || c->strategy.ToString() != "{S(1)} x {R} -> P(sum)") {
        return InternalError("expected vocab-parallel, got " + c->strategy.ToString());
      }
      MF_ASSIGN_OR_RETURN(DTensor loss, CrossEntropy(l, t, red, ctx));
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(loss, ctx));
      if (std::string d = Compare(full, want); !d.empty()) return InternalError(d);
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st;
  }
}

// The gradient of a vocab-parallel loss stays vocab-parallel: class-sharded logits are not
// gathered, each rank computes its classes of the gradient (row max and sum of exponentials
// reduced over the class shards), exact on uneven class chunks (7 classes on 3 ranks); a
// Partial(sum) upstream gradient gives the same values.
TEST(EagerNewOps, VocabParallelCrossEntropyGradIsChosen) {
  const DeviceMesh mesh = *DeviceMesh::Create({3});
  const Tensor logits = GlobalFor(DType::kF32, {4, 7}, 5), targets = IntsFor(DType::kI64, {4}, 6, 7);
  for (LossReduction red : {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone}) {
    const std::vector<int64_t> gshape = red == LossReduction::kNone ? std::vector<int64_t>{4} : std::vector<int64_t>{};
    const Tensor g = GlobalFor(DType::kF32, gshape, 8);
    const Tensor want = *CrossEntropyGradKernel(logits, targets, g, red, 4);
    Status st = WorldOf(3).Run([&](Communicator& comm) -> Status {
      MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
      MF_ASSIGN_OR_RETURN(DTensor l, Distribute(logits, *Layout::Create({4, 7}, mesh, {Shard{1}}), comm.rank()));
      MF_ASSIGN_OR_RETURN(DTensor t, Distribute(targets, *Layout::Create({4}, mesh, {Replicate{}}), comm.rank()));
      for (const Placement& gp : {Placement{Replicate{}}, Placement{Partial{}}}) {
        MF_ASSIGN_OR_RETURN(DTensor gd, Distribute(g, *Layout::Create(gshape, mesh, {gp}), comm.rank()));
        const DTensor* in[3] = {&l, &t, &gd};
        const OpSpec op = OpSpec::CrossEntropyGrad(red);
        MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseStrategy(op, in));
        // With a replicated g the class-sharded strategy moves nothing; with a Partial(sum) g on
        // these tiny logits, gathering them costs the same as reducing g: only the values count.
        if (IsReplicate(gp) && (c->plans[0] != nullptr || !(c->result.placement(0) == Placement{Shard{1}}))) {
          return InternalError("expected the class-sharded gradient, got " + c->strategy.ToString());
        }
        MF_ASSIGN_OR_RETURN(DTensor dx, RunOp(op, in, ctx));
        MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(dx, ctx));
        if (std::string d = Compare(full, want); !d.empty()) return InternalError(d);
      }
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st;
  }
}

// EvaluateStrategy only accepts strategies that follow the rule: a hand-made one sharding the
// softmax-like class dim of layer norm is rejected instead of computing garbage.
TEST(EagerNewOps, HandMadeStrategyRejected) {
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  const std::vector<int64_t> x = {4, 6};
  const OpSpec op = OpSpec::LayerNorm(1, false, false);
  const std::vector<const std::vector<int64_t>*> shapes = {&x};
  const ShardingRule rule = *RuleFor(op, shapes);
  Strategy bad = EnumerateStrategies(rule, 1)[1];  // {S(0)} -> S(0)
  bad.operands[0][0] = Shard{1};
  bad.result[0] = Shard{1};
  const Layout l = *Layout::Create(x, mesh, {Replicate{}});
  const Layout* lp[1] = {&l};
  StatusOr<StrategyChoice> c = EvaluateStrategy(op, rule, bad, lp, DType::kF32);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "layer_norm(ndim=1,eps=1e-05): strategy {S(1)} -> S(1) does not follow the rule layer_norm: [d0,d1] -> "
            "[d0,d1] {d0=4 pass_through, d1=6 need_replication} on a 1-dim mesh");
}

TEST(EagerNewOps, DTypeErrors) {
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  auto dt = [&](DType t, std::vector<int64_t> shape) {
    const Tensor g = t == DType::kI32 || t == DType::kI64 ? IntsFor(t, shape, 1, 3) : GlobalFor(t, shape, 1);
    return *Distribute(g, *Layout::Create(shape, mesh, Placements{Replicate{}}), 0);
  };
  const DTensor f = dt(DType::kF32, {3, 4}), i = dt(DType::kI32, {3, 4}), ids = dt(DType::kI64, {3});
  const DTensor* emb_float_ids[2] = {&f, &f};
  EXPECT_EQ(ChooseStrategy(OpSpec::Embedding(), emb_float_ids).status().message(),
            "embedding: ids dtype f32 must be i32 or i64");
  const DTensor* ce_int_logits[2] = {&i, &ids};
  EXPECT_EQ(ChooseStrategy(OpSpec::CrossEntropy(LossReduction::kMean), ce_int_logits).status().code(),
            StatusCode::kUnimplemented);
  const DTensor* div_int[2] = {&i, &i};
  EXPECT_EQ(ChooseStrategy(OpSpec::Binary(BinaryOp::kDiv), div_int).status().message(),
            "div: operand dtype i32 not supported (f32, f64, bf16 only)");
  const DTensor* one_int[1] = {&i};
  EXPECT_EQ(ChooseStrategy(OpSpec::Reduce(ReduceKind::kMean, {}, false), one_int).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(ChooseStrategy(OpSpec::LayerNorm(1, false, false), one_int).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_TRUE(ChooseStrategy(OpSpec::Reduce(ReduceKind::kSum, {}, false), one_int).ok());
  EXPECT_TRUE(ChooseStrategy(OpSpec::Permute({1, 0}), one_int).ok());
  const DTensor* cat_mixed[2] = {&f, &i};
  EXPECT_EQ(ChooseStrategy(OpSpec::Concat(0, 2), cat_mixed).status().message(),
            "concat(dim=0,n=2): operand dtypes differ: f32 vs i32");
  EXPECT_EQ(ChooseStrategy(OpSpec::Concat(0, 3), cat_mixed).status().message(),
            "concat(dim=0,n=3): expected 3 operands, got 2");
  EXPECT_EQ(ChooseStrategy(OpSpec::Reshape({5, -1}), one_int).status().message(),
            "reshape: cannot infer the -1 of [5,-1] for shape [3,4] (12 elements)");
}

}  // namespace
}  // namespace meshflow
