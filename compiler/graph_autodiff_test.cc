// Graph autodiff: the appended backward's gradients against central finite differences of the
// single-rank reference (f64), and the compiled forward + backward program on 2- and 4-rank
// meshes against the reference.
#include "meshflow/compiler/graph_autodiff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/compiler/program.h"
#include "meshflow/ops/test_util.h"

namespace meshflow {
namespace {

using ::meshflow::testing::Compare;
using ::meshflow::testing::GlobalFor;
using ::meshflow::testing::IntsFor;
using ::meshflow::testing::WorldOf;

// x [6,8] -> layer_norm -> matmul w1 [8,12] + b1 -> gelu -> matmul w2 [12,5] -> cross-entropy
// with targets [6] (mean) + 0.1 * mean(w1 * w1) (a param used twice).
struct Mlp {
  Graph g;
  ValueId loss = -1;
  std::vector<ValueId> params;
  explicit Mlp(const DeviceMesh& mesh, DType t) : g(mesh) {
    const ValueId x = g.Input("x", {6, 8}, t).value();
    const ValueId ln_w = g.Param("ln_w", {8}, t).value();
    const ValueId w1 = g.Param("w1", {8, 12}, t).value();
    const ValueId b1 = g.Param("b1", {12}, t).value();
    const ValueId w2 = g.Param("w2", {12, 5}, t).value();
    const ValueId tg = g.Input("targets", {6}, DType::kI64).value();
    const ValueId n = g.Apply(OpSpec::LayerNorm(1, true, false), {x, ln_w}, "n").value();
    const ValueId h = g.Apply(OpSpec::Matmul(), {n, w1}, "h").value();
    const ValueId hb = g.Apply(OpSpec::Binary(BinaryOp::kAdd), {h, b1}, "hb").value();
    const ValueId a = g.Apply(OpSpec::Unary(UnaryOp::kGelu), {hb}, "a").value();
    const ValueId logits = g.Apply(OpSpec::Matmul(), {a, w2}, "logits").value();
    const ValueId ce = g.Apply(OpSpec::CrossEntropy(LossReduction::kMean), {logits, tg}, "ce").value();
    const ValueId sq = g.Apply(OpSpec::Binary(BinaryOp::kMul), {w1, w1}, "sq").value();
    const ValueId reg = g.Apply(OpSpec::Reduce(ReduceKind::kMean, {}, false), {sq}, "reg").value();
    const ValueId reg2 = g.Apply(OpSpec::Unary(UnaryOp::kScale, 0.1), {reg}, "reg2").value();
    loss = g.Apply(OpSpec::Binary(BinaryOp::kAdd), {ce, reg2}, "loss").value();
    params = {ln_w, w1, b1, w2};
  }
};

std::vector<Tensor> Globals(const Graph& g) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value& v = g.value(g.inputs()[i]);
    out.push_back(v.dtype == DType::kI64 ? IntsFor(DType::kI64, v.shape, static_cast<int>(i), 5)
                                         : GlobalFor(v.dtype, v.shape, static_cast<int>(i) + 1, i == 1 ? 1.0 : 0.0));
  }
  return out;
}

TEST(GraphAutodiffTest, GradientsMatchFiniteDifferences) {
  Mlp m(*DeviceMesh::Create({1}), DType::kF64);
  const std::vector<ValueId> grads = AppendBackward(m.g, m.loss, m.params).value();
  ASSERT_EQ(grads.size(), 4u);
  EXPECT_EQ(m.g.value(grads[1]).name, "d_w1");
  std::vector<Tensor> in = Globals(m.g);
  const std::vector<Tensor> ref = EvaluateReference(m.g, in).value();
  const double eps = 1e-6;
  int checked = 0;
  for (size_t p = 0; p < m.params.size(); ++p) {
    const size_t idx = static_cast<size_t>(m.params[p]);  // inputs are the first values, in order
    const Tensor& d = ref[static_cast<size_t>(grads[p])];
    ASSERT_EQ(d.shape(), in[idx].shape());
    for (int64_t j = 0; j < in[idx].NumElements(); ++j) {
      std::vector<Tensor> plus = in, minus = in;
      plus[idx].SetFromDouble(j, in[idx].GetAsDouble(j) + eps);
      minus[idx].SetFromDouble(j, in[idx].GetAsDouble(j) - eps);
      const double lp = EvaluateReference(m.g, plus).value()[static_cast<size_t>(m.loss)].GetAsDouble(0);
      const double lm = EvaluateReference(m.g, minus).value()[static_cast<size_t>(m.loss)].GetAsDouble(0);
      const double num = (lp - lm) / (2 * eps);
      EXPECT_NEAR(d.GetAsDouble(j), num, 1e-6 * (1 + std::abs(num))) << m.g.value(m.params[p]).name << " " << j;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8 + 96 + 12 + 60);
}

// Compiles forward + backward with annotated inputs / params and runs it on the world.
std::string RunCompiled(const std::vector<int64_t>& mesh_shape, const std::vector<std::string>& annotations) {
  Mlp m(*DeviceMesh::Create(mesh_shape), DType::kF32);
  const std::vector<ValueId> grads = AppendBackward(m.g, m.loss, m.params).value();
  for (size_t i = 0; i < m.g.inputs().size(); ++i) {
    if (!annotations[i].empty()) {
      EXPECT_TRUE(m.g.Annotate(m.g.inputs()[i], annotations[i]).ok());
    }
  }
  EXPECT_TRUE(m.g.MarkOutput(m.loss).ok());
  for (ValueId d : grads) EXPECT_TRUE(m.g.MarkOutput(d).ok());
  StatusOr<Program> p = Compile(m.g);
  if (!p.ok()) return "compile: " + p.status().ToString();
  const std::vector<Tensor> globals = Globals(m.g);
  const std::vector<Tensor> ref = EvaluateReference(m.g, globals).value();
  std::mutex mu;
  std::string failure;
  const Status run = WorldOf(p->graph.mesh().size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, p->graph.mesh()));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> inputs, DistributeInputs(*p, globals, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> outs, Execute(*p, ctx, inputs));
    for (size_t i = 0; i < outs.size(); ++i) {
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(outs[i], ctx));
      const std::string f = Compare(full, ref[static_cast<size_t>(p->graph.outputs()[i])]);
      if (!f.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) failure = "output " + std::to_string(i) + ": " + f;
      }
    }
    return Status::Ok();
  });
  if (!run.ok()) return run.ToString();
  if (!failure.empty()) return failure + "\n" + ProgramToText(*p);
  return "";
}

TEST(GraphAutodiffTest, CompiledForwardAndBackwardMatchReference) {
  // Inputs in declaration order: x, ln_w, w1, b1, w2, targets.
  EXPECT_EQ(RunCompiled({2}, {"S(0)", "R", "R", "R", "R", "S(0)"}), "");             // data parallel
  EXPECT_EQ(RunCompiled({2}, {"R", "R", "S(1)", "S(0)", "S(0)", "R"}), "");          // tensor parallel
  EXPECT_EQ(RunCompiled({2, 2}, {"S(0),R", "R,R", "R,S(1)", "R,S(0)", "R,S(0)", "S(0),R"}), "");
  EXPECT_EQ(RunCompiled({2, 2}, {"S(0),R", "", "S(0),S(1)", "", "S(1),S(0)", ""}), "");  // fsdp x tp, rest inferred
}

TEST(GraphAutodiffTest, ProgramPrintsTheBackwardCollectives) {
  Mlp m(*DeviceMesh::Create({2}, {"dp"}), DType::kF32);
  const std::vector<ValueId> grads = AppendBackward(m.g, m.loss, m.params).value();
  ASSERT_TRUE(m.g.Annotate(m.g.inputs()[0], "S(0)").ok());
  ASSERT_TRUE(m.g.Annotate(m.g.inputs()[5], "S(0)").ok());
  for (size_t i = 1; i < 5; ++i) ASSERT_TRUE(m.g.Annotate(m.g.inputs()[i], "R").ok());
  for (ValueId d : grads) {
    ASSERT_TRUE(m.g.Annotate(d, "R").ok());  // DDP: gradients all-reduced to the params' layout
    ASSERT_TRUE(m.g.MarkOutput(d).ok());
  }
  const Program p = Compile(m.g).value();
  const std::string text = ProgramToText(p);
  std::printf("%s", text.c_str());
  EXPECT_NE(text.find("d_w1"), std::string::npos) << text;
  EXPECT_NE(text.find("all_reduce"), std::string::npos) << text;
}

TEST(GraphAutodiffTest, UnreachedParamGetsZerosAndErrors) {
  Mlp m(*DeviceMesh::Create({1}), DType::kF64);
  const ValueId unused = m.g.Param("unused", {3}, DType::kF64).value();
  const ValueId wrt[] = {unused};
  const std::vector<ValueId> d = AppendBackward(m.g, m.loss, wrt).value();
  std::vector<Tensor> in = Globals(m.g);
  const std::vector<Tensor> ref = EvaluateReference(m.g, in).value();
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(ref[static_cast<size_t>(d[0])].GetAsDouble(j), 0.0);

  Mlp e(*DeviceMesh::Create({1}), DType::kF64);
  const ValueId targets = e.g.Find("targets").value();
  const ValueId logits = e.g.Find("logits").value();
  const ValueId bad_wrt[] = {targets};
  StatusOr<std::vector<ValueId>> r = AppendBackward(e.g, e.loss, bad_wrt);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("wrt value 'targets' is i64[6]; gradients need a float value"), std::string::npos)
      << r.status();
  r = AppendBackward(e.g, logits, e.params);
  EXPECT_NE(r.status().message().find("loss 'logits' is f64[6,5]; it must be a float scalar"), std::string::npos)
      << r.status();
  const ValueId bad_id[] = {999};
  r = AppendBackward(e.g, e.loss, bad_id);
  EXPECT_NE(r.status().message().find("wrt value id 999 is not a value of the graph"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace meshflow
