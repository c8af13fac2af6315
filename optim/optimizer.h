// Sharded optimizers (SGD with momentum, AdamW) whose state is DTensors with their own layout.
// Clipping is optim/clip.h, learning-rate schedules optim/schedule.h.
//
// Every parameter has a *state layout* (ParamSpec::state_layout; default: the param's layout).
// Its moments (and, for bf16 params, its f32 master weights) live in that layout. The parallel
// plans are only layouts; the planner picks the collectives:
//   DDP / TP  param R (or S on tp) over dp, state = param layout   grad -> state: all-reduce
//   ZeRO-1/2  param R over dp, state S(0) over dp                  grad -> state: reduce-scatter,
//                                                                  param <- state: all-gather
//   FSDP      param S(0) over dp, state = param layout             grad -> state: reduce-scatter
//
// One Step (collective: every rank of the mesh calls it with its parts of the same gradients):
//   1. every gradient is checked (count, global shape, mesh, dtype) before anything changes;
//   2. each gradient is converted to the compute dtype (f32; f64 for f64 params; a bf16 gradient
//      becomes f32 *before* it is reduced, so reductions run in f32) and redistributed to the
//      state layout with Redistribute (a Partial(sum) gradient is reduced there);
//   3. optionally (StepOptions::max_grad_norm) the redistributed gradients are clipped by their
//      exact global norm (see ClipGradNorm for the formula);
//   4. the update runs elementwise on the local shards of master, moments and gradient (they cover
//      the same box of the state layout);
//   5. the param is written back with Redistribute(master in the param dtype, param layout)
//      (all-gather for ZeRO-1; a local copy or nothing for DDP / FSDP).
// Replicated copies stay bit-identical across ranks: reductions run in rank order and the update
// is elementwise and identical on every rank.
//
// Master weights: a param whose dtype is not the compute dtype (bf16) gets an f32 master copy in
// the state layout, created from the param at Create. f32 and f64 params are their own master: the
// update works on the param's local shard (state layout == param layout) or on
// Redistribute(param, state layout) (e.g. a local slice for ZeRO-1) and writes back from it.
//
// Update formulas (g = gradient after redistribution and clipping, t = this param's step count
// after the increment, lr from set_lr / the options; torch.optim semantics, maximize=False;
// scalars are computed in double, elementwise work in the compute dtype):
//   SGD (torch.optim.SGD):   if weight_decay != 0:  g = g + weight_decay * p
//                            if momentum != 0:      b = (t == 1) ? g : momentum * b + (1 - dampening) * g
//                                                   g = (nesterov) ? g + momentum * b : b
//                            p = p - lr * g
//   AdamW (torch.optim.AdamW, amsgrad=False):
//                            p = p * (1 - lr * weight_decay)                (decoupled decay)
//                            m = beta1 * m + (1 - beta1) * g
//                            v = beta2 * v + (1 - beta2) * g * g
//                            p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// A null gradient means "absent" (torch's p.grad is None): that param, its state and its step
// count are left unchanged. Every rank must pass null for the same params (the step is collective).
//
//   // 4 thread ranks, mesh {4} named "dp"; w is replicated, its AdamW state sharded (ZeRO-1).
//   MF_ASSIGN_OR_RETURN(Layout zero, Layout::Create({8, 4}, mesh, {Shard{0}}));
//   std::vector<ParamSpec> specs = {{"w", &w, zero}};
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(specs, AdamWOptions{}, ctx));
//   std::vector<const DTensor*> grads = {&grad_w};   // e.g. Partial(sum) over dp
//   MF_RETURN_IF_ERROR(opt->Step(grads, ctx));       // reduce-scatter, update, all-gather
//
// Errors (INVALID_ARGUMENT, naming the value; nothing is created or updated):
//   Create: a null param, a duplicate name, a non-float param (i32, i64), a param with a Partial
//   placement or on another mesh than `ctx`, a state layout whose global shape or mesh differs
//   from its param's, a state layout with a Partial placement, bad options (a non-finite or
//   negative lr / weight decay / momentum, betas outside [0, 1), eps <= 0 or not finite, nesterov
//   without momentum or with dampening).
//   Step: gradient count != param count, a gradient whose global shape or mesh differs from its
//   param's, an integer gradient. Communicator errors during the redistributions are returned as
//   they are; only the write-back of step 5 can fail after the state changed (a broken world).
//   set_lr: non-finite or negative lr.
#ifndef MESHFLOW_OPTIM_OPTIMIZER_H_
#define MESHFLOW_OPTIM_OPTIMIZER_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"

namespace meshflow {

// One parameter of an optimizer. `param` is updated in place by Step and must outlive the
// optimizer. `state_layout` (same global shape and mesh as the param, no Partial placement) is
// where moments and master weights live; nullopt = the param's own layout.
struct ParamSpec {
  std::string name;
  DTensor* param = nullptr;
  std::optional<Layout> state_layout;
};

enum class MomentumKind { kClassic, kNesterov };

// torch.optim.SGD defaults, except that lr has a default here.
struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  MomentumKind momentum_kind = MomentumKind::kClassic;  // kNesterov needs momentum > 0, dampening 0
};

// torch.optim.AdamW defaults.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

using OptimizerOptions = std::variant<SgdOptions, AdamWOptions>;

struct StepOptions {
  // When set, the gradients (after redistribution to the state layouts) are scaled as by
  // ClipGradNorm(grads, *max_grad_norm) before the update. Must be >= 0 (checked with the grads).
  std::optional<double> max_grad_norm;
};

// Bytes held by this rank. params: the params' local buffers. grads: the gradients after
// conversion to the compute dtype and redistribution to the state layouts (what a Step holds at
// its peak; the caller's incoming gradients are not counted). optimizer: moments + master weights.
struct OptimizerBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
  friend bool operator==(const OptimizerBytes&, const OptimizerBytes&) = default;
};

// One state tensor of one param, named "<param>.<kind>" with kind one of exp_avg, exp_avg_sq
// (AdamW), momentum_buffer (SGD with momentum), master (bf16 params).
struct StateTensor {
  std::string name;
  DTensor* tensor = nullptr;
};

class Optimizer {
 public:
  // Collective (creating master weights may redistribute). See the banner for the errors.
  static StatusOr<std::unique_ptr<Optimizer>> Create(std::vector<ParamSpec> params, OptimizerOptions options,
                                                     RankContext& ctx);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Collective. grads[i] is the gradient of param i (any layout of its global shape on its mesh,
  // Partial included; f32, f64 or bf16) or null (absent: param i unchanged).
  Status Step(std::span<const DTensor* const> grads, RankContext& ctx, const StepOptions& step_options = {});

  // The learning rate of the next steps. Errors: non-finite or negative lr (nothing changes).
  Status set_lr(double lr);
  double lr() const;
  // Number of successful Step calls.
  int64_t step_count() const { return step_count_; }
  // Number of steps param i received a gradient in (the t of its bias correction).
  int64_t param_step(int i) const;
  // The norm of the gradients of the last Step with StepOptions::max_grad_norm, before clipping.
  std::optional<double> last_grad_norm() const { return last_grad_norm_; }

  int num_params() const;
  const std::string& param_name(int i) const;
  const Layout& state_layout(int i) const;
  DType compute_dtype(int i) const;
  const OptimizerOptions& options() const { return options_; }

  OptimizerBytes BytesPerRank() const;
  // Every state tensor, param by param (for checkpointing). The pointers stay valid for the
  // optimizer's lifetime; writing through them changes the state the next Step uses.
  std::vector<StateTensor> StateTensors();
  // Restores the step counts of a checkpointed optimizer (with the state tensors written through
  // StateTensors()): step_count() and each param_step(i). Errors (INVALID_ARGUMENT, nothing
  // changes): param_steps.size() != num_params(), a negative count, a param step > step_count.
  Status RestoreStepCounts(int64_t step_count, std::span<const int64_t> param_steps);

 private:
  struct Slot;
  Optimizer(OptimizerOptions options, std::vector<Slot> slots);
  Status UpdateSlot(Slot& slot, DTensor& grad, RankContext& ctx);
  Status UpdateOnDevice(Slot& slot, DTensor& work, const DTensor& grad, int64_t t, RankContext& ctx);

  OptimizerOptions options_;
  std::vector<Slot> slots_;
  int64_t step_count_ = 0;
  std::optional<double> last_grad_norm_;
};

// Creates an Optimizer with SGD / AdamW options (same as Optimizer::Create).
struct Sgd {
  static StatusOr<std::unique_ptr<Optimizer>> Create(std::vector<ParamSpec> params, SgdOptions options,
                                                     RankContext& ctx);
};
struct AdamW {
  static StatusOr<std::unique_ptr<Optimizer>> Create(std::vector<ParamSpec> params, AdamWOptions options,
                                                     RankContext& ctx);
};

// `x` in dtype `to` (elementwise, on the local shard; bf16 rounds to nearest even): what Step does
// to a gradient before reducing it (optim/grad_reducer.h does the same). `x` itself when the dtype
// is already `to`.
StatusOr<DTensor> ConvertDTensor(DTensor x, DType to);

// Checks options the way Create does (also used by set_lr and tests).
Status ValidateOptions(const OptimizerOptions& options);

}  // namespace meshflow

#endif  // MESHFLOW_OPTIM_OPTIMIZER_H_
