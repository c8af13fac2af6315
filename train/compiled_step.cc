#include "meshflow/train/compiled_step.h"

#include <cmath>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <variant>

#include "meshflow/base/strings.h"
#include "meshflow/compiler/graph_autodiff.h"
#include "meshflow/ops/op_spec.h"

namespace meshflow {
namespace {

// The per-step scalars (StepInput::index of a kScalar input).
enum ScalarKind : int {
  kAdamDecay = 0,     // 1 - lr * weight_decay
  kAdamStepSize = 1,  // lr / (1 - beta1^t)
  kAdamBc2Sqrt = 2,   // sqrt(1 - beta2^t)
  kSgdLr = 3,
  kSgdBufDecay = 4,   // 0 at t = 1, else momentum
  kSgdGradScale = 5,  // 1 at t = 1, else 1 - dampening
  kClipMaxNorm = 6,   // TrainStepSpec::max_grad_norm
};

const char* ScalarName(int kind) {
  switch (kind) {
    case kAdamDecay: return "adamw.decay";
    case kAdamStepSize: return "adamw.step_size";
    case kAdamBc2Sqrt: return "adamw.bc2_sqrt";
    case kSgdLr: return "sgd.lr";
    case kSgdBufDecay: return "sgd.buf_decay";
    case kClipMaxNorm: return "clip.max_norm";
    default: return "sgd.grad_scale";
  }
}

double ScalarValue(int kind, const CompiledTrainStep& step, double lr, int64_t t) {
  if (kind == kClipMaxNorm) return step.max_grad_norm.value_or(0.0);
  const OptimizerOptions& options = step.optimizer;
  if (const AdamWOptions* a = std::get_if<AdamWOptions>(&options)) {
    switch (kind) {
      case kAdamDecay: return 1 - lr * a->weight_decay;
      case kAdamStepSize: return lr / (1 - std::pow(a->beta1, static_cast<double>(t)));
      default: return std::sqrt(1 - std::pow(a->beta2, static_cast<double>(t)));
    }
  }
  const SgdOptions& s = std::get<SgdOptions>(options);
  switch (kind) {
    case kSgdLr: return lr;
    case kSgdBufDecay: return t == 1 ? 0.0 : s.momentum;
    default: return t == 1 ? 1.0 : 1 - s.dampening;
  }
}

std::string Name(const Graph& g, ValueId v) { return "'" + g.value(v).name + "'"; }

// Appends the update ops of one param; returns its new value and new state values.
struct Update {
  ValueId param;
  std::vector<ValueId> state;
};

class UpdateBuilder {
 public:
  UpdateBuilder(Graph& g, const OptimizerOptions& options) : g_(g), options_(options) {}

  StatusOr<ValueId> Scalar(int kind, DType dtype) {
    const int slot = dtype == DType::kF64 ? 1 : 0;
    for (const auto& [k, s, v] : scalars_) {
      if (k == kind && s == slot) return v;
    }
    const std::string name = std::string(ScalarName(kind)) + (slot == 1 ? "_f64" : "");
    MF_ASSIGN_OR_RETURN(ValueId v, g_.Input(name, {}, dtype));
    MF_RETURN_IF_ERROR(g_.Annotate(v, Placements(static_cast<size_t>(g_.mesh().ndim()), Replicate{})));
    scalars_.push_back({kind, slot, v});
    return v;
  }
  // The layout of the update's values (the state layout of the param being updated).
  void set_layout(Layout layout) { layout_ = std::move(layout); }
  StatusOr<ValueId> Pinned(const OpSpec& op, std::vector<ValueId> operands, std::string name = "") {
    MF_ASSIGN_OR_RETURN(ValueId v, g_.Apply(op, std::move(operands), std::move(name)));
    MF_RETURN_IF_ERROR(g_.Annotate(v, *layout_));
    return v;
  }
  StatusOr<ValueId> Bin(BinaryOp op, ValueId a, ValueId b, std::string name = "") {
    return Pinned(OpSpec::Binary(op), {a, b}, std::move(name));
  }
  StatusOr<ValueId> Un(UnaryOp op, ValueId x, double alpha = 1.0) { return Pinned(OpSpec::Unary(op, alpha), {x}); }

  // The formulas of optim/optimizer.h, op for op in the order of its elementwise loops.
  StatusOr<Update> AdamW(ValueId p, ValueId g, ValueId m, ValueId v, const std::string& name) {
    const AdamWOptions& o = std::get<AdamWOptions>(options_);
    const DType t = g_.value(p).dtype;
    MF_ASSIGN_OR_RETURN(ValueId decay, Scalar(kAdamDecay, t));
    MF_ASSIGN_OR_RETURN(ValueId step_size, Scalar(kAdamStepSize, t));
    MF_ASSIGN_OR_RETURN(ValueId bc2_sqrt, Scalar(kAdamBc2Sqrt, t));
    MF_ASSIGN_OR_RETURN(ValueId pd, Bin(BinaryOp::kMul, p, decay));                   // p * decay
    MF_ASSIGN_OR_RETURN(ValueId m1, Un(UnaryOp::kScale, m, o.beta1));                 // beta1 * m
    MF_ASSIGN_OR_RETURN(ValueId g1, Un(UnaryOp::kScale, g, 1 - o.beta1));             // (1 - beta1) * g
    MF_ASSIGN_OR_RETURN(ValueId m_new, Bin(BinaryOp::kAdd, m1, g1, name + ".exp_avg.new"));
    MF_ASSIGN_OR_RETURN(ValueId v1, Un(UnaryOp::kScale, v, o.beta2));                 // beta2 * v
    MF_ASSIGN_OR_RETURN(ValueId g2, Un(UnaryOp::kScale, g, 1 - o.beta2));             // (1 - beta2) * g
    MF_ASSIGN_OR_RETURN(ValueId g2g, Bin(BinaryOp::kMul, g2, g));                     // ... * g
    MF_ASSIGN_OR_RETURN(ValueId v_new, Bin(BinaryOp::kAdd, v1, g2g, name + ".exp_avg_sq.new"));
    MF_ASSIGN_OR_RETURN(ValueId sq, Un(UnaryOp::kSqrt, v_new));
    MF_ASSIGN_OR_RETURN(ValueId sq_bc, Bin(BinaryOp::kDiv, sq, bc2_sqrt));           // sqrt(v) / sqrt(bc2)
    MF_ASSIGN_OR_RETURN(ValueId denom, Un(UnaryOp::kAddScalar, sq_bc, o.eps));        // ... + eps
    MF_ASSIGN_OR_RETURN(ValueId ratio, Bin(BinaryOp::kDiv, m_new, denom));            // m / denom
    MF_ASSIGN_OR_RETURN(ValueId upd, Bin(BinaryOp::kMul, step_size, ratio));          // step_size * (...)
    MF_ASSIGN_OR_RETURN(ValueId p_new, g_.Apply(OpSpec::Binary(BinaryOp::kSub), {pd, upd}, name + ".new"));
    return Update{p_new, {m_new, v_new}};
  }

  StatusOr<Update> Sgd(ValueId p, ValueId g, std::optional<ValueId> buf, const std::string& name) {
    const SgdOptions& o = std::get<SgdOptions>(options_);
    const DType t = g_.value(p).dtype;
    ValueId d = g;
    if (o.weight_decay != 0) {
      MF_ASSIGN_OR_RETURN(ValueId wp, Un(UnaryOp::kScale, p, o.weight_decay));       // wd * p
      MF_ASSIGN_OR_RETURN(d, Bin(BinaryOp::kAdd, g, wp));                             // g + wd * p
    }
    std::vector<ValueId> state;
    if (buf.has_value()) {
      MF_ASSIGN_OR_RETURN(ValueId bd, Scalar(kSgdBufDecay, t));
      MF_ASSIGN_OR_RETURN(ValueId gs, Scalar(kSgdGradScale, t));
      MF_ASSIGN_OR_RETURN(ValueId b1, Bin(BinaryOp::kMul, bd, *buf));                 // momentum * buf
      MF_ASSIGN_OR_RETURN(ValueId d1, Bin(BinaryOp::kMul, gs, d));                    // (1 - dampening) * d
      MF_ASSIGN_OR_RETURN(ValueId b_new,
                          Bin(BinaryOp::kAdd, b1, d1, name + ".momentum_buffer.new"));
      state.push_back(b_new);
      if (o.momentum_kind == MomentumKind::kNesterov) {
        MF_ASSIGN_OR_RETURN(ValueId mb, Un(UnaryOp::kScale, b_new, o.momentum));      // momentum * buf
        MF_ASSIGN_OR_RETURN(d, Bin(BinaryOp::kAdd, d, mb));
      } else {
        d = b_new;
      }
    }
    MF_ASSIGN_OR_RETURN(ValueId lr, Scalar(kSgdLr, t));
    MF_ASSIGN_OR_RETURN(ValueId step, Bin(BinaryOp::kMul, lr, d));                    // lr * d
    MF_ASSIGN_OR_RETURN(ValueId p_new, g_.Apply(OpSpec::Binary(BinaryOp::kSub), {p, step}, name + ".new"));
    return Update{p_new, std::move(state)};
  }

  // Clipping by the global norm, as Optimizer::Step's max_grad_norm: norm = sqrt(sum over params
  // of sum(g * g)), coef = max_norm / (norm + 1e-6), each gradient scaled by min(coef, 1) (a
  // NaN coef leaves it unscaled, as there). The sums run in the params' dtype (the eager
  // optimizer sums in double), so the clipped step matches it to rounding, not bit for bit.
  // Each gradient's scaling runs on its state layout (set per param with set_layout).
  struct Clip {
    ValueId norm;
    ValueId coef;  // min(coef, 1)
  };
  StatusOr<Clip> ClipCoefficient(std::span<const ValueId> grads) {
    const DType t = g_.value(grads[0]).dtype;
    std::optional<ValueId> total;
    for (ValueId gr : grads) {
      MF_ASSIGN_OR_RETURN(ValueId sq, g_.Apply(OpSpec::Binary(BinaryOp::kMul), {gr, gr}));
      MF_ASSIGN_OR_RETURN(ValueId ss, g_.Apply(OpSpec::Reduce(ReduceKind::kSum, {}, false), {sq}));
      if (total) {
        MF_ASSIGN_OR_RETURN(ValueId sum, g_.Apply(OpSpec::Binary(BinaryOp::kAdd), {*total, ss}));
        total = sum;
      } else {
        total = ss;
      }
    }
    MF_ASSIGN_OR_RETURN(ValueId norm, g_.Apply(OpSpec::Unary(UnaryOp::kSqrt), {*total}, "grad_norm"));
    MF_ASSIGN_OR_RETURN(ValueId max_norm, Scalar(kClipMaxNorm, t));
    MF_ASSIGN_OR_RETURN(ValueId denom, g_.Apply(OpSpec::Unary(UnaryOp::kAddScalar, 1e-6), {norm}));
    MF_ASSIGN_OR_RETURN(ValueId coef, g_.Apply(OpSpec::Binary(BinaryOp::kDiv), {max_norm, denom}));
    MF_ASSIGN_OR_RETURN(ValueId one, g_.Apply(OpSpec::Unary(UnaryOp::kFill, 1.0), {coef}));
    MF_ASSIGN_OR_RETURN(ValueId below, g_.Apply(OpSpec::Compare(CompareOp::kLt), {coef, one}));
    MF_ASSIGN_OR_RETURN(ValueId c, g_.Apply(OpSpec::Where(), {below, coef, one}, "clip_coef"));
    return Clip{norm, c};
  }
  StatusOr<ValueId> Clipped(ValueId grad, ValueId coef, const std::string& name) {
    return Bin(BinaryOp::kMul, grad, coef, name + ".clipped_grad");
  }

  // kind, slot, value of every scalar input made so far.
  struct ScalarInput {
    int kind;
    int slot;
    ValueId value;
  };
  const std::vector<ScalarInput>& scalars() const { return scalars_; }

 private:
  Graph& g_;
  const OptimizerOptions& options_;
  std::optional<Layout> layout_;
  std::vector<ScalarInput> scalars_;
};

std::vector<std::string> StateNames(const OptimizerOptions& options) {
  if (std::holds_alternative<AdamWOptions>(options)) return {"exp_avg", "exp_avg_sq"};
  return std::get<SgdOptions>(options).momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                                      : std::vector<std::string>{};
}

int64_t LocalBytes(const DTensor& d) { return d.local().NumElements() * DTypeSize(d.dtype()); }

// The checks of one trained param (spec.params[i]) of CompileTrainStep; returns its optimizer
// state layout (the param's own, or spec.state_layouts[i]).
StatusOr<Layout> CheckParam(const Graph& graph, const TrainStepSpec& spec, size_t i, const std::vector<bool>& reaches,
                            std::set<ValueId>& seen, const std::string& what) {
  const auto n_values = static_cast<ValueId>(graph.values().size());
  const ValueId p = spec.params[i];
  if (p < 0 || p >= n_values || graph.value(p).kind != ValueKind::kParam) {
    return InvalidArgumentError(what + "params[" + std::to_string(i) + "] (id " + std::to_string(p) +
                                ") is not a param of the graph");
  }
  if (!seen.insert(p).second) return InvalidArgumentError(what + "param " + Name(graph, p) + " is listed twice");
  const std::optional<Layout>& ann = graph.annotation(p);
  if (!ann.has_value()) {
    return InvalidArgumentError(what + "param " + Name(graph, p) +
                                " has no layout annotation (annotate every trained param: its layout is the plan)");
  }
  if (ann->HasPartial()) {
    return InvalidArgumentError(what + "param " + Name(graph, p) + " is annotated " + ann->PlacementsString() +
                                "; a param cannot be Partial");
  }
  if (graph.value(p).dtype == DType::kBF16) {
    return UnimplementedError(what + "param " + Name(graph, p) +
                              " is bf16: master weights are not in the compiled step yet (use optim/optimizer.h)");
  }
  if (spec.max_grad_norm.has_value() && graph.value(p).dtype != graph.value(spec.params[0]).dtype) {
    return InvalidArgumentError(what + "gradient clipping needs every param in one dtype; param " + Name(graph, p) +
                                " is " + std::string(DTypeName(graph.value(p).dtype)) + ", param " +
                                Name(graph, spec.params[0]) + " is " +
                                std::string(DTypeName(graph.value(spec.params[0]).dtype)));
  }
  if (!reaches[static_cast<size_t>(p)]) {
    return InvalidArgumentError(what + "the loss " + Name(graph, spec.loss) + " does not depend on param " +
                                Name(graph, p) + " (it would get no gradient; leave it out of params)");
  }
  if (spec.state_layouts.empty() || !spec.state_layouts[i].has_value()) return *ann;
  const Layout& s = *spec.state_layouts[i];
  if (s.global_shape() != ann->global_shape() || !(s.mesh() == ann->mesh())) {
    return InvalidArgumentError(what + "state layout " + s.ToString() + " of param " + Name(graph, p) +
                                " does not match the param's " + ann->ToString());
  }
  if (s.HasPartial()) {
    return InvalidArgumentError(what + "state layout " + s.PlacementsString() + " of param " + Name(graph, p) +
                                " has a Partial placement");
  }
  return s;
}

// The checks of CompileTrainStep before it changes the graph: the spec's fields, every param
// (CheckParam) and the loss's annotation. Returns the state layout of every param.
StatusOr<std::vector<Layout>> CheckTrainStepSpec(const Graph& graph, const TrainStepSpec& spec,
                                                 const std::string& what) {
  if (spec.params.empty()) return InvalidArgumentError(what + "no params to train");
  MF_RETURN_IF_ERROR(ValidateOptions(spec.optimizer).WithContext(what + "optimizer"));
  const auto n_values = static_cast<ValueId>(graph.values().size());
  if (spec.loss < 0 || spec.loss >= n_values) {
    return InvalidArgumentError(what + "loss id " + std::to_string(spec.loss) + " is not a value of the graph");
  }
  if (!spec.state_layouts.empty() && spec.state_layouts.size() != spec.params.size()) {
    return InvalidArgumentError(what + std::to_string(spec.state_layouts.size()) + " state layouts for " +
                                std::to_string(spec.params.size()) + " params (give none or one per param)");
  }
  if (spec.max_grad_norm.has_value() && !(*spec.max_grad_norm >= 0 && std::isfinite(*spec.max_grad_norm))) {
    return InvalidArgumentError(what + "max_grad_norm " + DoubleString(*spec.max_grad_norm) +
                                " must be >= 0 and finite");
  }
  const ValueId loss_root[] = {spec.loss};
  const std::vector<bool> reaches = graph.DependedOnBy(loss_root);
  std::set<ValueId> seen;
  std::vector<Layout> state_layouts;
  for (size_t i = 0; i < spec.params.size(); ++i) {
    MF_ASSIGN_OR_RETURN(Layout state, CheckParam(graph, spec, i, reaches, seen, what));
    state_layouts.push_back(std::move(state));
  }
  if (const std::optional<Layout>& la = graph.annotation(spec.loss); la.has_value() && !la->IsFullyReplicated()) {
    return InvalidArgumentError(what + "the loss " + Name(graph, spec.loss) + " is annotated " +
                                la->PlacementsString() + "; the step returns a replicated loss");
  }
  return state_layouts;
}

// The optimizer part of the step graph: per param, its state inputs, its (clipped) gradient's
// update, in spec.params order; the global-norm clipping first when the spec clips.
struct StepUpdates {
  std::optional<UpdateBuilder::Clip> clip;
  std::vector<std::vector<ValueId>> states;  // per param: its state inputs
  std::vector<Update> updates;
};

StatusOr<StepUpdates> AppendUpdates(Graph& graph, const TrainStepSpec& spec, const std::vector<Layout>& state_layouts,
                                    const std::vector<ValueId>& grads, UpdateBuilder& b, const std::string& what) {
  const std::vector<std::string> state_names = StateNames(spec.optimizer);
  StepUpdates out;
  if (spec.max_grad_norm.has_value()) {
    StatusOr<UpdateBuilder::Clip> c = b.ClipCoefficient(grads);
    if (!c.ok()) return c.status().WithContext(what + "gradient clipping");
    out.clip = *c;
  }
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const ValueId p = spec.params[i];
    const Value pv = graph.value(p);
    std::vector<ValueId> s_in;
    for (const std::string& sn : state_names) {
      StatusOr<ValueId> s = graph.Input(pv.name + "." + sn, pv.shape, pv.dtype);
      if (!s.ok()) return s.status().WithContext(what + "state of param " + Name(graph, p));
      MF_RETURN_IF_ERROR(graph.Annotate(*s, state_layouts[i]));
      s_in.push_back(*s);
    }
    b.set_layout(state_layouts[i]);
    ValueId g = grads[i];
    if (out.clip.has_value()) {
      StatusOr<ValueId> c = b.Clipped(g, out.clip->coef, pv.name);
      if (!c.ok()) return c.status().WithContext(what + "clipping the gradient of param " + Name(graph, p));
      g = *c;
    }
    StatusOr<Update> u = std::holds_alternative<AdamWOptions>(spec.optimizer)
                             ? b.AdamW(p, g, s_in[0], s_in[1], pv.name)
                             : b.Sgd(p, g, s_in.empty() ? std::nullopt : std::optional<ValueId>(s_in[0]), pv.name);
    if (!u.ok()) return u.status().WithContext(what + "update of param " + Name(graph, p));
    out.states.push_back(std::move(s_in));
    out.updates.push_back(std::move(*u));
  }
  return out;
}

// What each graph input of the step is: a param, a state tensor, a scalar (from `scalars`), else
// a batch tensor (appended to batch_inputs in graph input order).
std::vector<StepInput> InputRoles(const Graph& graph, const TrainStepSpec& spec, const StepUpdates& u,
                                  const std::vector<UpdateBuilder::ScalarInput>& scalars,
                                  std::vector<ValueId>& batch_inputs) {
  std::vector<std::optional<StepInput>> role(graph.values().size());
  for (size_t i = 0; i < spec.params.size(); ++i) {
    role[static_cast<size_t>(spec.params[i])] = StepInput{StepInput::Kind::kParam, static_cast<int>(i), 0};
    for (size_t k = 0; k < u.states[i].size(); ++k) {
      role[static_cast<size_t>(u.states[i][k])] =
          StepInput{StepInput::Kind::kState, static_cast<int>(i), static_cast<int>(k)};
    }
  }
  for (const auto& s : scalars) role[static_cast<size_t>(s.value)] = StepInput{StepInput::Kind::kScalar, s.kind, s.slot};
  std::vector<StepInput> inputs;
  for (ValueId v : graph.inputs()) {
    if (role[static_cast<size_t>(v)].has_value()) {
      inputs.push_back(*role[static_cast<size_t>(v)]);
    } else {
      inputs.push_back({StepInput::Kind::kBatch, static_cast<int>(batch_inputs.size()), 0});
      batch_inputs.push_back(v);
    }
  }
  return inputs;
}

// The step's outputs (indices into graph.outputs()): the loss, then each param's new value and new
// state in their input layouts, then (clipping) the global gradient norm.
struct StepOutputs {
  int loss = -1;
  std::vector<int> params;
  std::vector<std::vector<int>> states;
  int norm = -1;
};

StatusOr<StepOutputs> MarkStepOutputs(Graph& graph, const TrainStepSpec& spec, const std::vector<Layout>& state_layouts,
                                      const StepUpdates& u) {
  const Placements replicated(static_cast<size_t>(graph.mesh().ndim()), Replicate{});
  if (!graph.annotation(spec.loss).has_value()) MF_RETURN_IF_ERROR(graph.Annotate(spec.loss, replicated));
  auto output_index = [&](ValueId v) -> StatusOr<int> {
    for (size_t k = 0; k < graph.outputs().size(); ++k) {
      if (graph.outputs()[k] == v) return static_cast<int>(k);
    }
    MF_RETURN_IF_ERROR(graph.MarkOutput(v));
    return static_cast<int>(graph.outputs().size()) - 1;
  };
  StepOutputs out;
  MF_ASSIGN_OR_RETURN(out.loss, output_index(spec.loss));
  for (size_t i = 0; i < u.updates.size(); ++i) {
    MF_RETURN_IF_ERROR(graph.Annotate(u.updates[i].param, *graph.annotation(spec.params[i])));
    MF_ASSIGN_OR_RETURN(int po, output_index(u.updates[i].param));
    out.params.push_back(po);
    std::vector<int> so;
    for (ValueId s : u.updates[i].state) {
      MF_RETURN_IF_ERROR(graph.Annotate(s, state_layouts[i]));
      MF_ASSIGN_OR_RETURN(int k, output_index(s));
      so.push_back(k);
    }
    out.states.push_back(std::move(so));
  }
  if (u.clip.has_value()) {
    MF_RETURN_IF_ERROR(graph.Annotate(u.clip->norm, replicated));
    MF_ASSIGN_OR_RETURN(out.norm, output_index(u.clip->norm));
  }
  return out;
}


}  // namespace

StatusOr<CompiledTrainStep> CompileTrainStep(Graph graph, const TrainStepSpec& spec, const PropagationOptions& options) {
  const std::string what = "compile train step: ";
  MF_ASSIGN_OR_RETURN(const std::vector<Layout> state_layouts, CheckTrainStepSpec(graph, spec, what));
  StatusOr<std::vector<ValueId>> appended = AppendBackward(graph, spec.loss, spec.params);
  if (!appended.ok()) return appended.status().WithContext(what + "backward");
  const std::vector<ValueId> grads = std::move(*appended);
  UpdateBuilder b(graph, spec.optimizer);
  MF_ASSIGN_OR_RETURN(StepUpdates u, AppendUpdates(graph, spec, state_layouts, grads, b, what));
  std::vector<ValueId> batch_inputs;
  std::vector<StepInput> inputs = InputRoles(graph, spec, u, b.scalars(), batch_inputs);
  MF_ASSIGN_OR_RETURN(StepOutputs out, MarkStepOutputs(graph, spec, state_layouts, u));
  StatusOr<Program> program = Compile(graph, options);
  if (!program.ok()) return program.status().WithContext(what + "compile");
  return CompiledTrainStep{std::move(*program),     spec.optimizer,          spec.params,       std::move(u.states),
                           grads,                   std::move(batch_inputs), std::move(inputs), out.loss,
                           std::move(out.params),   std::move(out.states),   spec.max_grad_norm, out.norm};
}

std::string CompiledTrainStep::ToText() const { return ProgramToText(program) + MemoryReportToText(ReportMemory(program)); }

StatusOr<TrainStepRunner> TrainStepRunner::Create(std::shared_ptr<const CompiledTrainStep> step,
                                                  std::vector<DTensor> params) {
  if (step == nullptr) return InvalidArgumentError("train step runner: null compiled step");
  const Graph& g = step->program.graph;
  if (params.size() != step->params.size()) {
    return InvalidArgumentError("train step runner: " + std::to_string(params.size()) + " params, the step trains " +
                                std::to_string(step->params.size()));
  }
  // The program's layout of each param and state tensor.
  std::vector<const Layout*> param_layout(params.size(), nullptr);
  std::vector<std::vector<const Layout*>> state_layout(params.size());
  for (size_t i = 0; i < params.size(); ++i) state_layout[i].assign(step->states[i].size(), nullptr);
  for (size_t k = 0; k < step->inputs.size(); ++k) {
    const StepInput& in = step->inputs[k];
    const Layout* l = &step->program.input_layouts[k];
    if (in.kind == StepInput::Kind::kParam) param_layout[static_cast<size_t>(in.index)] = l;
    if (in.kind == StepInput::Kind::kState) state_layout[static_cast<size_t>(in.index)][static_cast<size_t>(in.slot)] = l;
  }
  std::vector<std::vector<DTensor>> state;
  for (size_t i = 0; i < params.size(); ++i) {
    const ValueId p = step->params[i];
    const Layout& want = *param_layout[i];
    if (!(params[i].layout() == want) || params[i].dtype() != g.value(p).dtype) {
      return InvalidArgumentError("train step runner: param '" + g.value(p).name + "' is " +
                                  std::string(DTypeName(params[i].dtype())) + " " + params[i].layout().ToString() +
                                  ", the step wants " + std::string(DTypeName(g.value(p).dtype)) + " " + want.ToString());
    }
    std::vector<DTensor> s;
    for (size_t k = 0; k < step->states[i].size(); ++k) {
      const Layout& sl = *state_layout[i][k];
      MF_ASSIGN_OR_RETURN(Box box, sl.LocalBox(params[i].rank()));
      const DType dtype = g.value(step->states[i][k]).dtype;
      MF_ASSIGN_OR_RETURN(DTensor z, DTensor::FromLocal(Tensor::Zeros(dtype, box.shape), sl, params[i].rank()));
      s.push_back(std::move(z));
    }
    state.push_back(std::move(s));
  }
  const double lr = std::visit([](const auto& o) { return o.lr; }, step->optimizer);
  return TrainStepRunner(std::move(step), std::move(params), std::move(state), lr);
}

Status TrainStepRunner::set_lr(double lr) {
  if (!std::isfinite(lr) || lr < 0) {
    return InvalidArgumentError("train step runner: lr " + std::to_string(lr) + " must be finite and >= 0");
  }
  lr_ = lr;
  return Status::Ok();
}

StatusOr<double> TrainStepRunner::Step(std::span<const DTensor> batch, RankContext& ctx) {
  const CompiledTrainStep& s = *step_;
  const Graph& g = s.program.graph;
  if (batch.size() != s.batch_inputs.size()) {
    std::string names;
    for (ValueId v : s.batch_inputs) names += (names.empty() ? "" : ", ") + g.value(v).name;
    return InvalidArgumentError("train step: " + std::to_string(batch.size()) + " batch tensors, the step takes " +
                                std::to_string(s.batch_inputs.size()) + " (" + names + ")");
  }
  const int64_t t = step_count_ + 1;
  const int rank = ctx.world_rank();
  std::vector<DTensor> scalars;
  scalars.reserve(s.inputs.size());
  std::vector<const DTensor*> inputs;
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    const StepInput& in = s.inputs[k];
    switch (in.kind) {
      case StepInput::Kind::kBatch: inputs.push_back(&batch[static_cast<size_t>(in.index)]); break;
      case StepInput::Kind::kParam: inputs.push_back(&params_[static_cast<size_t>(in.index)]); break;
      case StepInput::Kind::kState:
        inputs.push_back(&state_[static_cast<size_t>(in.index)][static_cast<size_t>(in.slot)]);
        break;
      case StepInput::Kind::kScalar: {
        const DType dtype = in.slot == 1 ? DType::kF64 : DType::kF32;
        Tensor v = Tensor::Zeros(dtype, {});
        v.SetFromDouble(0, ScalarValue(in.index, s, lr_, t));
        MF_ASSIGN_OR_RETURN(DTensor d, DTensor::FromLocal(std::move(v), s.program.input_layouts[k], rank));
        scalars.push_back(std::move(d));  // reserved: pointers stay valid
        inputs.push_back(&scalars.back());
        break;
      }
    }
  }
  MF_ASSIGN_OR_RETURN(std::vector<DTensor> outs, ExecuteBorrowed(s.program, ctx, inputs));
  const double loss = outs[static_cast<size_t>(s.loss_output)].local().GetAsDouble(0);
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i] = std::move(outs[static_cast<size_t>(s.param_outputs[i])]);
    for (size_t k = 0; k < state_[i].size(); ++k) state_[i][k] = std::move(outs[static_cast<size_t>(s.state_outputs[i][k])]);
  }
  if (s.norm_output >= 0) last_grad_norm_ = outs[static_cast<size_t>(s.norm_output)].local().GetAsDouble(0);
  ++step_count_;
  return loss;
}

OptimizerBytes TrainStepRunner::BytesPerRank() const {
  OptimizerBytes b;
  const Program& p = step_->program;
  const int rank = params_.empty() ? 0 : params_[0].rank();
  for (size_t i = 0; i < params_.size(); ++i) {
    b.params += LocalBytes(params_[i]);
    for (const DTensor& s : state_[i]) b.optimizer += LocalBytes(s);
    const ValueId d = step_->grads[i];
    StatusOr<Box> box = p.propagation.values[static_cast<size_t>(d)].LocalBox(rank);
    if (box.ok()) b.grads += box->NumElements() * DTypeSize(p.graph.value(d).dtype);
  }
  return b;
}

}  // namespace meshflow
