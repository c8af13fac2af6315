// A compiled training step: forward, backward and optimizer update in one Graph, propagated and
// compiled together, then run step after step with params and optimizer state updated in place.
//
// CompileTrainStep takes a Graph holding a forward pass to a float scalar loss, and the graph
// params to train, each annotated with its layout (the layouts are the parallel plan). It appends
//   - the backward (AppendBackward, compiler/graph_autodiff.h): the gradients "d_<param>";
//   - the optimizer state as graph inputs "<param>.exp_avg" and "<param>.exp_avg_sq" (AdamW) or
//     "<param>.momentum_buffer" (SGD with momentum > 0), annotated with the state layout
//     (TrainStepSpec::state_layouts; default: the param's layout);
//   - the per-step scalars as 0-d replicated inputs, one set per param dtype ("adamw.decay",
//     "adamw.step_size", "adamw.bc2_sqrt"; "sgd.lr", and with momentum "sgd.buf_decay",
//     "sgd.grad_scale"; a "_f64" suffix for f64 params), so one program serves every step and lr;
//   - with TrainStepSpec::max_grad_norm, clipping by the global gradient norm as ordinary ops
//     (sum of g * g per gradient, their sum, sqrt: the output "grad_norm"; coef = max_norm /
//     (norm + 1e-6); each gradient times min(coef, 1) on its state layout), as Optimizer::Step's
//     max_grad_norm; the sums run in the params' dtype, so a clipped step matches the eager one to
//     rounding (f32: ~1e-7 relative), not bit for bit, and the scalar input "clip.max_norm";
//   - the update of optim/optimizer.h's formulas as ordinary ops in the same order (Scale, Mul,
//     Add, Sub, Div, Sqrt, AddScalar), so a one-rank compiled step gives the bits of
//     Optimizer::Step. As there, the update runs on the shards of the state layout: its values
//     are annotated with it, so the planner moves the gradient there (all-reduce of a
//     Partial(sum) gradient for a replicated state, reduce-scatter for a sharded one) and the
//     new param back to the param's layout (all-gather for ZeRO-1);
//   - the outputs: the loss (annotated Replicate), then per param its new value "<param>.new"
//     (annotated with the param's layout) and its new state "<state>.new" (the state layout).
// Propagation then chooses activation, gradient and update layouts jointly (as GSPMD partitions a
// whole training step), and every collective of the step is one the planner chose: an
// all-reduce of a Partial(sum) gradient under DDP, reduce-scatter + all-gather under ZeRO-1, the
// all-gathers of sharded weights under FSDP. ToText prints the program, its cost report and its
// peak live bytes per rank (ReportMemory, compiler/program.h).
//
// TrainStepRunner holds one rank's params and state (zeros at Create), and Step runs the program
// (collective: every rank of the mesh calls it with its part of the same batch), then moves the
// new params and state into place. Every param receives a gradient every step, so one step
// count serves the bias corrections of all of them.
//
//   MF_ASSIGN_OR_RETURN(ValueId loss, g.Apply(OpSpec::Reduce(ReduceKind::kMean, {}, false), {sq}, "loss"));
//   TrainStepSpec spec{.loss = loss, .params = {w1, w2}, .optimizer = AdamWOptions{.lr = 1e-2}};
//   MF_ASSIGN_OR_RETURN(CompiledTrainStep compiled, CompileTrainStep(g, spec));
//   std::printf("%s", compiled.ToText().c_str());
//   auto shared = std::make_shared<const CompiledTrainStep>(std::move(compiled));
//   // On every rank: its parts of the initial params, then one Step per batch.
//   MF_ASSIGN_OR_RETURN(TrainStepRunner runner, TrainStepRunner::Create(shared, std::move(my_params)));
//   MF_ASSIGN_OR_RETURN(double loss_value, runner.Step(batch, ctx));
//
// Not in the compiled step (use optim/optimizer.h's eager Optimizer): bf16 params with f32
// master weights.
//
// Errors. CompileTrainStep (INVALID_ARGUMENT unless noted, naming the value; nothing compiled):
// no params; a param id that is not a graph param, or listed twice; a param without a layout
// annotation or annotated with a Partial placement; a param the loss does not depend on (it
// would get no gradient); state_layouts neither empty nor one per param; a state layout whose
// global shape or mesh differs from its param's, or with a Partial placement; a loss annotated
// with a layout that is not fully replicated; bad optimizer options (ValidateOptions); a
// max_grad_norm that is negative, inf or nan; max_grad_norm with params of different dtypes; a bf16
// param (UNIMPLEMENTED); AppendBackward's, Graph's (e.g. a state name that is already taken) and
// Compile's errors. TrainStepRunner::Create (INVALID_ARGUMENT): a null step, a param count other
// than the step's, a param whose layout or dtype differs from the program's. Step
// (INVALID_ARGUMENT, nothing updated): a batch count other than batch_inputs().size(), and
// Execute's errors (a batch tensor of the wrong shape or dtype, ctx on another mesh);
// set_lr: a negative or non-finite lr.
#ifndef MESHFLOW_TRAIN_COMPILED_STEP_H_
#define MESHFLOW_TRAIN_COMPILED_STEP_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/compiler/program.h"
#include "meshflow/compiler/propagation.h"
#include "meshflow/optim/optimizer.h"

namespace meshflow {

struct TrainStepSpec {
  ValueId loss = -1;
  std::vector<ValueId> params;
  // Empty, or one per param (nullopt: the param's layout).
  std::vector<std::optional<Layout>> state_layouts = {};
  OptimizerOptions optimizer = AdamWOptions{};
  // Clip the gradients by their global norm before the update, as Optimizer::Step's
  // StepOptions::max_grad_norm (nullopt: no clipping). Every param must have one dtype.
  std::optional<double> max_grad_norm = std::nullopt;
};

// What one graph input of the step is: a batch tensor (index into TrainStepRunner::Step's batch),
// a param, a state tensor of a param, or a per-step scalar.
struct StepInput {
  enum class Kind { kBatch, kParam, kState, kScalar };
  Kind kind = Kind::kBatch;
  // kBatch: index into the batch; kParam / kState: the param's index; kScalar: which scalar (an
  // internal enumeration).
  int index = 0;
  int slot = 0;  // kState: which state tensor of the param; kScalar: 0 for f32, 1 for f64

};

struct CompiledTrainStep {
  Program program;
  OptimizerOptions optimizer;
  std::vector<ValueId> params;               // the graph params, spec order
  std::vector<std::vector<ValueId>> states;  // per param: its state inputs
  std::vector<ValueId> grads;                // per param: d_<param>
  std::vector<ValueId> batch_inputs;         // the other graph inputs, declaration order
  std::vector<StepInput> inputs;             // per graph input (program.graph.inputs() order)
  // Output positions (program.graph.outputs() order).
  int loss_output = -1;
  std::vector<int> param_outputs;               // per param
  std::vector<std::vector<int>> state_outputs;  // per param, per state tensor
  std::optional<double> max_grad_norm;          // TrainStepSpec::max_grad_norm
  int norm_output = -1;                         // the global gradient norm ("grad_norm"); -1 without clipping

  // The program (ProgramToText) followed by its peak live bytes per rank (ReportMemory).
  std::string ToText() const;
};

StatusOr<CompiledTrainStep> CompileTrainStep(Graph graph, const TrainStepSpec& spec,
                                             const PropagationOptions& options = {});

class TrainStepRunner {
 public:
  // `params`: this rank's part of every param, in spec order and in the annotated layouts. The
  // state starts at zero. Not collective.
  static StatusOr<TrainStepRunner> Create(std::shared_ptr<const CompiledTrainStep> step, std::vector<DTensor> params);

  // Collective: one training step on `batch` (the step's batch_inputs, in order). Returns the
  // loss before the update (the same double on every rank). On error nothing is updated.
  StatusOr<double> Step(std::span<const DTensor> batch, RankContext& ctx);

  Status set_lr(double lr);
  double lr() const { return lr_; }
  int64_t step_count() const { return step_count_; }
  // With max_grad_norm: the global gradient norm of the last Step (before clipping), as
  // Optimizer::last_grad_norm; nullopt before the first step or without clipping.
  std::optional<double> last_grad_norm() const { return last_grad_norm_; }
  const std::vector<DTensor>& params() const { return params_; }
  // Per param: its state tensors (the order of CompiledTrainStep::states).
  const std::vector<std::vector<DTensor>>& state() const { return state_; }
  // params and optimizer: this rank's local bytes; grads: the local bytes of the gradients in the
  // layouts propagation gave them (a Partial gradient counts at full size).
  OptimizerBytes BytesPerRank() const;
  const CompiledTrainStep& compiled() const { return *step_; }

 private:
  TrainStepRunner(std::shared_ptr<const CompiledTrainStep> step, std::vector<DTensor> params,
                  std::vector<std::vector<DTensor>> state, double lr)
      : step_(std::move(step)), params_(std::move(params)), state_(std::move(state)), lr_(lr) {}

  std::shared_ptr<const CompiledTrainStep> step_;
  std::vector<DTensor> params_;
  std::vector<std::vector<DTensor>> state_;
  double lr_ = 0;
  int64_t step_count_ = 0;
  std::optional<double> last_grad_norm_;
};

}  // namespace meshflow

#endif  // MESHFLOW_TRAIN_COMPILED_STEP_H_
