// Compiled program tests: steps, printing (golden snippets), cost report, and execution on the
// threads world (1-D and 2-D meshes, uneven shapes) against the single-rank reference.
#include "meshflow/compiler/program.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/ops/test_util.h"

namespace meshflow {
namespace {

using ::meshflow::testing::Compare;
using ::meshflow::testing::GlobalFor;
using ::meshflow::testing::WorldOf;

// Runs the program on every rank of an in-process world and compares each output's full tensor
// with the single-rank reference. Returns "" or the first failure.
std::string RunAndCompare(const Program& p, DType dtype = DType::kF32) {
  std::vector<Tensor> globals;
  for (size_t i = 0; i < p.graph.inputs().size(); ++i) {
    globals.push_back(GlobalFor(dtype, p.graph.value(p.graph.inputs()[i]).shape, static_cast<int>(i) + 1));
  }
  StatusOr<std::vector<Tensor>> ref = EvaluateReference(p.graph, globals);
  if (!ref.ok()) return "reference: " + ref.status().ToString();
  std::mutex mu;
  std::string failure;
  const Status run = WorldOf(p.graph.mesh().size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, p.graph.mesh()));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> inputs, DistributeInputs(p, globals, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> outs, Execute(p, ctx, inputs));
    for (size_t i = 0; i < outs.size(); ++i) {
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(outs[i], ctx));
      std::string f = Compare(full, (*ref)[static_cast<size_t>(p.graph.outputs()[i])]);
      if (!(outs[i].layout() == p.output_layouts[i])) f = "output layout " + outs[i].layout().ToString();
      if (!f.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) failure = "rank " + std::to_string(comm.world_rank()) + " output " + std::to_string(i) + ": " + f;
      }
    }
    return Status();
  });
  if (!run.ok()) return run.ToString();
  return failure;
}

Graph Mlp(const DeviceMesh& mesh, const std::string& out_placements) {
  Graph g(mesh);
  // Batch 5 is uneven on dp. Weights are large enough that gathering them costs more than the
  // all-reduce of the activations (at tiny sizes the latency terms would make both ~equal).
  const ValueId x = g.Input("x", {5, 6, 16}, DType::kF32).value();
  const ValueId w1 = g.Param("w1", {16, 42}, DType::kF32).value();
  const ValueId w2 = g.Param("w2", {42, 16}, DType::kF32).value();
  const ValueId h = g.Apply(OpSpec::Matmul(), {x, w1}, "h").value();
  const ValueId a = g.Apply(OpSpec::Unary(UnaryOp::kGelu), {h}, "a").value();
  const ValueId y = g.Apply(OpSpec::Matmul(), {a, w2}, "y").value();
  EXPECT_TRUE(g.Annotate(x, "S(0),R").ok());
  EXPECT_TRUE(g.Annotate(w1, "R,S(1)").ok());
  EXPECT_TRUE(g.Annotate(w2, "R,S(0)").ok());
  EXPECT_TRUE(g.Annotate(y, out_placements).ok());
  EXPECT_TRUE(g.MarkOutput(y).ok());
  return g;
}

TEST(ProgramTest, MlpStepsAndCostReport) {
  const DeviceMesh mesh = DeviceMesh::Create({2, 2}, {"dp", "tp"}).value();
  const Program p = Compile(Mlp(mesh, "S(0),R")).value();
  ASSERT_EQ(p.steps.size(), 4u) << ProgramToText(p);
  EXPECT_TRUE(std::holds_alternative<OpStep>(p.steps[0]));
  EXPECT_TRUE(std::holds_alternative<OpStep>(p.steps[1]));
  EXPECT_TRUE(std::holds_alternative<OpStep>(p.steps[2]));
  const RedistributeStep& r = std::get<RedistributeStep>(p.steps[3]);
  EXPECT_EQ(r.value, 5);
  EXPECT_TRUE(r.for_annotation);
  EXPECT_EQ(r.from.PlacementsString(), "S(0),P(sum)");
  EXPECT_EQ(r.to.PlacementsString(), "S(0),R");

  const CostReport c = ReportCost(p);
  // y's local block is [3,6,16] on dp row 0 and [2,6,16] on row 1; an all-reduce over 2 ranks
  // of `count` elements receives count elements per rank (288 and 192 split evenly), 4 B each.
  const CostReport want{3, 1, 1, {{"all_reduce", 1}}, r.plan->modelled_us, {1152, 1152, 768, 768}, 1152};
  EXPECT_EQ(c, want) << CostReportToText(c);
  EXPECT_EQ(RunAndCompare(p), "");
}

TEST(ProgramTest, MlpPrinting) {
  const DeviceMesh mesh = DeviceMesh::Create({2, 2}, {"dp", "tp"}).value();
  const Program p = Compile(Mlp(mesh, "S(0),S(1)")).value();
  const std::string text = ProgramToText(p);
  // Golden snippets (whole lines) rather than the whole text: the times depend on the cost model
  // constants, the structure does not.
  for (const char* line : {
           "program on mesh(2x2, [dp, tp]): 3 ops, 1 redistribution\n",
           "  input x: f32[5,6,16]  S(0),R\n",
           "  param w1: f32[16,42]  R,S(1)\n",
           "   1. h = matmul(x, w1)                  f32[5,6,42]      {S(0),R} x {R,S(1)} -> S(0),S(2)\n",
           "   2. a = gelu(h)                        f32[5,6,42]      {S(0),S(2)} -> S(0),S(2)\n",
           "   3. y = matmul(a, w2)                  f32[5,6,16]      {S(0),S(2)} x {R,S(0)} -> S(0),P(sum)\n",
           "   4. redistribute y: S(0),P(sum) -> S(0),S(1) (annotation)  1 collective, ",
           "         reduce_scatter  mesh_dims=[1]    tensor_dim=1     bytes/rank=576      ",
           "  outputs: y S(0),S(1)\n",
           "cost: ",
           " us modelled, 3 ops, 1 redistribution, 1 collective (reduce_scatter x1), max ",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << text;
  }
  EXPECT_EQ(RunAndCompare(p), "");
}

// Operands moved before an op, reused by a second consumer, and an unannotated Partial output.
TEST(ProgramTest, RedistributionsAreSharedBetweenConsumers) {
  const DeviceMesh mesh = DeviceMesh::Create({4}, {"x"}).value();
  Graph g(mesh);
  const ValueId x = g.Input("x", {7, 10}, DType::kF32).value();
  const ValueId p1 = g.Apply(OpSpec::Softmax(-1, false), {x}, "p1").value();
  const ValueId p2 = g.Apply(OpSpec::Softmax(-1, true), {x}, "p2").value();
  const ValueId s = g.Apply(OpSpec::Binary(BinaryOp::kAdd), {p1, p2}, "s").value();
  const ValueId t = g.Apply(OpSpec::Reduce(ReduceKind::kSum, {0}, false), {s}, "t").value();
  ASSERT_TRUE(g.Annotate(x, "S(1)").ok());
  ASSERT_TRUE(g.MarkOutput(t).ok());
  ASSERT_TRUE(g.MarkOutput(s).ok());
  const Program p = Compile(g).value();
  int redistributions = 0;
  for (const ProgramStep& st : p.steps) redistributions += std::holds_alternative<RedistributeStep>(st) ? 1 : 0;
  EXPECT_EQ(redistributions, 1) << ProgramToText(p);  // x S(1) -> S(0) once, for both softmaxes
  EXPECT_EQ(p.output_layouts[0].PlacementsString(), "P(sum)");
  EXPECT_EQ(RunAndCompare(p), "");
}

// Uneven shapes on a 2-D mesh, reductions (mean uses the global count), broadcasting and a
// chain of matmuls with unannotated weights; f64 for a tight tolerance.
TEST(ProgramTest, ExecutionMatchesReferenceOn2DMeshUneven) {
  const DeviceMesh mesh = DeviceMesh::Create({2, 2}).value();
  Graph g(mesh);
  const ValueId x = g.Input("x", {5, 3, 7}, DType::kF64).value();
  const ValueId w = g.Param("w", {7, 9}, DType::kF64).value();
  const ValueId b = g.Param("b", {9}, DType::kF64).value();
  const ValueId v = g.Param("v", {9, 5}, DType::kF64).value();
  const ValueId h = g.Apply(OpSpec::Matmul(), {x, w}, "h").value();
  const ValueId hb = g.Apply(OpSpec::Binary(BinaryOp::kAdd), {h, b}, "hb").value();
  const ValueId r = g.Apply(OpSpec::Unary(UnaryOp::kRelu), {hb}, "r").value();
  const ValueId o = g.Apply(OpSpec::Matmul(), {r, v}, "o").value();
  const ValueId m = g.Apply(OpSpec::Reduce(ReduceKind::kMean, {1}, false), {o}, "m").value();
  const ValueId sm = g.Apply(OpSpec::Softmax(0, false), {m}, "sm").value();
  ASSERT_TRUE(g.Annotate(x, "S(0),S(2)").ok());
  ASSERT_TRUE(g.Annotate(v, "S(1),R").ok());
  ASSERT_TRUE(g.MarkOutput(o).ok());
  ASSERT_TRUE(g.MarkOutput(m).ok());
  ASSERT_TRUE(g.MarkOutput(sm).ok());
  const Program p = Compile(g).value();
  EXPECT_EQ(RunAndCompare(p, DType::kF64), "") << ProgramToText(p);
}

TEST(ProgramTest, OneDMeshWithEmptyShards) {
  const DeviceMesh mesh = DeviceMesh::Create({4}).value();
  Graph g(mesh);
  const ValueId x = g.Input("x", {3, 5}, DType::kF32).value();  // 3 rows on 4 ranks: one empty
  const ValueId w = g.Param("w", {5, 2}, DType::kF32).value();
  const ValueId y = g.Apply(OpSpec::Matmul(), {x, w}, "y").value();
  const ValueId e = g.Apply(OpSpec::Unary(UnaryOp::kExp), {y}, "e").value();
  const ValueId s = g.Apply(OpSpec::Reduce(ReduceKind::kMax, {}, false), {e}, "s").value();
  ASSERT_TRUE(g.Annotate(x, "S(0)").ok());
  ASSERT_TRUE(g.Annotate(w, "S(0)").ok());
  ASSERT_TRUE(g.Annotate(s, "R").ok());
  ASSERT_TRUE(g.MarkOutput(e).ok());
  ASSERT_TRUE(g.MarkOutput(s).ok());
  const Program p = Compile(g).value();
  EXPECT_EQ(RunAndCompare(p), "") << ProgramToText(p);
}

// The compiler is generic over OpSpec: a tiny language-model step with the newer op kinds
// (embedding with integer ids, layer norm, transpose, cross-entropy) on a 2-D mesh with a
// vocabulary-sharded embedding table and a column-parallel head.
TEST(ProgramTest, NewOpKindsAndIntegerInputs) {
  const DeviceMesh mesh = DeviceMesh::Create({2, 2}, {"dp", "tp"}).value();
  Graph g(mesh);
  const ValueId table = g.Param("table", {11, 6}, DType::kF32).value();
  const ValueId ids = g.Input("ids", {3, 5}, DType::kI64).value();
  const ValueId lw = g.Param("ln_w", {6}, DType::kF32).value();
  const ValueId lb = g.Param("ln_b", {6}, DType::kF32).value();
  const ValueId head = g.Param("head_t", {11, 6}, DType::kF32).value();  // stored [V, D]
  const ValueId targets = g.Input("targets", {3, 5}, DType::kI64).value();
  const ValueId e = g.Apply(OpSpec::Embedding(), {table, ids}, "e").value();
  const ValueId n = g.Apply(OpSpec::LayerNorm(1, true, true), {e, lw, lb}, "n").value();
  const ValueId ht = g.Apply(OpSpec::Transpose(0, 1), {head}, "head").value();
  const ValueId logits = g.Apply(OpSpec::Matmul(), {n, ht}, "logits").value();
  const ValueId loss = g.Apply(OpSpec::CrossEntropy(LossReduction::kMean), {logits, targets}, "loss").value();
  EXPECT_EQ(g.value(e).dtype, DType::kF32);
  EXPECT_EQ(g.value(loss).dtype, DType::kF32);
  ASSERT_TRUE(g.Annotate(table, "R,S(0)").ok());
  ASSERT_TRUE(g.Annotate(ids, "S(0),R").ok());
  ASSERT_TRUE(g.Annotate(head, "R,S(0)").ok());
  ASSERT_TRUE(g.Annotate(loss, "R,R").ok());
  ASSERT_TRUE(g.MarkOutput(logits).ok());
  ASSERT_TRUE(g.MarkOutput(loss).ok());
  const Program p = Compile(g).value();

  std::vector<Tensor> globals;
  for (ValueId v : g.inputs()) {
    const Value& val = g.value(v);
    if (val.dtype == DType::kI64) {
      Tensor t = Tensor::Zeros(DType::kI64, val.shape);
      for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i * 7 + v) % 11));
      globals.push_back(std::move(t));
    } else {
      globals.push_back(GlobalFor(val.dtype, val.shape, v + 1));
    }
  }
  const std::vector<Tensor> ref = EvaluateReference(g, globals).value();
  std::mutex mu;
  std::string failure;
  const Status run = WorldOf(4).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> inputs, DistributeInputs(p, globals, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> outs, Execute(p, ctx, inputs));
    for (size_t i = 0; i < outs.size(); ++i) {
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(outs[i], ctx));
      const std::string f = Compare(full, ref[static_cast<size_t>(g.outputs()[i])]);
      std::lock_guard<std::mutex> lock(mu);
      if (!f.empty() && failure.empty()) failure = "output " + std::to_string(i) + ": " + f;
    }
    return Status();
  });
  ASSERT_TRUE(run.ok()) << run << "\n" << ProgramToText(p);
  EXPECT_EQ(failure, "") << ProgramToText(p);
}

TEST(ProgramTest, ExecuteErrors) {
  const DeviceMesh mesh = DeviceMesh::Create({2}).value();
  Graph g(mesh);
  const ValueId x = g.Input("x", {4, 2}, DType::kF32).value();
  ASSERT_TRUE(g.MarkOutput(g.Apply(OpSpec::Unary(UnaryOp::kNeg), {x}, "n").value()).ok());
  const Program p = Compile(g).value();
  const Status run = WorldOf(2).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    StatusOr<std::vector<DTensor>> none = Execute(p, ctx, {});
    EXPECT_FALSE(none.ok());
    const Tensor wrong = Tensor::Zeros(DType::kF32, {4, 3});
    const Layout l = Layout::Create({4, 3}, mesh, {Replicate{}}).value();
    const DTensor d = DTensor::FromLocal(wrong, l, comm.world_rank()).value();
    StatusOr<std::vector<DTensor>> bad = Execute(p, ctx, std::span<const DTensor>(&d, 1));
    EXPECT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("input 'x' is f32[4,3], expected f32[4,2]"), std::string::npos)
        << bad.status();
    // An input in another layout is redistributed into the program's.
    const Layout s0 = Layout::Create({4, 2}, mesh, {Shard{0}}).value();
    MF_ASSIGN_OR_RETURN(DTensor in, Distribute(Tensor::Iota(DType::kF32, {4, 2}), s0, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> outs, Execute(p, ctx, std::span<const DTensor>(&in, 1)));
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(outs[0], ctx));
    EXPECT_EQ(full.GetAsDouble(7), -7.0);
    return Status();
  });
  EXPECT_TRUE(run.ok()) << run;
}

}  // namespace
}  // namespace meshflow

namespace meshflow {
namespace {

// x [4,6] S(0) x w [6,8] R on mesh {2}, h = matmul annotated R: gathering x (96 B) is cheaper
// than gathering h (128 B), so x is all-gathered and h computed replicated. Per rank: the caller's
// inputs (x: 2x6 f32 = 48 B, w: 192 B) for the whole call, x's R copy (96 B) until the matmul,
// h (4x8 = 128 B) to the end: peak 464 B at the matmul. A node no output needs gets no step.
TEST(ProgramTest, MemoryReportAndDeadNodes) {
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  Graph g(mesh);
  const ValueId x = g.Input("x", {4, 6}, DType::kF32).value();
  const ValueId w = g.Param("w", {6, 8}, DType::kF32).value();
  ASSERT_TRUE(g.Annotate(x, "S(0)").ok());
  ASSERT_TRUE(g.Annotate(w, "R").ok());
  const ValueId h = g.Apply(OpSpec::Matmul(), {x, w}, "h").value();
  const ValueId dead = g.Apply(OpSpec::Unary(UnaryOp::kExp), {x}, "dead").value();
  ASSERT_TRUE(g.Annotate(h, "R").ok());
  ASSERT_TRUE(g.MarkOutput(h).ok());
  const Program p = Compile(g).value();
  for (const ProgramStep& s : p.steps) {
    if (const OpStep* op = std::get_if<OpStep>(&s)) {
      EXPECT_NE(op->result, dead);
    }
  }
  EXPECT_EQ(ReportCost(p).ops, 1);
  ASSERT_EQ(p.steps.size(), 2u);
  ASSERT_TRUE(std::holds_alternative<RedistributeStep>(p.steps[0]));
  EXPECT_EQ(std::get<RedistributeStep>(p.steps[0]).value, x);
  const MemoryReport m = ReportMemory(p);
  EXPECT_EQ(m.peak_live_bytes_per_rank, (std::vector<int64_t>{464, 464}));
  EXPECT_EQ(m.max_peak_live_bytes, 464);
  EXPECT_EQ(MemoryReportToText(m), "peak live bytes per rank: max 464 [464,464]\n");
  // Execution agrees with the reference, and a null borrowed input is refused by name.
  const Status st = WorldOf(2).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const std::vector<Tensor> globals = {GlobalFor(DType::kF32, {4, 6}, 1), GlobalFor(DType::kF32, {6, 8}, 2)};
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> in, DistributeInputs(p, globals, comm.world_rank()));
    const std::vector<const DTensor*> ptrs = {&in[0], &in[1]};
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> out, ExecuteBorrowed(p, ctx, ptrs));
    MF_ASSIGN_OR_RETURN(std::vector<Tensor> ref, EvaluateReference(g, globals));
    EXPECT_EQ(Compare(out[0].local(), ref[static_cast<size_t>(h)]), "");
    const std::vector<const DTensor*> null_in = {&in[0], nullptr};
    const Status bad = ExecuteBorrowed(p, ctx, null_in).status();
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find("input 'w' is null"), std::string::npos) << bad;
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace meshflow
