// Graph IR tests: the builder's shapes and errors, annotations, printing and the reference.
#include "meshflow/compiler/graph.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace meshflow {
namespace {

bool Contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

class GraphTest : public ::testing::Test {
 protected:
  DeviceMesh mesh_ = DeviceMesh::Create({2, 2}, {"dp", "tp"}).value();
};

TEST_F(GraphTest, BuildsValuesAndNodes) {
  Graph g(mesh_);
  const ValueId x = g.Input("x", {4, 6, 8}, DType::kF32).value();
  const ValueId w = g.Param("w", {8, 10}, DType::kF32).value();
  const ValueId h = g.Apply(OpSpec::Matmul(), {x, w}, "h").value();
  const ValueId s = g.Apply(OpSpec::Reduce(ReduceKind::kSum, {1}, true), {h}).value();
  ASSERT_TRUE(g.MarkOutput(s).ok());
  // The whole IR, compared at once.
  const std::vector<Value> want_values = {
      {"x", {4, 6, 8}, DType::kF32, ValueKind::kInput, -1},
      {"w", {8, 10}, DType::kF32, ValueKind::kParam, -1},
      {"h", {4, 6, 10}, DType::kF32, ValueKind::kOpResult, 0},
      {"v3", {4, 1, 10}, DType::kF32, ValueKind::kOpResult, 1},
  };
  const std::vector<Node> want_nodes = {{OpSpec::Matmul(), {x, w}, h},
                                        {OpSpec::Reduce(ReduceKind::kSum, {1}, true), {h}, s}};
  EXPECT_EQ(g.values(), want_values);
  EXPECT_EQ(g.nodes(), want_nodes);
  EXPECT_EQ(g.inputs(), (std::vector<ValueId>{x, w}));
  EXPECT_EQ(g.outputs(), (std::vector<ValueId>{s}));
  EXPECT_EQ(g.Find("h").value(), h);
  EXPECT_EQ(g.Find("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(g.Consumers(), (std::vector<std::vector<int>>{{0}, {0}, {1}, {}}));
}

TEST_F(GraphTest, BuilderErrorsNameTheOpAndValues) {
  Graph g(mesh_);
  const ValueId x = g.Input("x", {4, 6}, DType::kF32).value();
  const ValueId w = g.Param("w", {7, 3}, DType::kF32).value();
  const ValueId d = g.Param("d", {6, 3}, DType::kF64).value();

  Status s = g.Apply(OpSpec::Matmul(), {x, w}, "y").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "node 0 'y' (matmul) on (x: f32[4,6], w: f32[7,3])")) << s;

  s = g.Apply(OpSpec::Matmul(), {x, d}, "y").status();
  EXPECT_TRUE(Contains(s, "node 0 'y' (matmul): operand dtypes differ (x: f32[4,6], d: f64[6,3])")) << s;

  s = g.Apply(OpSpec::Matmul(), {x}, "y").status();
  EXPECT_TRUE(Contains(s, "node 0 'y' (matmul)")) << s;

  s = g.Apply(OpSpec::Unary(UnaryOp::kRelu), {17}, "y").status();
  EXPECT_TRUE(Contains(s, "node 0 'y' (relu): unknown value id 17")) << s;

  s = g.Apply(OpSpec::Unary(UnaryOp::kRelu), {x}, "w").status();
  EXPECT_TRUE(Contains(s, "duplicate value name 'w'")) << s;

  s = g.Apply(OpSpec::Reduce(ReduceKind::kSum, {5}, false), {x}, "r").status();
  EXPECT_TRUE(Contains(s, "node 0 'r' (sum(dims=[5]))")) << s;

  EXPECT_TRUE(Contains(g.Input("", {1}, DType::kF32).status(), "value name is empty"));
  EXPECT_TRUE(Contains(g.Input("z", {2, -1}, DType::kF32).status(), "input 'z': negative size in shape [2,-1]"));
  EXPECT_TRUE(g.nodes().empty());  // failed ops add nothing
  EXPECT_EQ(g.values().size(), 3u);
}

TEST_F(GraphTest, AnnotationsAndTheirErrors) {
  Graph g(mesh_);
  const ValueId x = g.Input("x", {4, 6}, DType::kF32).value();
  EXPECT_TRUE(g.Annotate(x, "S(0),R").ok());
  EXPECT_EQ(g.annotation(x), Layout::Create({4, 6}, mesh_, {Shard{0}, Replicate{}}).value());
  EXPECT_TRUE(g.Annotate(x, "S(0),R").ok());  // same annotation again: fine
  Status s = g.Annotate(x, "R,R");
  EXPECT_TRUE(Contains(s, "annotation of 'x': already annotated S(0),R, now R,R")) << s;
  s = g.Annotate(x, "S(0)");
  EXPECT_TRUE(Contains(s, "annotation of 'x' f32[4,6]")) << s;
  s = g.Annotate(x, "S(2),R");
  EXPECT_TRUE(Contains(s, "annotation of 'x' f32[4,6]")) << s;
  s = g.Annotate(x, "Q");
  EXPECT_TRUE(Contains(s, "annotation of 'x'")) << s;
  s = g.Annotate(9, "R,R");
  EXPECT_TRUE(Contains(s, "annotate: unknown value id 9")) << s;
  const DeviceMesh other = DeviceMesh::Create({4}).value();
  s = g.Annotate(x, Layout::Create({4, 6}, other, {Replicate{}}).value());
  EXPECT_TRUE(Contains(s, "annotation of 'x': layout on mesh(4), graph on mesh(2x2, [dp, tp])")) << s;
  s = g.Annotate(x, Layout::Create({4, 5}, mesh_, {Replicate{}, Replicate{}}).value());
  EXPECT_TRUE(Contains(s, "layout shape [4,5] != value shape [4,6]")) << s;
  EXPECT_TRUE(g.MarkOutput(x).ok());
  EXPECT_TRUE(Contains(g.MarkOutput(x), "value 'x' is already an output"));
}

TEST_F(GraphTest, Printing) {
  Graph g(mesh_);
  const ValueId x = g.Input("x", {4, 6}, DType::kF32).value();
  const ValueId w = g.Param("w", {6, 3}, DType::kF32).value();
  const ValueId y = g.Apply(OpSpec::Matmul(), {x, w}, "y").value();
  ASSERT_TRUE(g.Annotate(x, "S(0),R").ok());
  ASSERT_TRUE(g.MarkOutput(y).ok());
  EXPECT_EQ(g.ToString(),
            "graph on mesh(2x2, [dp, tp])\n"
            "  input x: f32[4,6]  @ S(0),R\n"
            "  param w: f32[6,3]\n"
            "  y: f32[4,3] = matmul(x, w)\n"
            "  outputs: y\n");
}

TEST_F(GraphTest, ReferenceRunsTheKernels) {
  Graph g(mesh_);
  const ValueId x = g.Input("x", {2, 2}, DType::kF64).value();
  const ValueId y = g.Apply(OpSpec::Matmul(), {x, x}, "y").value();
  const ValueId s = g.Apply(OpSpec::Reduce(ReduceKind::kSum, {}, false), {y}, "s").value();
  const Tensor in = Tensor::FromVector<double>({2, 2}, {1, 2, 3, 4}).value();
  const std::vector<Tensor> vals = EvaluateReference(g, {in}).value();
  EXPECT_EQ(vals[static_cast<size_t>(y)], Tensor::FromVector<double>({2, 2}, {7, 10, 15, 22}).value());
  EXPECT_EQ(vals[static_cast<size_t>(s)].GetAsDouble(0), 54.0);
  EXPECT_TRUE(Contains(EvaluateReference(g, {}).status(), "expected 1 inputs, got 0"));
  EXPECT_TRUE(Contains(EvaluateReference(g, {Tensor::Zeros(DType::kF64, {3})}).status(),
                       "input 'x' is f64[3], expected f64[2,2]"));
}

}  // namespace
}  // namespace meshflow
