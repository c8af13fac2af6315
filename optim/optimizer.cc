#include "meshflow/optim/optimizer.h"

#include "meshflow/optim/clip.h"
#include "meshflow/optim/device_math.h"
#include "meshflow/runtime/device_copy.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "meshflow/base/strings.h"
#include "meshflow/optim/checks.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"

namespace meshflow {

namespace {

std::string Num(double v) { return DoubleString(v); }

using optim_internal::CheckNonNegative;

Status CheckBeta(const char* what, double v) {
  if (!(v >= 0 && v < 1)) return InvalidArgumentError(std::string(what) + " " + Num(v) + " must be in [0, 1)");
  return Status::Ok();
}

double LrOf(const OptimizerOptions& o) {
  return std::visit([](const auto& x) { return x.lr; }, o);
}

// The dtype the update computes in: f64 for f64 params, f32 otherwise (bf16 params get an f32
// master).
DType ComputeDTypeFor(DType param) { return param == DType::kF64 ? DType::kF64 : DType::kF32; }

// `t` converted to `to` (a copy; bf16 rounds to nearest even).
Tensor Convert(const Tensor& t, DType to) {
  if (t.dtype() == to) return t;
  Tensor out = Tensor::Uninitialized(to, t.shape());
  VisitDType(t.dtype(), [&](auto src_tag) {
    using S = decltype(src_tag);
    VisitDType(to, [&](auto dst_tag) {
      using D = decltype(dst_tag);
      std::span<const S> src = t.data<S>();
      std::span<D> dst = out.data<D>();
      for (size_t i = 0; i < src.size(); ++i) {
        if constexpr (std::is_same_v<S, BFloat16>) {
          dst[i] = static_cast<D>(static_cast<float>(src[i]));
        } else if constexpr (std::is_same_v<D, BFloat16>) {
          dst[i] = BFloat16(static_cast<float>(src[i]));
        } else {
          dst[i] = static_cast<D>(src[i]);
        }
      }
    });
  });
  return out;
}


// Placements with every Partial replaced by Replicate.

}  // namespace

StatusOr<DTensor> ConvertDTensor(DTensor x, DType to) {
  if (x.dtype() == to) return x;
  if (!x.local().is_host()) {
    return UnimplementedError("converting a " + std::string(DTypeName(x.dtype())) + " tensor to " +
                              std::string(DTypeName(to)) + " on " + x.local().device().ToString() +
                              ": no device cast kernel yet (bf16 params and gradients train on the host only)");
  }
  return DTensor::FromLocal(Convert(x.local(), to), x.layout(), x.rank());
}

Status ValidateOptions(const OptimizerOptions& options) {
  return std::visit(
      [](const auto& o) -> Status {
        using O = std::decay_t<decltype(o)>;
        MF_RETURN_IF_ERROR(CheckNonNegative("lr", o.lr));
        MF_RETURN_IF_ERROR(CheckNonNegative("weight_decay", o.weight_decay));
        if constexpr (std::is_same_v<O, SgdOptions>) {
          MF_RETURN_IF_ERROR(CheckNonNegative("momentum", o.momentum));
          if (!std::isfinite(o.dampening)) {
            return InvalidArgumentError("dampening " + Num(o.dampening) + " must be finite");
          }
          if (o.momentum_kind == MomentumKind::kNesterov && (o.momentum <= 0 || o.dampening != 0)) {
            return InvalidArgumentError("nesterov momentum requires momentum > 0 and dampening 0, got momentum " +
                                        Num(o.momentum) + " and dampening " + Num(o.dampening));
          }
        } else {
          MF_RETURN_IF_ERROR(CheckBeta("beta1", o.beta1));
          MF_RETURN_IF_ERROR(CheckBeta("beta2", o.beta2));
          if (!(std::isfinite(o.eps) && o.eps > 0)) {
            return InvalidArgumentError("eps " + Num(o.eps) + " must be finite and > 0");
          }
        }
        return Status::Ok();
      },
      options);
}

struct Optimizer::Slot {
  explicit Slot(Layout layout) : state_layout(std::move(layout)) {}
  std::string name;
  DTensor* param = nullptr;
  Layout state_layout;
  DType compute = DType::kF32;
  std::optional<DTensor> master;  // bf16 params only
  // AdamW: exp_avg, exp_avg_sq; SGD with momentum: momentum_buffer; SGD without: none.
  std::vector<std::pair<std::string, DTensor>> moments;
  int64_t steps = 0;
};

Optimizer::Optimizer(OptimizerOptions options, std::vector<Slot> slots)
    : options_(std::move(options)), slots_(std::move(slots)) {}
Optimizer::~Optimizer() = default;

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(std::vector<ParamSpec> params, OptimizerOptions options,
                                                       RankContext& ctx) {
  MF_RETURN_IF_ERROR(ValidateOptions(options));
  // Every check first, then the (collective) creation of the state.
  std::set<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    const std::string who = "param " + std::to_string(i) + " ('" + p.name + "')";
    if (p.param == nullptr) return InvalidArgumentError(who + " is null");
    if (!names.insert(p.name).second) return InvalidArgumentError("duplicate param name '" + p.name + "'");
    if (!IsFloatDType(p.param->dtype())) {
      return InvalidArgumentError(who + " has dtype " + std::string(DTypeName(p.param->dtype())) +
                                  "; optimizers update f32, f64 or bf16 params");
    }
    const Layout& pl = p.param->layout();
    if (!(pl.mesh() == ctx.mesh())) {
      return InvalidArgumentError(who + " is on mesh " + pl.mesh().ToString() +
                                  " but the communicators are for mesh " + ctx.mesh().ToString());
    }
    if (pl.HasPartial()) {
      return InvalidArgumentError(who + " has the Partial layout " + pl.PlacementsString() +
                                  "; params must be Shard or Replicate");
    }
    if (p.state_layout.has_value()) {
      const Layout& sl = *p.state_layout;
      if (sl.global_shape() != pl.global_shape()) {
        return InvalidArgumentError("state layout of " + who + " has shape " + ListString(sl.global_shape()) +
                                    " but the param has shape " + ListString(pl.global_shape()));
      }
      if (!(sl.mesh() == pl.mesh())) {
        return InvalidArgumentError("state layout of " + who + " is on mesh " + sl.mesh().ToString() +
                                    " but the param is on mesh " + pl.mesh().ToString());
      }
      if (sl.HasPartial()) {
        return InvalidArgumentError("state layout " + sl.PlacementsString() + " of " + who +
                                    " has a Partial placement; optimizer state must be Shard or Replicate");
      }
    }
  }
  std::vector<Slot> slots;
  slots.reserve(params.size());
  for (ParamSpec& p : params) {
    Slot s(p.state_layout.has_value() ? std::move(*p.state_layout) : p.param->layout());
    s.name = p.name;
    s.param = p.param;
    s.compute = ComputeDTypeFor(p.param->dtype());
    if (p.param->dtype() != s.compute) {
      MF_ASSIGN_OR_RETURN(DTensor converted, ConvertDTensor(*p.param, s.compute));
      if (converted.layout() == s.state_layout) {
        s.master = std::move(converted);
      } else {
        MF_ASSIGN_OR_RETURN(DTensor m, Redistribute(converted, s.state_layout, ctx));
        s.master = std::move(m);
      }
    }
    MF_ASSIGN_OR_RETURN(Box box, s.state_layout.LocalBox(ctx.world_rank()));
    auto zeros = [&]() -> StatusOr<DTensor> {
      MF_ASSIGN_OR_RETURN(Tensor z, OnRankDevice(Tensor::Zeros(s.compute, box.shape), ctx));  // the param's device
      return DTensor::FromLocal(std::move(z), s.state_layout, ctx.world_rank());
    };
    if (std::holds_alternative<AdamWOptions>(options)) {
      MF_ASSIGN_OR_RETURN(DTensor m, zeros());
      MF_ASSIGN_OR_RETURN(DTensor v, zeros());
      s.moments.emplace_back("exp_avg", std::move(m));
      s.moments.emplace_back("exp_avg_sq", std::move(v));
    } else if (std::get<SgdOptions>(options).momentum != 0) {
      MF_ASSIGN_OR_RETURN(DTensor b, zeros());
      s.moments.emplace_back("momentum_buffer", std::move(b));
    }
    slots.push_back(std::move(s));
  }
  return std::unique_ptr<Optimizer>(new Optimizer(std::move(options), std::move(slots)));
}

StatusOr<std::unique_ptr<Optimizer>> Sgd::Create(std::vector<ParamSpec> params, SgdOptions options,
                                                 RankContext& ctx) {
  return Optimizer::Create(std::move(params), OptimizerOptions(options), ctx);
}

StatusOr<std::unique_ptr<Optimizer>> AdamW::Create(std::vector<ParamSpec> params, AdamWOptions options,
                                                   RankContext& ctx) {
  return Optimizer::Create(std::move(params), OptimizerOptions(options), ctx);
}

Status Optimizer::set_lr(double lr) {
  MF_RETURN_IF_ERROR(CheckNonNegative("lr", lr));
  std::visit([lr](auto& o) { o.lr = lr; }, options_);
  return Status::Ok();
}

double Optimizer::lr() const { return LrOf(options_); }
int Optimizer::num_params() const { return static_cast<int>(slots_.size()); }
Status Optimizer::RestoreStepCounts(int64_t step_count, std::span<const int64_t> param_steps) {
  if (param_steps.size() != slots_.size()) {
    return InvalidArgumentError("RestoreStepCounts: " + std::to_string(param_steps.size()) + " param steps for " +
                                std::to_string(slots_.size()) + " params");
  }
  if (step_count < 0) return InvalidArgumentError("RestoreStepCounts: step_count " + std::to_string(step_count) + " < 0");
  for (size_t i = 0; i < param_steps.size(); ++i) {
    if (param_steps[i] < 0 || param_steps[i] > step_count) {
      return InvalidArgumentError("RestoreStepCounts: param " + std::to_string(i) + " ('" + slots_[i].name + "') step " +
                                  std::to_string(param_steps[i]) + " is outside [0, " + std::to_string(step_count) + "]");
    }
  }
  step_count_ = step_count;
  for (size_t i = 0; i < param_steps.size(); ++i) slots_[i].steps = param_steps[i];
  return Status::Ok();
}

int64_t Optimizer::param_step(int i) const { return slots_[static_cast<size_t>(i)].steps; }
const std::string& Optimizer::param_name(int i) const { return slots_[static_cast<size_t>(i)].name; }
const Layout& Optimizer::state_layout(int i) const { return slots_[static_cast<size_t>(i)].state_layout; }
DType Optimizer::compute_dtype(int i) const { return slots_[static_cast<size_t>(i)].compute; }

OptimizerBytes Optimizer::BytesPerRank() const {
  OptimizerBytes b;
  for (const Slot& s : slots_) {
    b.params += s.param->local().NumBytes();
    // The gradient after redistribution: the state layout's box in the compute dtype.
    const Box box = s.state_layout.LocalBox(s.param->rank()).value();  // the rank is in the mesh (Create)
    b.grads += box.NumElements() * DTypeSize(s.compute);
    if (s.master.has_value()) b.optimizer += s.master->local().NumBytes();
    for (const auto& m : s.moments) b.optimizer += m.second.local().NumBytes();
  }
  return b;
}

std::vector<StateTensor> Optimizer::StateTensors() {
  std::vector<StateTensor> out;
  for (Slot& s : slots_) {
    for (auto& m : s.moments) out.push_back({s.name + "." + m.first, &m.second});
    if (s.master.has_value()) out.push_back({s.name + ".master", &*s.master});
  }
  return out;
}

namespace {

// The elementwise updates on local shards of one box. T = float or double.
template <typename T>
void SgdUpdate(const SgdOptions& o, int64_t t, std::span<T> p, std::span<const T> g, std::span<T> buf) {
  const T lr = static_cast<T>(o.lr), wd = static_cast<T>(o.weight_decay), mu = static_cast<T>(o.momentum);
  const T damp = static_cast<T>(1 - o.dampening);
  const bool nesterov = o.momentum_kind == MomentumKind::kNesterov;
  for (size_t i = 0; i < p.size(); ++i) {
    T d = g[i];
    if (o.weight_decay != 0) d = d + wd * p[i];
    if (o.momentum != 0) {
      buf[i] = t == 1 ? d : mu * buf[i] + damp * d;
      d = nesterov ? d + mu * buf[i] : buf[i];
    }
    p[i] = p[i] - lr * d;
  }
}

template <typename T>
void AdamWUpdate(const AdamWOptions& o, int64_t t, std::span<T> p, std::span<const T> g, std::span<T> m,
                 std::span<T> v) {
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
  const T decay = static_cast<T>(1 - o.lr * o.weight_decay);
  const T b1 = static_cast<T>(o.beta1), one_b1 = static_cast<T>(1 - o.beta1);
  const T b2 = static_cast<T>(o.beta2), one_b2 = static_cast<T>(1 - o.beta2);
  const T step_size = static_cast<T>(o.lr / bc1);
  const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T eps = static_cast<T>(o.eps);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = p[i] * decay;
    m[i] = b1 * m[i] + one_b1 * g[i];
    v[i] = b2 * v[i] + one_b2 * g[i] * g[i];
    const T denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] - step_size * (m[i] / denom);
  }
}

}  // namespace

// The update on a device rank's shards: the host loops' math op by op (optim/device_math.h).
Status Optimizer::UpdateOnDevice(Slot& slot, DTensor& work, const DTensor& grad, int64_t t, RankContext& ctx) {
  const std::shared_ptr<Stream>& stream = ctx.compute_stream_ptr();
  if (const auto* sgd = std::get_if<SgdOptions>(&options_)) {
    Tensor* buf = slot.moments.empty() ? nullptr : &slot.moments[0].second.mutable_local();
    const optim_internal::SgdHyper h{sgd->lr, sgd->momentum, sgd->dampening, sgd->weight_decay,
                                     sgd->momentum_kind == MomentumKind::kNesterov};
    return optim_internal::SgdOnDevice(h, t, work.mutable_local(), grad.local(), buf, stream);
  }
  const AdamWOptions& a = std::get<AdamWOptions>(options_);
  return optim_internal::AdamWOnDevice({a.lr, a.beta1, a.beta2, a.eps, a.weight_decay}, t, work.mutable_local(),
                                       grad.local(),
                                       slot.moments[0].second.mutable_local(), slot.moments[1].second.mutable_local(),
                                       stream);
}

Status Optimizer::UpdateSlot(Slot& slot, DTensor& grad, RankContext& ctx) {
  ++slot.steps;
  // The working copy of the weights in the state layout: the master, the param itself (same
  // layout, same dtype), or the param redistributed to the state layout.
  DTensor* work = nullptr;
  std::optional<DTensor> temp;
  if (slot.master.has_value()) {
    work = &*slot.master;
  } else if (slot.param->layout() == slot.state_layout) {
    work = slot.param;
  } else {
    MF_ASSIGN_OR_RETURN(DTensor w, Redistribute(*slot.param, slot.state_layout, ctx));
    temp = std::move(w);
    work = &*temp;
  }
  if (work->local().shape() != grad.local().shape()) {
    return InternalError("optimizer: param '" + slot.name + "' local shard " + ListString(work->local().shape()) +
                         " != gradient shard " + ListString(grad.local().shape()));
  }
  const int64_t t = slot.steps;
  if (!work->local().is_host()) {
    MF_RETURN_IF_ERROR(UpdateOnDevice(slot, *work, grad, t, ctx));
  } else {
    VisitDType(slot.compute, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        std::span<T> p = work->mutable_local().data<T>();
        std::span<const T> g = std::as_const(grad).local().data<T>();
        if (const auto* sgd = std::get_if<SgdOptions>(&options_)) {
          std::span<T> buf = slot.moments.empty() ? std::span<T>() : slot.moments[0].second.mutable_local().data<T>();
          SgdUpdate<T>(*sgd, t, p, g, buf);
        } else {
          AdamWUpdate<T>(std::get<AdamWOptions>(options_), t, p, g, slot.moments[0].second.mutable_local().data<T>(),
                         slot.moments[1].second.mutable_local().data<T>());
        }
      }
    });
  }
  if (work == slot.param) return Status::Ok();
  // Write back: the weights in the param dtype (converted on the state shard, so that an
  // all-gather moves bf16), redistributed to the param layout.
  MF_ASSIGN_OR_RETURN(DTensor src, ConvertDTensor(*work, slot.param->dtype()));
  if (src.layout() == slot.param->layout()) {
    *slot.param = std::move(src);
    return Status::Ok();
  }
  MF_ASSIGN_OR_RETURN(DTensor back, Redistribute(src, slot.param->layout(), ctx));
  *slot.param = std::move(back);
  return Status::Ok();
}

Status Optimizer::Step(std::span<const DTensor* const> grads, RankContext& ctx, const StepOptions& step_options) {
  // 1. Validate everything before any communication or update.
  if (grads.size() != slots_.size()) {
    return InvalidArgumentError("Step: " + std::to_string(grads.size()) + " gradients for " +
                                std::to_string(slots_.size()) + " params");
  }
  if (step_options.max_grad_norm.has_value()) MF_RETURN_IF_ERROR(CheckMaxGradNorm(*step_options.max_grad_norm));
  for (size_t i = 0; i < grads.size(); ++i) {
    const DTensor* g = grads[i];
    if (g == nullptr) continue;
    const Slot& s = slots_[i];
    const std::string who = "Step: gradient " + std::to_string(i) + " (param '" + s.name + "')";
    if (!IsFloatDType(g->dtype())) {
      return InvalidArgumentError(who + " has dtype " + std::string(DTypeName(g->dtype())) +
                                  "; gradients must be f32, f64 or bf16");
    }
    if (g->global_shape() != s.param->global_shape()) {
      return InvalidArgumentError(who + " has shape " + ListString(g->global_shape()) + " but the param has shape " +
                                  ListString(s.param->global_shape()));
    }
    if (!(g->layout().mesh() == s.param->layout().mesh())) {
      return InvalidArgumentError(who + " is on mesh " + g->layout().mesh().ToString() +
                                  " but the param is on mesh " + s.param->layout().mesh().ToString());
    }
  }
  // 2. Gradients in the compute dtype, redistributed to the state layouts (nothing updated yet).
  std::vector<std::optional<DTensor>> reduced(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i] == nullptr) continue;
    // Converted only when the dtype differs, and copied only when the caller's gradient is
    // already in the state layout (the update reads and clipping scales its own copy).
    const DTensor* g = grads[i];
    std::optional<DTensor> converted;
    if (g->dtype() != slots_[i].compute) {
      MF_ASSIGN_OR_RETURN(DTensor c, ConvertDTensor(*g, slots_[i].compute));
      converted = std::move(c);
      g = &*converted;
    }
    if (g->layout() == slots_[i].state_layout) {
      reduced[i] = converted ? std::move(*converted) : *g;
    } else {
      MF_ASSIGN_OR_RETURN(DTensor r, Redistribute(*g, slots_[i].state_layout, ctx));
      reduced[i] = std::move(r);
    }
  }
  // 3. Optional clipping by the exact global norm.
  std::optional<double> norm;
  if (step_options.max_grad_norm.has_value()) {
    std::vector<DTensor*> mutable_present;
    for (auto& r : reduced) {
      if (r.has_value()) mutable_present.push_back(&*r);
    }
    MF_ASSIGN_OR_RETURN(double total, ClipGradNorm(mutable_present, *step_options.max_grad_norm, ctx));
    norm = total;
  }
  // 4-5. Update and write back.
  for (size_t i = 0; i < grads.size(); ++i) {
    if (reduced[i].has_value()) MF_RETURN_IF_ERROR(UpdateSlot(slots_[i], *reduced[i], ctx));
  }
  ++step_count_;
  if (norm.has_value()) last_grad_norm_ = norm;
  return Status::Ok();
}

}  // namespace meshflow
