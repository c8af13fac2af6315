// Every example in compiler/graph.h, compiler/propagation.h, compiler/program.h, runtime/eager.h, ops/op_spec.h,
// runtime/strategy.h, ops/kernels.h, ops/sharding_rule.h, ops/shape_util.h, ops/op_kinds.h,
// ops/elementwise.h, ops/shared_kernels.h, ops/blas.h and ops/cpu_vector.h is compiled here; keep
// them identical.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/compiler/graph_autodiff.h"
#include "meshflow/ops/blas.h"
#include "meshflow/ops/cpu_vector.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/kernels.h"
#include "meshflow/ops/op_kinds.h"
#include "meshflow/ops/op_spec.h"
#include "meshflow/ops/shared_kernels.h"
#include "meshflow/runtime/strategy.h"
#include "meshflow/compiler/program.h"
#include "meshflow/compiler/propagation.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {
namespace {

// Deterministic values in [-1, 1] (no two elements alike, small enough for softmax and gelu).
Tensor Smooth(std::vector<int64_t> shape, int seed) {
  Tensor t = Tensor::Zeros(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, std::sin(0.37 * static_cast<double>(i) + seed));
  return t;
}

// Largest |a - b| over the elements (infinity when the shapes differ).
double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return INFINITY;
  double d = 0;
  for (int64_t i = 0; i < a.NumElements(); ++i) d = std::max(d, std::abs(a.GetAsDouble(i) - b.GetAsDouble(i)));
  return d;
}

// compiler/graph.h (the graph is handed back for the propagation example).
Status GraphExample(std::optional<Graph>* graph, ValueId* h_out) {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({2, 2}, {"dp", "tp"}));
  Graph g(mesh);
  MF_ASSIGN_OR_RETURN(ValueId x, g.Input("x", {4, 6, 8}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId w, g.Param("w1", {8, 10}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId h, g.Apply(OpSpec::Matmul(), {x, w}, "h"));
  MF_RETURN_IF_ERROR(g.Annotate(x, "S(0),R"));
  MF_RETURN_IF_ERROR(g.Annotate(w, "R,S(1)"));
  MF_RETURN_IF_ERROR(g.MarkOutput(h));

  graph->emplace(g);
  *h_out = h;
  return Status::Ok();
}

// ops/blas.h
Status BlasExample(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  MF_RETURN_IF_ERROR(SetBlasThreads(4));        // a single-rank program that owns 4 cores
  MF_RETURN_IF_ERROR(Gemm<float>(m, n, k, a, b, c));   // c[m, n] = a[m, k] x b[k, n]
  return SetBlasThreads(1);
}

TEST(BlasDocTest, Example) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1};  // [2, 3] x [3, 2]
  std::vector<float> c(4);
  ASSERT_TRUE(BlasExample(2, 2, 3, a.data(), b.data(), c.data()).ok());
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  EXPECT_EQ(BlasThreads(), 1);
}

// ops/cpu_vector.h
void CpuVectorExample(const float* x, float* y, int64_t n, int64_t rows) {
  if (!VectorUnaryF32(UnaryOp::kGelu, x, y, n, 1.0f)) { /* scalar loop */ }
  if (!VectorSoftmaxRowsF32(x, y, rows, n / rows, /*log=*/false)) { /* scalar loop */ }
}

TEST(CpuVectorDocTest, Example) {
  const std::vector<float> x = {0, 0, 0, 0};
  std::vector<float> y(4);
  CpuVectorExample(x.data(), y.data(), 4, 2);
  EXPECT_EQ(y, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));  // softmax of two zeros per row
}

TEST(GraphDocTest, Example) {
  std::optional<Graph> g;
  ValueId h = -1;
  ASSERT_EQ(GraphExample(&g, &h), Status::Ok());
  EXPECT_EQ(g->inputs(), (std::vector<ValueId>{0, 1}));
  EXPECT_EQ(g->outputs(), (std::vector<ValueId>{h}));
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0].op, OpSpec::Matmul());
  EXPECT_EQ(g->TypeString(h), "f32[4,6,10]");
  EXPECT_EQ(g->annotation(0)->PlacementsString(), "S(0),R");
  EXPECT_EQ(g->annotation(1)->PlacementsString(), "R,S(1)");
}

// compiler/propagation.h (graph: the graph of compiler/graph.h's example).
Status PropagationExample(const Graph& graph, ValueId h) {
  MF_ASSIGN_OR_RETURN(Propagation p, Propagate(graph));

  // p.values[h]: Layout of value h, e.g. S(0),S(2) on mesh(2x2, [dp, tp])
  EXPECT_EQ(p.values[h].PlacementsString(), "S(0),S(2)");
  EXPECT_EQ(p.values[h].mesh().ToString(), "mesh(2x2, [dp, tp])");
  // p.nodes[0].strategy: {S(0),R} x {R,S(1)} -> S(0),S(2)
  EXPECT_EQ(p.nodes[0].strategy.ToString(), "{S(0),R} x {R,S(1)} -> S(0),S(2)");
  // p.modelled_us: total modelled time of the redistributions it implies (none here)
  EXPECT_EQ(p.modelled_us, 0);
  return Status::Ok();
}

TEST(PropagationDocTest, Example) {
  std::optional<Graph> g;
  ValueId h = -1;
  ASSERT_EQ(GraphExample(&g, &h), Status::Ok());
  EXPECT_EQ(PropagationExample(*g, h), Status::Ok());
}

// compiler/program.h: the MLP whose ProgramToText the header shows.
StatusOr<Graph> MlpGraph() {
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({2, 2}, {"dp", "tp"}));
  Graph g(mesh);
  MF_ASSIGN_OR_RETURN(ValueId x, g.Input("x", {5, 6, 16}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId w1, g.Param("w1", {16, 42}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId w2, g.Param("w2", {42, 16}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId h, g.Apply(OpSpec::Matmul(), {x, w1}, "h"));
  MF_ASSIGN_OR_RETURN(ValueId a, g.Apply(OpSpec::Unary(UnaryOp::kGelu), {h}, "a"));
  MF_ASSIGN_OR_RETURN(ValueId y, g.Apply(OpSpec::Matmul(), {a, w2}, "y"));
  MF_RETURN_IF_ERROR(g.Annotate(x, "S(0),R"));
  MF_RETURN_IF_ERROR(g.Annotate(w1, "R,S(1)"));
  MF_RETURN_IF_ERROR(g.Annotate(w2, "R,S(0)"));
  MF_RETURN_IF_ERROR(g.Annotate(y, "S(0),R"));
  MF_RETURN_IF_ERROR(g.MarkOutput(y));
  return g;
}

TEST(ProgramDocTest, ProgramToText) {
  StatusOr<Graph> graph = MlpGraph();
  ASSERT_TRUE(graph.ok()) << graph.status();
  StatusOr<Program> p = Compile(*graph);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ProgramToText(*p),
            "program on mesh(2x2, [dp, tp]): 3 ops, 1 redistribution\n"
            "  input x: f32[5,6,16]  S(0),R\n"
            "  param w1: f32[16,42]  R,S(1)\n"
            "  param w2: f32[42,16]  R,S(0)\n"
            "   1. h = matmul(x, w1)                  f32[5,6,42]      {S(0),R} x {R,S(1)} -> S(0),S(2)\n"
            "   2. a = gelu(h)                        f32[5,6,42]      {S(0),S(2)} -> S(0),S(2)\n"
            "   3. y = matmul(a, w2)                  f32[5,6,16]      {S(0),S(2)} x {R,S(0)} -> S(0),P(sum)\n"
            "   4. redistribute y: S(0),P(sum) -> S(0),R (annotation)  1 collective, 1152 B/rank, 4.008 us\n"
            "         all_reduce      mesh_dims=[1]    tensor_dim=-     bytes/rank=1152     4.008 us  "
            "S(0),P(sum) -> S(0),R\n"
            "  outputs: y S(0),R\n"
            "cost: 4.008 us modelled, 3 ops, 1 redistribution, 1 collective (all_reduce x1), max 1152 B "
            "received per rank\n"
            "bytes received per rank: [1152,1152,768,768]\n");
}

// compiler/program.h (graph: the MLP above; ctx and inputs: this rank's, on a 2x2 threads world).
Status ProgramExample(const Graph& graph, RankContext& ctx, const std::vector<DTensor>& inputs,
                      std::vector<DTensor>* outputs) {
  MF_ASSIGN_OR_RETURN(Program p, Compile(graph));
  std::printf("%s", ProgramToText(p).c_str());
  MF_ASSIGN_OR_RETURN(std::vector<DTensor> outs, Execute(p, ctx, inputs));

  *outputs = std::move(outs);
  return Status::Ok();
}

TEST(ProgramDocTest, CompileAndExecute) {
  StatusOr<Graph> graph = MlpGraph();
  ASSERT_TRUE(graph.ok()) << graph.status();
  StatusOr<Program> program = Compile(*graph);
  ASSERT_TRUE(program.ok()) << program.status();
  const std::vector<Tensor> globals = {Smooth({5, 6, 16}, 1), Smooth({16, 42}, 2), Smooth({42, 16}, 3)};
  StatusOr<std::vector<Tensor>> ref = EvaluateReference(*graph, globals);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const Tensor& want = ref->at(static_cast<size_t>(graph->outputs()[0]));
  StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(4);
  ASSERT_TRUE(world.ok()) << world.status();
  const Status run = (*world)->Run([&](Communicator& world_comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, graph->mesh()));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> inputs, DistributeInputs(*program, globals, world_comm.world_rank()));
    std::vector<DTensor> outs;
    MF_RETURN_IF_ERROR(ProgramExample(*graph, ctx, inputs, &outs));
    EXPECT_EQ(outs.size(), 1u);
    if (outs.empty()) return Status::Ok();
    EXPECT_EQ(outs[0].layout().PlacementsString(), "S(0),R");
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(outs[0], ctx));
    EXPECT_LT(MaxAbsDiff(full, want), 1e-4);
    return Status::Ok();
  });
  EXPECT_EQ(run, Status::Ok());
}

// runtime/eager.h (x [4,6] in S(0),R and w [6,8] in R,S(1) on a 2x2 threads world).
TEST(EagerDocTest, MatmulSoftmax) {
  StatusOr<DeviceMesh> mesh_or = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  ASSERT_TRUE(mesh_or.ok()) << mesh_or.status();
  const DeviceMesh mesh = *mesh_or;
  const Tensor gx = Smooth({4, 6}, 1), gw = Smooth({6, 8}, 2);
  StatusOr<Tensor> gy = MatmulKernel(gx, gw);
  ASSERT_TRUE(gy.ok()) << gy.status();
  StatusOr<Tensor> want = SoftmaxKernel(*gy, -1, false);
  ASSERT_TRUE(want.ok()) << want.status();
  StatusOr<Layout> x_layout = Layout::Create({4, 6}, mesh, {Shard{0}, Replicate{}});
  StatusOr<Layout> w_layout = Layout::Create({6, 8}, mesh, {Replicate{}, Shard{1}});
  ASSERT_TRUE(x_layout.ok()) << x_layout.status();
  ASSERT_TRUE(w_layout.ok()) << w_layout.status();
  StatusOr<std::unique_ptr<ThreadWorld>> world = ThreadWorld::Create(4);
  ASSERT_TRUE(world.ok()) << world.status();
  const Status run = (*world)->Run([&](Communicator& world_comm) -> Status {
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(gx, *x_layout, world_comm.world_rank()));
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(gw, *w_layout, world_comm.world_rank()));

    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
    MF_ASSIGN_OR_RETURN(DTensor y, Matmul(x, w, ctx));      // x [..,m,k], w [k,n]
    MF_ASSIGN_OR_RETURN(DTensor p, Softmax(y, /*dim=*/-1, ctx));
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(p, ctx));

    EXPECT_EQ(y.global_shape(), (std::vector<int64_t>{4, 8}));
    EXPECT_LT(MaxAbsDiff(full, *want), 1e-6);
    return Status::Ok();
  });
  EXPECT_EQ(run, Status::Ok());
}

// ops/kernels.h (a [2,3,4] x b [4,5]; x [2,3] + bias [3]).
Status KernelsExample(const Tensor& a, const Tensor& b, const Tensor& x, const Tensor& bias) {
  MF_ASSIGN_OR_RETURN(Tensor c, MatmulKernel(a, b));          // [..., m, k] x [..., k, n]
  MF_ASSIGN_OR_RETURN(Tensor y, BinaryKernel(BinaryOp::kAdd, x, bias));  // broadcast
  MF_ASSIGN_OR_RETURN(Tensor s, ReduceKernel(ReduceKind::kMean, x, std::vector<int>{1}, false));
  MF_ASSIGN_OR_RETURN(Tensor p, SoftmaxKernel(x, /*dim=*/-1, /*log=*/false));

  EXPECT_EQ(c.shape(), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(y, Tensor::FromVector<float>({2, 3}, {10, 21, 32, 13, 24, 35}).value());
  EXPECT_EQ(s, Tensor::FromVector<float>({2}, {1, 4}).value());
  EXPECT_EQ(p.shape(), (std::vector<int64_t>{2, 3}));
  for (int row = 0; row < 2; ++row) {
    EXPECT_NEAR(p.GetAsDouble(3 * row) + p.GetAsDouble(3 * row + 1) + p.GetAsDouble(3 * row + 2), 1.0, 1e-6);
  }
  return Status::Ok();
}

// compiler/graph_autodiff.h
Status GraphAutodiffExample(Graph& g, ValueId y, ValueId w1, ValueId w2) {
  MF_ASSIGN_OR_RETURN(ValueId loss, g.Apply(OpSpec::Reduce(ReduceKind::kMean, {}, false), {y}, "loss"));
  const ValueId params[] = {w1, w2};
  MF_ASSIGN_OR_RETURN(std::vector<ValueId> grads, AppendBackward(g, loss, params));
  for (ValueId d : grads) MF_RETURN_IF_ERROR(g.MarkOutput(d));
  // Propagate / Compile / Execute the graph: outputs are the forward's and the gradients.
  return Status::Ok();
}

TEST(GraphAutodiffDocTest, Example) {
  Graph g(*DeviceMesh::Create({2}, {"dp"}));
  const ValueId x = *g.Input("x", {4, 3}, DType::kF32);
  const ValueId w1 = *g.Param("w1", {3, 5}, DType::kF32);
  const ValueId w2 = *g.Param("w2", {5, 2}, DType::kF32);
  const ValueId h = *g.Apply(OpSpec::Matmul(), {x, w1}, "h");
  const ValueId y = *g.Apply(OpSpec::Matmul(), {h, w2}, "y");
  ASSERT_EQ(GraphAutodiffExample(g, y, w1, w2), Status::Ok());
  ASSERT_EQ(g.outputs().size(), 2u);
  EXPECT_EQ(g.value(g.outputs()[0]).name, "d_w1");
  EXPECT_TRUE(Compile(g).ok());
}

// ops/op_spec.h
TEST(OpSpecDocTest, Example) {
  const OpSpec mm = OpSpec::Matmul();
  const OpSpec ln = OpSpec::LayerNorm(/*normalized_ndim=*/1, /*has_weight=*/true, /*has_bias=*/false);
  // mm.ToString() == "matmul"; ln.num_operands() == 2; ln.get<NormParams>()->eps == 1e-5
  EXPECT_EQ(mm.ToString(), "matmul");
  EXPECT_EQ(ln.num_operands(), 2);
  EXPECT_EQ(ln.get<NormParams>()->eps, 1e-5);
  EXPECT_EQ(ln.get<MatmulParams>(), nullptr);
}

// runtime/strategy.h
Status StrategyExample(std::span<const DTensor* const> inputs) {
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const StrategyChoice> c, ChooseStrategy(OpSpec::Matmul(), inputs));
  // c->operand_layouts, c->plans (nullptr where already in place), c->result
  if (c->operand_layouts.size() != 2 || c->plans.size() != 2) return InternalError("bad choice");
  return Status::Ok();
}

TEST(StrategyDocTest, Example) {
  const DeviceMesh mesh = *DeviceMesh::Create({1});
  const DTensor a = *Distribute(Smooth({2, 3}, 1), *Layout::Create({2, 3}, mesh, {Replicate{}}), 0);
  const DTensor b = *Distribute(Smooth({3, 2}, 2), *Layout::Create({3, 2}, mesh, {Replicate{}}), 0);
  const DTensor* in[2] = {&a, &b};
  EXPECT_EQ(StrategyExample(in), Status::Ok());
}

TEST(KernelsDocTest, Example) {
  const Tensor x = Tensor::Iota(DType::kF32, {2, 3});  // {0, 1, 2}, {3, 4, 5}
  const Tensor bias = Tensor::FromVector<float>({3}, {10, 20, 30}).value();
  EXPECT_EQ(KernelsExample(Tensor::Iota(DType::kF32, {2, 3, 4}), Tensor::Iota(DType::kF32, {4, 5}), x, bias),
            Status::Ok());
}

// ops/sharding_rule.h
Status ShardingRuleExample() {
  MF_ASSIGN_OR_RETURN(ShardingRule rule, MatmulRule(std::vector<int64_t>{5, 7}, std::vector<int64_t>{7, 3}));
  std::vector<Strategy> s = EnumerateStrategies(rule, /*mesh_ndim=*/1);
  // 6 strategies (ToString): {R} x {R} -> R; S(m): {S(0)} x {R} -> S(0);
  //   S(k): {S(1)} x {S(0)} -> P(sum); S(n): {R} x {S(1)} -> S(1);
  //   {P(sum)} x {R} -> P(sum); {R} x {P(sum)} -> P(sum)

  std::vector<std::string> strings;
  for (const Strategy& strategy : s) strings.push_back(strategy.ToString());
  EXPECT_EQ(strings, (std::vector<std::string>{"{R} x {R} -> R", "{S(0)} x {R} -> S(0)", "{S(1)} x {S(0)} -> P(sum)",
                                               "{R} x {S(1)} -> S(1)", "{P(sum)} x {R} -> P(sum)",
                                               "{R} x {P(sum)} -> P(sum)"}));
  // The factors of the file comment, as ShardingRule::ToString prints them.
  EXPECT_EQ(rule.ToString(), "matmul: [m,k],[k,n] -> [m,n] {m=5 pass_through, k=7 contracting(sum), n=3 pass_through}");
  return Status::Ok();
}

TEST(ShardingRuleDocTest, MatmulStrategies) { EXPECT_EQ(ShardingRuleExample(), Status::Ok()); }

// ops/shape_util.h
TEST(ShapeUtilDocTest, Example) {
  const std::vector<int64_t> a = {5, 1}, b = {3}, c = {5, 2}, d = {7};
  EXPECT_EQ(ShapeString(c), "[5,2]");
  EXPECT_EQ(BroadcastShapes("add", a, b).value(), (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(BroadcastShapes("add", c, d).status().ToString(),
            "INVALID_ARGUMENT: add: shapes [5,2] and [7] do not broadcast (sizes 2 vs 7 at broadcast dim 1)");
}

// ops/op_kinds.h
TEST(OpKindsDocTest, Example) {
  const UnaryOp op = UnaryOp::kGelu;           // UnaryOpName(op) == "gelu" (sharding_rule.h)
  const ReduceKind kind = ReduceKind::kMean;   // ReduceKindName(kind) == "mean"
  EXPECT_EQ(UnaryOpName(op), "gelu");
  EXPECT_EQ(ReduceKindName(kind), "mean");
}

// ops/elementwise.h
TEST(ElementwiseDocTest, Example) {
  const float g = elementwise::UnaryFixed<UnaryOp::kGelu>(0.5f, 1.0f);   // gelu(0.5), tanh form
  const float x[3] = {-1, 0, 2};
  float y[3];
  const elementwise::UnaryArgs args{elementwise::ElemType::kF32, UnaryOp::kRelu, 1.0, x, y};
  for (int64_t i = 0; i < 3; ++i) elementwise::UnaryBody<float>{}(args, i);  // y = {0, 0, 2}

  EXPECT_NEAR(g, 0.345714f, 1e-6);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.0f);
}

// ops/shared_kernels.h
Status SharedKernelsExample() {
  HostLoopBackend host;
  const Tensor x = Tensor::Iota(DType::kF32, {2, 3}), b = Tensor::Iota(DType::kF32, {3});
  const Tensor* operands[] = {&x, &b};
  MF_ASSIGN_OR_RETURN(Tensor y, RunSharedKernel(OpSpec::Binary(BinaryOp::kAdd), operands, KernelContext{}, host));
  // y == RunKernel(OpSpec::Binary(BinaryOp::kAdd), operands).value(): {0, 2, 4, 3, 5, 7}

  EXPECT_EQ(y, RunKernel(OpSpec::Binary(BinaryOp::kAdd), operands).value());
  EXPECT_EQ(y, Tensor::FromVector<float>({2, 3}, {0, 2, 4, 3, 5, 7}).value());
  return Status::Ok();
}

TEST(SharedKernelsDocTest, Example) { EXPECT_EQ(SharedKernelsExample(), Status::Ok()); }

}  // namespace
}  // namespace meshflow
