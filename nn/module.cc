#include "meshflow/nn/module.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "meshflow/autograd/functions.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/runtime/device_copy.h"

namespace meshflow::nn {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

uint64_t ChildSeed(uint64_t seed, uint64_t child) { return SplitMix(seed * 0x100000001b3ull + child); }

Status CheckSize(std::string_view what, std::string_view field, int64_t v) {
  if (v < 1) return InvalidArgumentError(std::string(what) + ": " + std::string(field) + " " + std::to_string(v) + " must be >= 1");
  return Status::Ok();
}

Status CheckFloat(std::string_view what, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF64 && dtype != DType::kBF16) {
    return InvalidArgumentError(std::string(what) + ": dtype " + std::string(DTypeName(dtype)) +
                                " is not a float dtype (f32, f64, bf16)");
  }
  return Status::Ok();
}

StatusOr<Variable> ConstantLike(const Tensor& global, const DTensor& like, const RankContext& ctx) {
  MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(global.shape(), like.layout().mesh(),
                                               Placements(static_cast<size_t>(like.layout().mesh().ndim()), Replicate{})));
  MF_ASSIGN_OR_RETURN(DTensor d, meshflow::Distribute(global, l, ctx.world_rank()));
  MF_ASSIGN_OR_RETURN(d, OnRankDevice(std::move(d), ctx));  // a device rank's constants live on its device
  return Variable::Leaf(std::move(d), false);
}

}  // namespace

void Module::RegisterParameter(std::string name, Variable* param) { params_.emplace_back(std::move(name), param); }
void Module::RegisterModule(std::string name, Module* child) { children_.emplace_back(std::move(name), child); }

void Module::Collect(const std::string& prefix, std::vector<NamedParameter>* out) {
  for (auto& [name, v] : params_) {
    if (v->defined()) out->push_back(NamedParameter{prefix + name, *v});
  }
  for (auto& [name, m] : children_) m->Collect(prefix + name + ".", out);
}

void Module::CollectModules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>* out) {
  for (auto& [name, m] : children_) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    out->emplace_back(path, m);
    m->CollectModules(path, out);
  }
}

std::vector<NamedParameter> Module::NamedParameters() {
  std::vector<NamedParameter> out;
  Collect("", &out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::NamedModules() {
  std::vector<std::pair<std::string, Module*>> out = {{"", this}};
  CollectModules("", &out);
  return out;
}

StatusOr<Module*> Module::Submodule(std::string_view path) {
  std::vector<std::pair<std::string, Module*>> all = NamedModules();
  std::string names;
  for (auto& [name, m] : all) {
    if (name == path) return m;
    if (name.empty()) continue;
    names += names.empty() ? name : ", " + name;
  }
  return InvalidArgumentError("no submodule '" + std::string(path) + "' in this " + std::string(type_name()) +
                              "; submodules: " + (names.empty() ? "(none)" : names));
}

void Module::ZeroGrad() {
  for (NamedParameter& p : NamedParameters()) p.variable.ZeroGrad();
}

std::vector<ParamSpec> Module::ParamSpecs() {
  std::vector<ParamSpec> out;
  for (NamedParameter& p : NamedParameters()) out.push_back(ParamSpec{p.name, p.variable.mutable_leaf_value(), {}});
  return out;
}

std::vector<const DTensor*> Module::Grads() {
  std::vector<const DTensor*> out;
  for (NamedParameter& p : NamedParameters()) out.push_back(p.variable.grad() ? &*p.variable.grad() : nullptr);
  return out;
}

StatusOr<Layout> Module::InputLayout(std::vector<int64_t> shape, const DeviceMesh& mesh) const {
  Placements pl(static_cast<size_t>(mesh.ndim()), Replicate{});
  for (const auto& [d, p] : input_placements_) {
    if (d >= 0 && d < mesh.ndim()) pl[static_cast<size_t>(d)] = p;
  }
  return Layout::Create(std::move(shape), mesh, std::move(pl));
}

StatusOr<Variable> MakeParameter(std::vector<int64_t> shape, DType dtype, uint64_t seed, double scale, double fill,
                                 const RankContext& ctx) {
  MF_RETURN_IF_ERROR(CheckFloat("MakeParameter", dtype));
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    if (scale == 0) {
      t.SetFromDouble(i, fill);
    } else {
      const uint64_t h = SplitMix(seed ^ SplitMix(static_cast<uint64_t>(i)));
      const double u = static_cast<double>(h >> 11) / static_cast<double>(1ull << 53);  // [0, 1)
      t.SetFromDouble(i, scale * (2.0 * u - 1.0));
    }
  }
  const DeviceMesh& mesh = ctx.mesh();
  MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(std::move(shape), mesh,
                                               Placements(static_cast<size_t>(mesh.ndim()), Replicate{})));
  MF_ASSIGN_OR_RETURN(DTensor d, meshflow::Distribute(t, l, ctx.world_rank()));
  MF_ASSIGN_OR_RETURN(d, OnRankDevice(std::move(d), ctx));  // made on the host, kept on the rank's device
  return Variable::Leaf(std::move(d), true);
}

// ---- Linear ----

StatusOr<std::unique_ptr<Linear>> Linear::Create(const LinearOptions& o, const RankContext& ctx) {
  MF_RETURN_IF_ERROR(CheckSize("Linear", "in", o.in));
  MF_RETURN_IF_ERROR(CheckSize("Linear", "out", o.out));
  MF_RETURN_IF_ERROR(CheckFloat("Linear", o.dtype));
  std::unique_ptr<Linear> m(new Linear(o));
  const double bound = 1.0 / std::sqrt(static_cast<double>(o.in));
  MF_ASSIGN_OR_RETURN(m->weight_, MakeParameter({o.in, o.out}, o.dtype, ChildSeed(o.seed, 1), bound, 0, ctx));
  m->RegisterParameter("weight", &m->weight_);
  if (o.bias) {
    MF_ASSIGN_OR_RETURN(m->bias_, MakeParameter({o.out}, o.dtype, ChildSeed(o.seed, 2), bound, 0, ctx));
  }
  m->RegisterParameter("bias", &m->bias_);
  return m;
}

StatusOr<Variable> Linear::Forward(const Variable& x, RankContext& ctx) const {
  MF_ASSIGN_OR_RETURN(Variable y, autograd::Matmul(x, weight_, ctx));
  if (!bias_.defined()) return y;
  return autograd::Add(y, bias_, ctx);
}

// ---- Embedding ----

StatusOr<std::unique_ptr<Embedding>> Embedding::Create(const EmbeddingOptions& o, const RankContext& ctx) {
  MF_RETURN_IF_ERROR(CheckSize("Embedding", "num", o.num));
  MF_RETURN_IF_ERROR(CheckSize("Embedding", "dim", o.dim));
  MF_RETURN_IF_ERROR(CheckFloat("Embedding", o.dtype));
  std::unique_ptr<Embedding> m(new Embedding());
  MF_ASSIGN_OR_RETURN(m->weight_, MakeParameter({o.num, o.dim}, o.dtype, ChildSeed(o.seed, 1), 1.0, 0, ctx));
  m->RegisterParameter("weight", &m->weight_);
  return m;
}

StatusOr<Variable> Embedding::Forward(const Variable& ids, RankContext& ctx) const {
  return autograd::Embedding(weight_, ids, ctx);
}

// ---- Norms ----

namespace {
Status CheckNorm(std::string_view what, const NormOptions& o) {
  MF_RETURN_IF_ERROR(CheckSize(what, "dim", o.dim));
  MF_RETURN_IF_ERROR(CheckFloat(what, o.dtype));
  if (!(o.eps > 0) || !std::isfinite(o.eps)) {
    return InvalidArgumentError(std::string(what) + ": eps " + Num(o.eps) + " must be finite and > 0");
  }
  return Status::Ok();
}
}  // namespace

StatusOr<std::unique_ptr<LayerNorm>> LayerNorm::Create(const NormOptions& o, const RankContext& ctx) {
  MF_RETURN_IF_ERROR(CheckNorm("LayerNorm", o));
  std::unique_ptr<LayerNorm> m(new LayerNorm(o.eps));
  MF_ASSIGN_OR_RETURN(m->weight_, MakeParameter({o.dim}, o.dtype, 0, 0, 1.0, ctx));
  m->RegisterParameter("weight", &m->weight_);
  if (o.bias) {
    MF_ASSIGN_OR_RETURN(m->bias_, MakeParameter({o.dim}, o.dtype, 0, 0, 0.0, ctx));
  }
  m->RegisterParameter("bias", &m->bias_);
  return m;
}

StatusOr<Variable> LayerNorm::Forward(const Variable& x, RankContext& ctx) const {
  return autograd::LayerNorm(x, 1, weight_, bias_, eps_, ctx);
}

StatusOr<std::unique_ptr<RmsNorm>> RmsNorm::Create(const NormOptions& o, const RankContext& ctx) {
  MF_RETURN_IF_ERROR(CheckNorm("RmsNorm", o));
  std::unique_ptr<RmsNorm> m(new RmsNorm(o.eps));
  MF_ASSIGN_OR_RETURN(m->weight_, MakeParameter({o.dim}, o.dtype, 0, 0, 1.0, ctx));
  m->RegisterParameter("weight", &m->weight_);
  return m;
}

StatusOr<Variable> RmsNorm::Forward(const Variable& x, RankContext& ctx) const {
  return autograd::RmsNorm(x, 1, weight_, eps_, ctx);
}

// ---- Mlp ----

StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const MlpOptions& o, const RankContext& ctx) {
  std::unique_ptr<Mlp> m(new Mlp());
  MF_ASSIGN_OR_RETURN(m->fc1_, Linear::Create({o.in, o.hidden, o.bias, ChildSeed(o.seed, 11), o.dtype}, ctx));
  MF_ASSIGN_OR_RETURN(m->fc2_, Linear::Create({o.hidden, o.out, o.bias, ChildSeed(o.seed, 12), o.dtype}, ctx));
  m->RegisterModule("fc1", m->fc1_.get());
  m->RegisterModule("fc2", m->fc2_.get());
  return m;
}

StatusOr<Variable> Mlp::Forward(const Variable& x, RankContext& ctx) const {
  MF_ASSIGN_OR_RETURN(Variable h, fc1_->Forward(x, ctx));
  MF_ASSIGN_OR_RETURN(Variable a, autograd::Gelu(h, ctx));
  return fc2_->Forward(a, ctx);
}

// ---- CausalSelfAttention ----

StatusOr<std::unique_ptr<CausalSelfAttention>> CausalSelfAttention::Create(const AttentionOptions& o,
                                                                           const RankContext& ctx) {
  MF_RETURN_IF_ERROR(CheckSize("CausalSelfAttention", "dim", o.dim));
  MF_RETURN_IF_ERROR(CheckSize("CausalSelfAttention", "num_heads", o.num_heads));
  if (o.dim % o.num_heads != 0) {
    return InvalidArgumentError("CausalSelfAttention: dim " + std::to_string(o.dim) + " is not divisible by num_heads " +
                                std::to_string(o.num_heads));
  }
  std::unique_ptr<CausalSelfAttention> m(new CausalSelfAttention(o));
  const char* const names[] = {"q", "k", "v", "o"};
  std::unique_ptr<Linear>* slots[] = {&m->q_, &m->k_, &m->v_, &m->o_};
  for (int i = 0; i < 4; ++i) {
    MF_ASSIGN_OR_RETURN(*slots[i], Linear::Create({o.dim, o.dim, o.bias, ChildSeed(o.seed, 21 + static_cast<uint64_t>(i)), o.dtype},
                                                  ctx));
    m->RegisterModule(names[i], slots[i]->get());
  }
  return m;
}

StatusOr<Variable> CausalSelfAttention::Forward(const Variable& x, RankContext& ctx) const {
  if (!x.defined()) return InvalidArgumentError("CausalSelfAttention: the input is an undefined Variable");
  const std::vector<int64_t>& s = x.value().global_shape();
  if (s.size() != 3 || s[2] != options_.dim) {
    return InvalidArgumentError("CausalSelfAttention: input must be [batch, seq, " + std::to_string(options_.dim) +
                                "], got shape " + ShapeString(s));
  }
  const int64_t b = s[0], t = s[1], h = options_.num_heads, dh = options_.dim / options_.num_heads;
  const DType dtype = x.value().dtype();
  Tensor causal = Tensor::Zeros(dtype, {t, t});
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j <= i; ++j) causal.SetFromDouble(i * t + j, 1.0);
  }
  Tensor neg = Tensor::Zeros(dtype, {});
  neg.SetFromDouble(0, -1e9);
  MF_ASSIGN_OR_RETURN(Variable mask, ConstantLike(causal, x.value(), ctx));
  MF_ASSIGN_OR_RETURN(Variable fill, ConstantLike(neg, x.value(), ctx));

  // [B, T, D] -> [B, H, T, Dh]
  auto heads = [&](const Linear& proj) -> StatusOr<Variable> {
    MF_ASSIGN_OR_RETURN(Variable p, proj.Forward(x, ctx));
    MF_ASSIGN_OR_RETURN(Variable r, autograd::Reshape(p, {b, t, h, dh}, ctx));
    return autograd::Transpose(r, 1, 2, ctx);
  };
  MF_ASSIGN_OR_RETURN(Variable q, heads(*q_));
  MF_ASSIGN_OR_RETURN(Variable k, heads(*k_));
  MF_ASSIGN_OR_RETURN(Variable v, heads(*v_));
  MF_ASSIGN_OR_RETURN(Variable kt, autograd::Transpose(k, -2, -1, ctx));
  MF_ASSIGN_OR_RETURN(Variable s0, autograd::Matmul(q, kt, ctx));
  MF_ASSIGN_OR_RETURN(Variable sc, autograd::Scale(s0, 1.0 / std::sqrt(static_cast<double>(dh)), ctx));
  MF_ASSIGN_OR_RETURN(Variable masked, autograd::Where(mask, sc, fill, ctx));
  MF_ASSIGN_OR_RETURN(Variable p, autograd::Softmax(masked, -1, ctx));
  MF_ASSIGN_OR_RETURN(Variable o, autograd::Matmul(p, v, ctx));
  MF_ASSIGN_OR_RETURN(Variable ot, autograd::Transpose(o, 1, 2, ctx));
  MF_ASSIGN_OR_RETURN(Variable merged, autograd::Reshape(ot, {b, t, options_.dim}, ctx));
  return o_->Forward(merged, ctx);
}

}  // namespace meshflow::nn
