// Propagation tests: small graphs whose whole expected Propagation (every value's layout, every
// node's strategy and layouts, the total modelled time) is built by hand and compared once, so
// that any change of choice shows up as one readable diff.
#include "meshflow/compiler/propagation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

Layout L(const std::vector<int64_t>& shape, const DeviceMesh& mesh, const std::string& placements) {
  return Layout::Create(shape, mesh, ParsePlacements(placements).value()).value();
}

// The expected sharding of node `n`: the strategy of its rule whose operand / result placements
// are the ones given (tests name strategies by placements, which is how one reads them).
NodeSharding NS(const Graph& g, int n, const std::vector<std::string>& operands, const std::string& result) {
  const Node& node = g.nodes()[static_cast<size_t>(n)];
  const ShardingRule rule = NodeRule(g, n).value();
  std::vector<Placements> ops;
  for (const std::string& s : operands) ops.push_back(ParsePlacements(s).value());
  const Placements res = ParsePlacements(result).value();
  for (const Strategy& s : EnumerateStrategies(rule, g.mesh().ndim())) {
    if (s.operands == ops && s.result == res) {
      std::vector<Layout> layouts;
      for (size_t i = 0; i < ops.size(); ++i) layouts.push_back(L(g.value(node.operands[i]).shape, g.mesh(), operands[i]));
      return NodeSharding{s, layouts, L(rule.result_shape, g.mesh(), result)};
    }
  }
  ADD_FAILURE() << "no strategy with these placements for node " << n;
  return NodeSharding{Strategy{}, {}, L(rule.result_shape, g.mesh(), result)};
}

double Us(const std::string& from, const std::string& to, const std::vector<int64_t>& shape, const DeviceMesh& mesh) {
  return RedistributionUs(L(shape, mesh, from), L(shape, mesh, to), DType::kF32, Topology()).value();
}

// Total as Propagation sums it: integer picoseconds.
double Total(std::initializer_list<double> us) {
  int64_t units = 0;
  for (double u : us) units += CostUnits(u);
  return static_cast<double>(units) / 1e6;
}

class PropagationTest : public ::testing::Test {
 protected:
  DeviceMesh mesh2x2_ = DeviceMesh::Create({2, 2}, {"dp", "tp"}).value();
  DeviceMesh mesh4_ = DeviceMesh::Create({4}, {"x"}).value();
};

// Megatron MLP: x batch-sharded on dp, W1 column-parallel, W2 row-parallel, output replicated on
// tp. The only communication is the all-reduce of y's Partial(sum) on tp.
TEST_F(PropagationTest, MegatronMlpNeedsOneAllReduce) {
  Graph g(mesh2x2_);
  const ValueId x = g.Input("x", {4, 6, 8}, DType::kF32).value();
  const ValueId w1 = g.Param("w1", {8, 10}, DType::kF32).value();
  const ValueId w2 = g.Param("w2", {10, 8}, DType::kF32).value();
  const ValueId h = g.Apply(OpSpec::Matmul(), {x, w1}, "h").value();
  const ValueId a = g.Apply(OpSpec::Unary(UnaryOp::kGelu), {h}, "a").value();
  const ValueId y = g.Apply(OpSpec::Matmul(), {a, w2}, "y").value();
  ASSERT_TRUE(g.Annotate(x, "S(0),R").ok());
  ASSERT_TRUE(g.Annotate(w1, "R,S(1)").ok());
  ASSERT_TRUE(g.Annotate(w2, "R,S(0)").ok());
  ASSERT_TRUE(g.Annotate(y, "S(0),R").ok());
  ASSERT_TRUE(g.MarkOutput(y).ok());

  const Propagation want{
      {L({4, 6, 8}, mesh2x2_, "S(0),R"), L({8, 10}, mesh2x2_, "R,S(1)"), L({10, 8}, mesh2x2_, "R,S(0)"),
       L({4, 6, 10}, mesh2x2_, "S(0),S(2)"), L({4, 6, 10}, mesh2x2_, "S(0),S(2)"), L({4, 6, 8}, mesh2x2_, "S(0),R")},
      {NS(g, 0, {"S(0),R", "R,S(1)"}, "S(0),S(2)"), NS(g, 1, {"S(0),S(2)"}, "S(0),S(2)"),
       NS(g, 2, {"S(0),S(2)", "R,S(0)"}, "S(0),P(sum)")},
      Total({Us("S(0),P(sum)", "S(0),R", {4, 6, 8}, mesh2x2_)})};
  EXPECT_EQ(Propagate(g).value(), want) << Propagate(g).value().ToString(g);
}

// Reduce-scatter variant: the output is annotated sequence-sharded on tp.
TEST_F(PropagationTest, MlpWithSequenceShardedOutputReduceScatters) {
  Graph g(mesh2x2_);
  const ValueId x = g.Input("x", {4, 6, 8}, DType::kF32).value();
  const ValueId w1 = g.Param("w1", {8, 10}, DType::kF32).value();
  const ValueId w2 = g.Param("w2", {10, 8}, DType::kF32).value();
  const ValueId h = g.Apply(OpSpec::Matmul(), {x, w1}, "h").value();
  const ValueId y = g.Apply(OpSpec::Matmul(), {h, w2}, "y").value();
  ASSERT_TRUE(g.Annotate(x, "S(0),R").ok());
  ASSERT_TRUE(g.Annotate(w1, "R,S(1)").ok());
  ASSERT_TRUE(g.Annotate(w2, "R,S(0)").ok());
  ASSERT_TRUE(g.Annotate(y, "S(0),S(1)").ok());
  const Propagation p = Propagate(g).value();
  EXPECT_EQ(p.nodes[1], NS(g, 1, {"S(0),S(2)", "R,S(0)"}, "S(0),P(sum)")) << p.ToString(g);
  EXPECT_EQ(p.values[static_cast<size_t>(y)], L({4, 6, 8}, mesh2x2_, "S(0),S(1)"));
  EXPECT_EQ(p.modelled_us, Total({Us("S(0),P(sum)", "S(0),S(1)", {4, 6, 8}, mesh2x2_)}));
}

// Unannotated weights: the backward pass gives them the layouts their consumers want given the
// annotated activations (here: x and y sharded on rows of a 1-D mesh -> weights replicated).
TEST_F(PropagationTest, UnannotatedParamsTakeTheirPreference) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {10, 8}, DType::kF32).value();
  const ValueId w1 = g.Param("w1", {8, 6}, DType::kF32).value();
  const ValueId w2 = g.Param("w2", {6, 3}, DType::kF32).value();
  const ValueId h = g.Apply(OpSpec::Matmul(), {x, w1}, "h").value();
  const ValueId r = g.Apply(OpSpec::Unary(UnaryOp::kRelu), {h}, "r").value();
  const ValueId y = g.Apply(OpSpec::Matmul(), {r, w2}, "y").value();
  ASSERT_TRUE(g.Annotate(x, "S(0)").ok());
  ASSERT_TRUE(g.Annotate(y, "S(0)").ok());
  const Propagation want{{L({10, 8}, mesh4_, "S(0)"), L({8, 6}, mesh4_, "R"), L({6, 3}, mesh4_, "R"),
                          L({10, 6}, mesh4_, "S(0)"), L({10, 6}, mesh4_, "S(0)"), L({10, 3}, mesh4_, "S(0)")},
                         {NS(g, 0, {"S(0)", "R"}, "S(0)"), NS(g, 1, {"S(0)"}, "S(0)"), NS(g, 2, {"S(0)", "R"}, "S(0)")},
                         0.0};
  EXPECT_EQ(Propagate(g).value(), want) << Propagate(g).value().ToString(g);
}

// Pointwise with broadcasting: an unannotated bias follows the annotated activation; the
// output's annotation is honoured by redistributing after the add.
TEST_F(PropagationTest, PointwiseBroadcastAndOutputAnnotation) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {9, 5}, DType::kF32).value();
  const ValueId b = g.Param("b", {5}, DType::kF32).value();
  const ValueId s = g.Apply(OpSpec::Binary(BinaryOp::kAdd), {x, b}, "s").value();
  const ValueId e = g.Apply(OpSpec::Unary(UnaryOp::kExp), {s}, "e").value();
  ASSERT_TRUE(g.Annotate(x, "S(1)").ok());
  ASSERT_TRUE(g.Annotate(e, "R").ok());
  const Propagation want{
      {L({9, 5}, mesh4_, "S(1)"), L({5}, mesh4_, "S(0)"), L({9, 5}, mesh4_, "S(1)"), L({9, 5}, mesh4_, "R")},
      {NS(g, 0, {"S(1)", "S(0)"}, "S(1)"), NS(g, 1, {"S(1)"}, "S(1)")},
      Total({Us("S(1)", "R", {9, 5}, mesh4_)})};
  EXPECT_EQ(Propagate(g).value(), want) << Propagate(g).value().ToString(g);
}

// Reduction over the sharded dim gives Partial(sum); the replicated annotation costs one
// all-reduce of the small result (x is large: gathering it first would cost more); a max over it
// gives Partial(max).
TEST_F(PropagationTest, ReductionsOverShardedDims) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {200001, 3}, DType::kF32).value();
  const ValueId s = g.Apply(OpSpec::Reduce(ReduceKind::kSum, {0}, false), {x}, "s").value();
  const ValueId m = g.Apply(OpSpec::Reduce(ReduceKind::kMax, {0}, false), {x}, "m").value();
  ASSERT_TRUE(g.Annotate(x, "S(0)").ok());
  ASSERT_TRUE(g.Annotate(s, "R").ok());
  ASSERT_TRUE(g.MarkOutput(s).ok());
  ASSERT_TRUE(g.MarkOutput(m).ok());
  const Propagation want{{L({200001, 3}, mesh4_, "S(0)"), L({3}, mesh4_, "R"), L({3}, mesh4_, "P(max)")},
                         {NS(g, 0, {"S(0)"}, "P(sum)"), NS(g, 1, {"S(0)"}, "P(max)")},
                         Total({Us("P(sum)", "R", {3}, mesh4_)})};
  EXPECT_EQ(Propagate(g).value(), want) << Propagate(g).value().ToString(g);
}

// Conflict: x and w are both sharded on their first dim, so matmul can shard either m (gather
// all of w) or k (move x from rows to columns, result Partial). The compiler moves the smaller
// tensor: for a small x it re-shards x; for a small w it all-gathers w.
TEST_F(PropagationTest, ConflictResolvedByCost) {
  {
    Graph g(mesh4_);
    const ValueId x = g.Input("x", {8, 4}, DType::kF32).value();
    const ValueId w = g.Param("w", {4, 4096}, DType::kF32).value();
    g.Apply(OpSpec::Matmul(), {x, w}, "y").value();
    ASSERT_TRUE(g.Annotate(x, "S(0)").ok());
    ASSERT_TRUE(g.Annotate(w, "S(0)").ok());
    const Propagation want{
        {L({8, 4}, mesh4_, "S(0)"), L({4, 4096}, mesh4_, "S(0)"), L({8, 4096}, mesh4_, "P(sum)")},
        {NS(g, 0, {"S(1)", "S(0)"}, "P(sum)")},
        Total({Us("S(0)", "S(1)", {8, 4}, mesh4_)})};
    EXPECT_EQ(Propagate(g).value(), want) << Propagate(g).value().ToString(g);
  }
  {
    Graph g(mesh4_);
    const ValueId x = g.Input("x", {4096, 4}, DType::kF32).value();
    const ValueId w = g.Param("w", {4, 8}, DType::kF32).value();
    g.Apply(OpSpec::Matmul(), {x, w}, "y").value();
    ASSERT_TRUE(g.Annotate(x, "S(0)").ok());
    ASSERT_TRUE(g.Annotate(w, "S(0)").ok());
    const Propagation want{
        {L({4096, 4}, mesh4_, "S(0)"), L({4, 8}, mesh4_, "S(0)"), L({4096, 8}, mesh4_, "S(0)")},
        {NS(g, 0, {"S(0)", "R"}, "S(0)")},
        Total({Us("S(0)", "R", {4, 8}, mesh4_)})};
    EXPECT_EQ(Propagate(g).value(), want) << Propagate(g).value().ToString(g);
  }
}

// Softmax needs its dim replicated: an input sharded on that dim is moved, the cheapest way
// (all-to-all onto the other dim rather than all-gather).
TEST_F(PropagationTest, SoftmaxAvoidsItsDim) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {8, 12}, DType::kF32).value();
  g.Apply(OpSpec::Softmax(-1, false), {x}, "p").value();
  ASSERT_TRUE(g.Annotate(x, "S(1)").ok());
  const Propagation want{{L({8, 12}, mesh4_, "S(1)"), L({8, 12}, mesh4_, "S(0)")},
                         {NS(g, 0, {"S(0)"}, "S(0)")},
                         Total({Us("S(1)", "S(0)", {8, 12}, mesh4_)})};
  EXPECT_EQ(Propagate(g).value(), want) << Propagate(g).value().ToString(g);
}

// An annotated intermediate value is honoured exactly even when it costs communication.
TEST_F(PropagationTest, AnnotatedIntermediateIsHonoured) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {8, 6}, DType::kF32).value();
  const ValueId n = g.Apply(OpSpec::Unary(UnaryOp::kNeg), {x}, "n").value();
  g.Apply(OpSpec::Unary(UnaryOp::kRelu), {n}, "r").value();
  ASSERT_TRUE(g.Annotate(x, "S(0)").ok());
  ASSERT_TRUE(g.Annotate(n, "S(1)").ok());
  const Propagation p = Propagate(g).value();
  EXPECT_EQ(p.values[1], L({8, 6}, mesh4_, "S(1)"));
  EXPECT_EQ(p.values[2], L({8, 6}, mesh4_, "S(1)")) << p.ToString(g);
}

// Partial inputs of a non-linear op are reduced first (P(avg) -> R), and a Partial(sum)
// annotation on its result is reached locally (R -> P(sum)).
TEST_F(PropagationTest, PartialInputsAndOutputs) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {8, 6}, DType::kF32).value();
  const ValueId e = g.Apply(OpSpec::Unary(UnaryOp::kExp), {x}, "e").value();
  ASSERT_TRUE(g.Annotate(x, "P(avg)").ok());
  ASSERT_TRUE(g.Annotate(e, "P(sum)").ok());
  const Propagation p = Propagate(g).value();
  EXPECT_EQ(p.values[1], L({8, 6}, mesh4_, "P(sum)"));
  EXPECT_EQ(p.nodes[0].operands[0].placements(), p.nodes[0].result.placements()) << p.ToString(g);
  EXPECT_FALSE(p.nodes[0].result.HasPartial());
}

// Lookahead: x is replicated, so neg can produce any sharding for free; the natural forward
// pass would pick S(0) (first of the equal choices) and pay an all-to-all before the annotated
// S(1) output. The refined preference asks neg for S(1) directly: no communication at all.
TEST_F(PropagationTest, AnnotationPullsProducers) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {8, 12}, DType::kF32).value();
  const ValueId a = g.Apply(OpSpec::Unary(UnaryOp::kNeg), {x}, "a").value();
  const ValueId b = g.Apply(OpSpec::Unary(UnaryOp::kExp), {a}, "b").value();
  ASSERT_TRUE(g.Annotate(x, "R").ok());
  ASSERT_TRUE(g.Annotate(b, "S(1)").ok());
  const Propagation want{{L({8, 12}, mesh4_, "R"), L({8, 12}, mesh4_, "S(1)"), L({8, 12}, mesh4_, "S(1)")},
                         {NS(g, 0, {"S(1)"}, "S(1)"), NS(g, 1, {"S(1)"}, "S(1)")},
                         0.0};
  EXPECT_EQ(Propagate(g).value(), want) << Propagate(g).value().ToString(g);
}

// A weight gradient under DDP: dW = a^T g with a^T [1024, 64] column-sharded and g [64, 256]
// row-sharded on 4 ranks, dW annotated Replicate. By bytes alone, all-gathering the two small
// operands (320 KiB) and computing the whole dW on every rank beats the all-reduce of a 1 MiB
// Partial(sum) dW; with a compute model (50 GFLOP/s, 16.8 M multiply-adds replicated vs 4.2 M
// split) the contracting split and the all-reduce win.
TEST_F(PropagationTest, ComputeModelWeighsRepeatedWorkAgainstBytes) {
  Graph g(mesh4_);
  const ValueId at = g.Input("at", {1024, 64}, DType::kF32).value();
  const ValueId gr = g.Input("g", {64, 256}, DType::kF32).value();
  const ValueId dw = g.Apply(OpSpec::Matmul(), {at, gr}, "dw").value();
  ASSERT_TRUE(g.Annotate(at, "S(1)").ok());
  ASSERT_TRUE(g.Annotate(gr, "S(0)").ok());
  ASSERT_TRUE(g.Annotate(dw, "R").ok());
  const Propagation bytes_only = Propagate(g).value();
  EXPECT_EQ(bytes_only.nodes[0], NS(g, 0, {"R", "R"}, "R")) << bytes_only.ToString(g);
  EXPECT_EQ(bytes_only.compute_us, 0.0);
  EXPECT_EQ(bytes_only.modelled_us,
            Total({Us("S(1)", "R", {1024, 64}, mesh4_), Us("S(0)", "R", {64, 256}, mesh4_)}));

  PropagationOptions options;
  options.compute_gflops = 50;
  const Propagation weighed = Propagate(g, options).value();
  EXPECT_EQ(weighed.nodes[0], NS(g, 0, {"S(1)", "S(0)"}, "P(sum)")) << weighed.ToString(g);
  EXPECT_EQ(weighed.modelled_us, Total({Us("P(sum)", "R", {1024, 256}, mesh4_)}));
  // 1024 * 16 * 256 points, 2 flops each, at 5e4 flops per us.
  EXPECT_EQ(weighed.compute_us, Total({2.0 * 1024 * 16 * 256 / 5e4}));
}

// The compute term prefers splitting work when bytes tie: a replicated elementwise op on a
// replicated input costs nothing to shard, and with a compute model each rank does a quarter.
TEST_F(PropagationTest, ComputeModelSplitsFreeWork) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {64, 64}, DType::kF32).value();
  const ValueId y = g.Apply(OpSpec::Unary(UnaryOp::kExp), {x}, "y").value();
  ASSERT_TRUE(g.Annotate(x, "R").ok());
  ASSERT_TRUE(g.MarkOutput(y).ok());
  PropagationOptions options;
  options.compute_gflops = 1;
  const Propagation p = Propagate(g, options).value();
  EXPECT_EQ(p.values[static_cast<size_t>(y)], L({64, 64}, mesh4_, "S(0)")) << p.ToString(g);
  EXPECT_EQ(p.compute_us, Total({2.0 * 16 * 64 / 1e3}));
}

TEST_F(PropagationTest, ComputeModelRejectsBadRates) {
  Graph g(mesh4_);
  const ValueId x = g.Input("x", {4}, DType::kF32).value();
  g.Apply(OpSpec::Unary(UnaryOp::kExp), {x}, "y").value();
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    PropagationOptions options;
    options.compute_gflops = bad;
    const Status st = Propagate(g, options).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("compute_gflops must be > 0 and finite, got"), std::string::npos) << st;
  }
}

TEST_F(PropagationTest, Deterministic) {
  Graph h(mesh2x2_);
  const ValueId a = h.Input("a", {5, 7}, DType::kF32).value();
  const ValueId b = h.Param("b", {7, 3}, DType::kF32).value();
  h.Apply(OpSpec::Matmul(), {a, b}, "c").value();
  ASSERT_TRUE(h.Annotate(a, "S(1),S(0)").ok());
  EXPECT_EQ(Propagate(h).value(), Propagate(h).value());
}

}  // namespace
}  // namespace meshflow
