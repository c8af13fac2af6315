// Every example in examples/graph_demo.h is compiled here; keep them identical.
//
// The example is a demo program's main(), outside namespace meshflow; BuildMlp and CheckMlp are
// that program's functions (here a one-block tensor-parallel MLP that needs exactly one
// all-reduce). It runs with the default threads backend (an in-process 2x2 world).
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/examples/graph_demo.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/compiler/program.h"

meshflow::StatusOr<meshflow::Graph> BuildMlp(const meshflow::DeviceMesh& mesh) {
  meshflow::Graph g(mesh);
  MF_ASSIGN_OR_RETURN(meshflow::ValueId x, g.Input("x", {5, 6, 16}, meshflow::DType::kF32));
  MF_ASSIGN_OR_RETURN(meshflow::ValueId w1, g.Param("w1", {16, 42}, meshflow::DType::kF32));
  MF_ASSIGN_OR_RETURN(meshflow::ValueId w2, g.Param("w2", {42, 16}, meshflow::DType::kF32));
  MF_ASSIGN_OR_RETURN(meshflow::ValueId h, g.Apply(meshflow::OpSpec::Matmul(), {x, w1}, "h"));
  MF_ASSIGN_OR_RETURN(meshflow::ValueId a, g.Apply(meshflow::OpSpec::Unary(meshflow::UnaryOp::kGelu), {h}, "a"));
  MF_ASSIGN_OR_RETURN(meshflow::ValueId y, g.Apply(meshflow::OpSpec::Matmul(), {a, w2}, "y"));
  MF_RETURN_IF_ERROR(g.Annotate(x, "S(0),R"));
  MF_RETURN_IF_ERROR(g.Annotate(w1, "R,S(1)"));
  MF_RETURN_IF_ERROR(g.Annotate(w2, "R,S(0)"));
  MF_RETURN_IF_ERROR(g.Annotate(y, "S(0),R"));
  MF_RETURN_IF_ERROR(g.MarkOutput(y));
  return g;
}

std::string CheckMlp(const meshflow::Program& program) {
  const meshflow::CostReport c = meshflow::ReportCost(program);
  const std::map<std::string, int> want = {{"all_reduce", 1}};
  return c.collectives_by_kind == want ? "" : "expected exactly one all_reduce";
}

// examples/graph_demo.h (main() renamed).
int GraphDemoExampleMain(int argc, char** argv) {
  return meshflow::examples::RunDemo("tp_mlp", BuildMlp, CheckMlp, argc, argv);
}

namespace {

TEST(GraphDemoDocTest, RunsOnTheThreadsBackend) {
  char name[] = "tp_mlp";
  char* argv[] = {name, nullptr};
  EXPECT_EQ(GraphDemoExampleMain(1, argv), 0);
}

TEST(GraphDemoDocTest, FailedCheckGivesNonZeroExit) {
  char name[] = "tp_mlp";
  char* argv[] = {name, nullptr};
  EXPECT_NE(meshflow::examples::RunDemo("tp_mlp", BuildMlp,
                                        [](const meshflow::Program&) { return std::string("wrong structure"); },
                                        1, argv),
            0);
}

}  // namespace
