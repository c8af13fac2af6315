// attention: a multi-head attention block sharded over heads, compiled by the graph compiler.
//
// On a (dp x tp) mesh (2x2 in process, or 2 x (n/2) under mpirun), batch over dp, heads over tp:
//
//   x   [B=3, S=48, H=384]   S(0),R     (3 rows on dp: uneven, 2 + 1)
//   Wq, Wk, Wv [nh=7, H, dh=16]  R,S(0) (7 heads on tp: uneven, 4 + 3)
//   Wo  [nh, dh, H]             R,S(0)
//   x4     = reshape(x, [B,1,S,H])
//   q,k,v  = x4 @ Wq|Wk|Wv                  [B,nh,S,dh]  (batch dims broadcast [B,1] x [nh])
//   scores = q @ transpose(k, -2, -1) * 1/sqrt(dh)      [B,nh,S,S]
//   p      = softmax(scores, -1);  ctx = p @ v          [B,nh,S,dh]
//   o      = ctx @ Wo                                   [B,nh,S,H]
//   out    = sum(o, dim 1)  annotated S(0),R            [B,S,H]
//
// Every op stays local to its heads; the sum over the sharded head dim yields Partial(sum) on
// tp and the replicated annotation costs exactly one all-reduce (checked). The sizes matter: the
// alternative is to all-gather o over the heads and sum locally, one latency hop instead of the
// all-reduce's two but nh/2 times the bytes; at toy sizes (a few KB) latency dominates and the
// cost model rightly prefers the all-gather, so the activations here are ~150 KB per rank. The program runs on
// every rank and is compared with the single-rank reference.
//
//   bazel run //examples:attention                    # threads backend, 2x2 in-process world
//   bazel build //examples:attention && mpirun -np 4 bazel-bin/examples/attention --backend mpi
#include <cmath>
#include <map>
#include <string>

#include "meshflow/examples/graph_demo.h"

namespace meshflow::examples {
namespace {


constexpr int64_t kBatch = 3, kSeq = 48, kHidden = 384, kHeads = 7, kHeadDim = 16;

StatusOr<Graph> BuildAttention(const DeviceMesh& mesh) {
  Graph g(mesh);
  MF_ASSIGN_OR_RETURN(ValueId x, g.Input("x", {kBatch, kSeq, kHidden}, DType::kF32));
  MF_RETURN_IF_ERROR(g.Annotate(x, "S(0),R"));
  ValueId w[3];
  const char* names[3] = {"wq", "wk", "wv"};
  for (int i = 0; i < 3; ++i) {
    MF_ASSIGN_OR_RETURN(w[i], g.Param(names[i], {kHeads, kHidden, kHeadDim}, DType::kF32));
    MF_RETURN_IF_ERROR(g.Annotate(w[i], "R,S(0)"));  // heads over tp
  }
  MF_ASSIGN_OR_RETURN(ValueId wo, g.Param("wo", {kHeads, kHeadDim, kHidden}, DType::kF32));
  MF_RETURN_IF_ERROR(g.Annotate(wo, "R,S(0)"));

  MF_ASSIGN_OR_RETURN(ValueId x4, g.Apply(OpSpec::Reshape({kBatch, 1, kSeq, kHidden}), {x}, "x4"));
  MF_ASSIGN_OR_RETURN(ValueId q, g.Apply(OpSpec::Matmul(), {x4, w[0]}, "q"));
  MF_ASSIGN_OR_RETURN(ValueId k, g.Apply(OpSpec::Matmul(), {x4, w[1]}, "k"));
  MF_ASSIGN_OR_RETURN(ValueId v, g.Apply(OpSpec::Matmul(), {x4, w[2]}, "v"));
  MF_ASSIGN_OR_RETURN(ValueId kt, g.Apply(OpSpec::Transpose(-2, -1), {k}, "kt"));
  MF_ASSIGN_OR_RETURN(ValueId s, g.Apply(OpSpec::Matmul(), {q, kt}, "scores"));
  MF_ASSIGN_OR_RETURN(ValueId ss, g.Apply(OpSpec::Unary(UnaryOp::kScale, 1.0 / std::sqrt(double{kHeadDim})),
                                          {s}, "scaled"));
  MF_ASSIGN_OR_RETURN(ValueId p, g.Apply(OpSpec::Softmax(-1, false), {ss}, "p"));
  MF_ASSIGN_OR_RETURN(ValueId ctx, g.Apply(OpSpec::Matmul(), {p, v}, "ctx"));
  MF_ASSIGN_OR_RETURN(ValueId o, g.Apply(OpSpec::Matmul(), {ctx, wo}, "o"));
  MF_ASSIGN_OR_RETURN(ValueId out, g.Apply(OpSpec::Reduce(ReduceKind::kSum, {1}, false), {o}, "out"));
  MF_RETURN_IF_ERROR(g.Annotate(out, "S(0),R"));
  MF_RETURN_IF_ERROR(g.MarkOutput(out));
  return g;
}

// Exactly one collective: the all-reduce of the head sum.
std::string CheckAttention(const Program& p) {
  const CostReport c = ReportCost(p);
  const std::map<std::string, int> want = {{"all_reduce", 1}};
  if (c.collectives_by_kind != want || c.collectives != 1) {
    std::string got;
    for (const auto& [kind, n] : c.collectives_by_kind) got += " " + kind + " x" + std::to_string(n);
    return "expected exactly one all_reduce, got" + (got.empty() ? std::string(" none") : got);
  }
  return "";
}

}  // namespace
}  // namespace meshflow::examples

int main(int argc, char** argv) {
  return meshflow::examples::RunDemo("attention", meshflow::examples::BuildAttention,
                                     meshflow::examples::CheckAttention, argc, argv);
}
