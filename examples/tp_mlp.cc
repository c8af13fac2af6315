// tp_mlp: a Megatron-style tensor-parallel MLP compiled by the graph compiler.
//
// Two MLP blocks on a (dp x tp) mesh (2x2 in process, or 2 x (n/2) under mpirun):
//
//   x  [B=5, S=6, H=16]  S(0),R      batch-sharded on dp (5 rows: uneven), replicated on tp
//   block 1: h1 = x @ W1 [16,42] (column-parallel: R,S(1)); a1 = gelu(h1);
//            y1 = a1 @ W2 [42,16] (row-parallel: R,S(0));   r1 = x + y1 (residual)
//            r1 annotated S(0),R               -> one all-reduce on tp
//   block 2: h2 = r1 @ W3 (column); a2 = gelu(h2); y2 = a2 @ W4 (row)
//            y2 annotated S(0),S(1)           -> one reduce-scatter on tp (sequence parallel)
//
// Only the annotations above are given; the compiler propagates every other layout, picks each
// op's strategy by the modelled cost and inserts exactly one collective per block (checked).
// The program runs on every rank and the gathered output is compared with the single-rank
// reference; it also checks that every rank received exactly the modelled bytes.
//
//   bazel run //examples:tp_mlp                       # threads backend, 2x2 in-process world
//   bazel build //examples:tp_mlp && mpirun -np 4 bazel-bin/examples/tp_mlp --backend mpi
#include <map>
#include <string>

#include "meshflow/examples/graph_demo.h"

namespace meshflow::examples {
namespace {


constexpr int64_t kBatch = 5, kSeq = 6, kHidden = 16, kFfn = 42;

// x @ W_in (column-parallel) -> gelu -> @ W_out (row-parallel); returns the block's output.
StatusOr<ValueId> Block(Graph& g, ValueId x, const std::string& w_in, const std::string& w_out, int index) {
  const std::string i = std::to_string(index);
  MF_ASSIGN_OR_RETURN(ValueId w1, g.Param(w_in, {kHidden, kFfn}, DType::kF32));
  MF_ASSIGN_OR_RETURN(ValueId w2, g.Param(w_out, {kFfn, kHidden}, DType::kF32));
  MF_RETURN_IF_ERROR(g.Annotate(w1, "R,S(1)"));  // column-parallel
  MF_RETURN_IF_ERROR(g.Annotate(w2, "R,S(0)"));  // row-parallel
  MF_ASSIGN_OR_RETURN(ValueId h, g.Apply(OpSpec::Matmul(), {x, w1}, "h" + i));
  MF_ASSIGN_OR_RETURN(ValueId a, g.Apply(OpSpec::Unary(UnaryOp::kGelu), {h}, "a" + i));
  return g.Apply(OpSpec::Matmul(), {a, w2}, "y" + i);
}

StatusOr<Graph> BuildMlp(const DeviceMesh& mesh) {
  Graph g(mesh);
  MF_ASSIGN_OR_RETURN(ValueId x, g.Input("x", {kBatch, kSeq, kHidden}, DType::kF32));
  MF_RETURN_IF_ERROR(g.Annotate(x, "S(0),R"));
  MF_ASSIGN_OR_RETURN(ValueId y1, Block(g, x, "w1", "w2", 1));
  MF_ASSIGN_OR_RETURN(ValueId r1, g.Apply(OpSpec::Binary(BinaryOp::kAdd), {x, y1}, "r1"));
  MF_RETURN_IF_ERROR(g.Annotate(r1, "S(0),R"));      // block 1 output: replicated on tp
  MF_ASSIGN_OR_RETURN(ValueId y2, Block(g, r1, "w3", "w4", 2));
  MF_RETURN_IF_ERROR(g.Annotate(y2, "S(0),S(1)"));   // block 2 output: sequence-sharded on tp
  MF_RETURN_IF_ERROR(g.MarkOutput(y2));
  return g;
}

// Exactly one all-reduce (block 1) and one reduce-scatter (block 2), nothing else.
std::string CheckMlp(const Program& p) {
  const CostReport c = ReportCost(p);
  const std::map<std::string, int> want = {{"all_reduce", 1}, {"reduce_scatter", 1}};
  if (c.collectives_by_kind != want || c.collectives != 2) {
    std::string got;
    for (const auto& [k, n] : c.collectives_by_kind) got += " " + k + " x" + std::to_string(n);
    return "expected one all_reduce and one reduce_scatter, got" + (got.empty() ? std::string(" none") : got);
  }
  return "";
}

}  // namespace
}  // namespace meshflow::examples

int main(int argc, char** argv) {
  return meshflow::examples::RunDemo("tp_mlp", meshflow::examples::BuildMlp, meshflow::examples::CheckMlp, argc, argv);
}
