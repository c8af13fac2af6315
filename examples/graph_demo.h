// graph_demo: the driver shared by the graph-compiler examples (tp_mlp, attention).
//
// An example supplies a function that builds its annotated Graph on a (dp x tp) mesh and a
// structural check of the compiled program (e.g. "exactly one all-reduce per block"). RunDemo
// then, on the chosen backend:
//   1. builds the mesh: threads: an in-process 2x2 world; mpi: MPI_COMM_WORLD as a
//      2 x (size/2) mesh (launch with mpirun -np 4);
//   2. compiles the graph (every rank / process compiles the same program: propagation is
//      deterministic) and rank 0 prints the graph, the program, the collectives inserted and the
//      cost report;
//   3. every rank distributes deterministic global inputs, executes the program, checks that the
//      bytes it received equal the modelled bytes, gathers every output and compares it with the
//      single-rank reference (EvaluateReference); the results are combined over the world;
//   4. rank 0 prints "max abs error ... OK", "checks: N passed, M failed" and, on success,
//      "all checks passed". The exit code is 0 only when every check passes.
//
//   int main(int argc, char** argv) {
//     return meshflow::examples::RunDemo("tp_mlp", BuildMlp, CheckMlp, argc, argv);
//   }
#ifndef MESHFLOW_EXAMPLES_GRAPH_DEMO_H_
#define MESHFLOW_EXAMPLES_GRAPH_DEMO_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <functional>
#include <string>

#include "meshflow/base/status.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/compiler/program.h"

namespace meshflow::examples {

using BuildFn = std::function<StatusOr<Graph>(const DeviceMesh& mesh)>;
// Returns "" when the program has the expected structure, else what is wrong.
using CheckFn = std::function<std::string(const Program& program)>;

// Flags: --backend threads|mpi (default threads). Returns the process exit code.
int RunDemo(const std::string& name, const BuildFn& build, const CheckFn& check, int argc, char** argv);

// Deterministic global values in [-0.5, 0.5] * scale, different per seed.
Tensor DemoTensor(DType dtype, const std::vector<int64_t>& shape, int seed, double scale = 1.0);

}  // namespace meshflow::examples

#endif  // MESHFLOW_EXAMPLES_GRAPH_DEMO_H_
