// Compiled program: a Graph plus its Propagation lowered to explicit steps, with printing, a
// cost report and execution on any Communicator backend.
//
// Nodes whose result no graph output depends on are dead code and get no step (a graph without
// outputs compiles to no steps). Steps (in execution order):
//   RedistributeStep  value, from layout, to layout and the planner's Plan (optimal planner,
//                     PropagationOptions::topology). Inserted (a) before an op whose strategy
//                     needs an operand in a layout not yet available (each (value, layout) is
//                     materialized once and reused by later consumers), (b) right after an op
//                     whose result is annotated with a layout other than the one it produces.
//   OpStep            node, op, chosen strategy, operand layouts (already in place), result
//                     layout; runs only the local kernel (no communication).
//
// ProgramToText prints every step: ops with their layouts, redistributions with each collective
// of their plan (kind, group, bytes received by the busiest rank, modelled time; the same
// fields as planner/plan_format.h), then the CostReport:
//
//   program on mesh(2x2, [dp, tp]): 3 ops, 1 redistribution
//     input x: f32[5,6,16]  S(0),R
//     param w1: f32[16,42]  R,S(1)
//     param w2: f32[42,16]  R,S(0)
//      1. h = matmul(x, w1)                  f32[5,6,42]      {S(0),R} x {R,S(1)} -> S(0),S(2)
//      2. a = gelu(h)                        f32[5,6,42]      {S(0),S(2)} -> S(0),S(2)
//      3. y = matmul(a, w2)                  f32[5,6,16]      {S(0),S(2)} x {R,S(0)} -> S(0),P(sum)
//      4. redistribute y: S(0),P(sum) -> S(0),R (annotation)  1 collective, 1152 B/rank, 4.008 us
//            all_reduce      mesh_dims=[1]    tensor_dim=-     bytes/rank=1152     4.008 us  S(0),P(sum) -> S(0),R
//     outputs: y S(0),R
//   cost: 4.008 us modelled, 3 ops, 1 redistribution, 1 collective (all_reduce x1), max 1152 B received per rank
//   bytes received per rank: [1152,1152,768,768]
//
// Execute runs the program collectively (every rank of the mesh calls it with its own part of
// the same inputs): redistributions through ExecutePlan, ops through the eager layer's
// execution of a chosen strategy (RunStrategy in runtime/eager.h; operands are already in the layouts
// it needs, so it only runs the local kernel and wraps the result).
//
//   MF_ASSIGN_OR_RETURN(Program p, Compile(graph));
//   std::printf("%s", ProgramToText(p).c_str());
//   MF_ASSIGN_OR_RETURN(std::vector<DTensor> outs, Execute(p, ctx, inputs));
//
// Errors: Compile: propagation and planner errors (naming the node / value). Execute: wrong
// number of inputs, an input whose shape or dtype differs from the graph's value (names it),
// ctx on another mesh, kernel and communicator errors (naming the step).
#ifndef MESHFLOW_COMPILER_PROGRAM_H_
#define MESHFLOW_COMPILER_PROGRAM_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/compiler/propagation.h"
#include "meshflow/planner/plan.h"

namespace meshflow {

struct RedistributeStep {
  ValueId value = -1;
  Layout from;
  Layout to;
  std::shared_ptr<const Plan> plan;  // never null; may have local steps only
  bool for_annotation = false;       // (b) above: moves an op result to its annotation
  friend bool operator==(const RedistributeStep& a, const RedistributeStep& b) {
    return a.value == b.value && a.from == b.from && a.to == b.to && a.for_annotation == b.for_annotation;
  }
};

struct OpStep {
  int node = -1;
  OpSpec op;
  std::vector<ValueId> operands;
  ValueId result = -1;
  Strategy strategy;
  std::vector<Layout> operand_layouts;
  Layout result_layout;
  // What RunStrategy runs: the strategy with operands in place (no plans) and the per-op details
  // (e.g. the mean count). Not compared by operator== (it is derived from the fields above).
  std::shared_ptr<const StrategyChoice> choice;
  friend bool operator==(const OpStep& a, const OpStep& b) {
    return a.node == b.node && a.op == b.op && a.operands == b.operands && a.result == b.result &&
           a.strategy == b.strategy && a.operand_layouts == b.operand_layouts && a.result_layout == b.result_layout;
  }
};

using ProgramStep = std::variant<RedistributeStep, OpStep>;

struct Program {
  Graph graph;
  Propagation propagation;
  PropagationOptions options;
  std::vector<ProgramStep> steps;
  std::vector<Layout> input_layouts;   // per graph.inputs()
  std::vector<Layout> output_layouts;  // per graph.outputs()
};

StatusOr<Program> Compile(const Graph& graph, const PropagationOptions& options = {});

// Whole-program totals. Local plan steps (local_slice, local_partial, local_shard_to_partial) are not
// collectives.
struct CostReport {
  int ops = 0;
  int redistributions = 0;
  int collectives = 0;
  std::map<std::string, int> collectives_by_kind;   // "all_reduce" -> 1
  double modelled_us = 0;                           // sum of every plan's modelled time
  std::vector<int64_t> bytes_received_per_rank;     // summed over plans, mesh().ranks() order
  int64_t max_bytes_received_per_rank = 0;
  friend bool operator==(const CostReport&, const CostReport&) = default;
};

CostReport ReportCost(const Program& program);
// "cost: 4.008 us modelled, 3 ops, 1 redistribution, 1 collective (all_reduce x1), max 1152 B
//  received per rank\nbytes received per rank: [1152,1152,768,768]\n"
std::string CostReportToText(const CostReport& report);
// Memory of one Execute per rank: the bytes of the local value copies held at once. The
// caller's inputs (in program.input_layouts) count for the whole call; every copy the program
// makes (an op result, a redistributed value) counts from the step that makes it until the last
// step reading its value (outputs: to the end), as Execute releases them. The executor's
// transient plan buffers are not counted. O(steps x ranks).
struct MemoryReport {
  std::vector<int64_t> peak_live_bytes_per_rank;  // mesh().ranks() order
  int64_t max_peak_live_bytes = 0;
  friend bool operator==(const MemoryReport&, const MemoryReport&) = default;
};
MemoryReport ReportMemory(const Program& program);
// "peak live bytes per rank: max 464 [464,464]\n"
std::string MemoryReportToText(const MemoryReport& report);

// Every step, then the cost report (see the file comment).
std::string ProgramToText(const Program& program);

// Collective. `inputs` follow graph.inputs(); an input in another layout than the program's is
// redistributed first (optimal plan). Every local copy is released after the last step reading
// its value (outputs are kept); inputs already in their program layout are read in place, never
// copied. Returns the outputs in graph.outputs() order, each in
// program.output_layouts.
StatusOr<std::vector<DTensor>> Execute(const Program& program, RankContext& ctx, std::span<const DTensor> inputs);
// Same, with the inputs by pointer (none copied; a null input is INVALID_ARGUMENT).
StatusOr<std::vector<DTensor>> ExecuteBorrowed(const Program& program, RankContext& ctx,
                                               std::span<const DTensor* const> inputs);
// Same, with every input given as this rank's local shard in program.input_layouts.
StatusOr<std::vector<DTensor>> ExecuteLocal(const Program& program, RankContext& ctx, std::span<const Tensor> locals);
// This rank's local shards of global input tensors (Distribute under program.input_layouts).
StatusOr<std::vector<DTensor>> DistributeInputs(const Program& program, const std::vector<Tensor>& globals, int rank);

}  // namespace meshflow

#endif  // MESHFLOW_COMPILER_PROGRAM_H_
