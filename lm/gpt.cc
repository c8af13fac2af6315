#include "meshflow/lm/gpt.h"

#include <string>
#include <utility>

#include "meshflow/autograd/functions.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/ops/shape_util.h"
#include "meshflow/runtime/device_copy.h"

namespace meshflow::lm {

Status GptConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v < 1) return InvalidArgumentError(std::string("GptConfig: ") + name + " must be >= 1, got " + std::to_string(v));
    return Status::Ok();
  };
  MF_RETURN_IF_ERROR(positive("vocab", vocab));
  MF_RETURN_IF_ERROR(positive("seq_len", seq_len));
  MF_RETURN_IF_ERROR(positive("dim", dim));
  MF_RETURN_IF_ERROR(positive("heads", heads));
  MF_RETURN_IF_ERROR(positive("layers", layers));
  MF_RETURN_IF_ERROR(positive("mlp_hidden", mlp_hidden));
  if (vocab > (int64_t{1} << 24)) {
    return InvalidArgumentError("GptConfig: vocab must be <= 2^24, got " + std::to_string(vocab));
  }
  if (dim % heads != 0) {
    return InvalidArgumentError("GptConfig: dim " + std::to_string(dim) + " is not divisible by heads " +
                                std::to_string(heads));
  }
  return Status::Ok();
}

std::string GptConfig::ToString() const {
  return "vocab=" + std::to_string(vocab) + " seq_len=" + std::to_string(seq_len) + " dim=" + std::to_string(dim) +
         " heads=" + std::to_string(heads) + " layers=" + std::to_string(layers) +
         " mlp_hidden=" + std::to_string(mlp_hidden) + " seed=" + std::to_string(seed);
}

StatusOr<std::unique_ptr<GptBlock>> GptBlock::Create(const GptConfig& c, uint64_t seed, const RankContext& ctx) {
  std::unique_ptr<GptBlock> b(new GptBlock());
  MF_ASSIGN_OR_RETURN(b->ln1_, nn::LayerNorm::Create({.dim = c.dim}, ctx));
  MF_ASSIGN_OR_RETURN(b->attn_, nn::CausalSelfAttention::Create(
                                    {.dim = c.dim, .num_heads = c.heads, .bias = false, .seed = seed + 1}, ctx));
  MF_ASSIGN_OR_RETURN(b->ln2_, nn::LayerNorm::Create({.dim = c.dim}, ctx));
  MF_ASSIGN_OR_RETURN(b->mlp_,
                      nn::Mlp::Create({.in = c.dim, .hidden = c.mlp_hidden, .out = c.dim, .seed = seed + 2}, ctx));
  b->RegisterModule("ln1", b->ln1_.get());
  b->RegisterModule("attn", b->attn_.get());
  b->RegisterModule("ln2", b->ln2_.get());
  b->RegisterModule("mlp", b->mlp_.get());
  return b;
}

StatusOr<Variable> GptBlock::Forward(const Variable& x, RankContext& ctx) const {
  MF_ASSIGN_OR_RETURN(Variable h1, ln1_->Forward(x, ctx));
  MF_ASSIGN_OR_RETURN(Variable a, attn_->Forward(h1, ctx));
  MF_ASSIGN_OR_RETURN(Variable r1, autograd::Add(x, a, ctx));
  MF_ASSIGN_OR_RETURN(Variable h2, ln2_->Forward(r1, ctx));
  MF_ASSIGN_OR_RETURN(Variable m, mlp_->Forward(h2, ctx));
  return autograd::Add(r1, m, ctx);
}

StatusOr<std::unique_ptr<Gpt>> Gpt::Create(const GptConfig& c, const RankContext& ctx) {
  MF_RETURN_IF_ERROR(c.Validate());
  std::unique_ptr<Gpt> g(new Gpt(c));
  const uint64_t s = c.seed * 1000;
  MF_ASSIGN_OR_RETURN(g->tok_, nn::Embedding::Create({.num = c.vocab, .dim = c.dim, .seed = s + 1}, ctx));
  MF_ASSIGN_OR_RETURN(g->pos_, nn::Embedding::Create({.num = c.seq_len, .dim = c.dim, .seed = s + 2}, ctx));
  g->RegisterModule("tok", g->tok_.get());
  g->RegisterModule("pos", g->pos_.get());
  for (int64_t i = 0; i < c.layers; ++i) {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<GptBlock> b, GptBlock::Create(c, s + 10 * (static_cast<uint64_t>(i) + 1), ctx));
    g->blocks_.push_back(std::move(b));
    g->RegisterModule("h" + std::to_string(i), g->blocks_.back().get());
  }
  MF_ASSIGN_OR_RETURN(g->ln_f_, nn::LayerNorm::Create({.dim = c.dim}, ctx));
  MF_ASSIGN_OR_RETURN(g->head_, nn::Linear::Create({.in = c.dim, .out = c.vocab, .bias = false, .seed = s + 3}, ctx));
  g->RegisterModule("ln_f", g->ln_f_.get());
  g->RegisterModule("head", g->head_.get());
  return g;
}

int64_t Gpt::NumParameters() {
  int64_t n = 0;
  for (const nn::NamedParameter& p : NamedParameters()) {
    int64_t e = 1;
    for (int64_t d : p.variable.value().global_shape()) e *= d;
    n += e;
  }
  return n;
}

std::vector<nn::Module*> Gpt::Blocks() const {
  std::vector<nn::Module*> out;
  for (const std::unique_ptr<GptBlock>& b : blocks_) out.push_back(b.get());
  return out;
}

std::vector<nn::Module*> Gpt::RootModules() const { return {tok_.get(), pos_.get(), ln_f_.get(), head_.get()}; }

StatusOr<Variable> Gpt::Forward(const Variable& ids, RankContext& ctx) const {
  const std::vector<int64_t>& s = ids.value().global_shape();
  if (s.size() != 2 || s[1] > config_.seq_len || s[1] < 1) {
    return InvalidArgumentError("Gpt::Forward: ids must be [batch, T] with 1 <= T <= seq_len " +
                                std::to_string(config_.seq_len) + ", got shape " + ShapeString(s));
  }
  const int64_t t = s[1];
  Tensor positions = Tensor::Zeros(DType::kI32, {t});
  for (int64_t i = 0; i < t; ++i) positions.SetFromDouble(i, static_cast<double>(i));
  const DeviceMesh& mesh = ids.value().layout().mesh();
  MF_ASSIGN_OR_RETURN(Layout pl, Layout::Create({t}, mesh, Placements(static_cast<size_t>(mesh.ndim()), Replicate{})));
  MF_ASSIGN_OR_RETURN(DTensor pd, Distribute(positions, pl, ctx.world_rank()));
  MF_ASSIGN_OR_RETURN(pd, OnRankDevice(std::move(pd), ctx));
  MF_ASSIGN_OR_RETURN(Variable pos_ids, Variable::Leaf(std::move(pd), false));
  if (hooks_ != nullptr) MF_RETURN_IF_ERROR(hooks_->BeginForward(ctx));
  MF_ASSIGN_OR_RETURN(Variable te, tok_->Forward(ids, ctx));
  MF_ASSIGN_OR_RETURN(Variable pe, pos_->Forward(pos_ids, ctx));
  MF_ASSIGN_OR_RETURN(Variable x, autograd::Add(te, pe, ctx));
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (hooks_ != nullptr) MF_RETURN_IF_ERROR(hooks_->BeforeBlock(static_cast<int>(i), ctx));
    MF_ASSIGN_OR_RETURN(x, blocks_[i]->Forward(x, ctx));
    if (hooks_ != nullptr) MF_RETURN_IF_ERROR(hooks_->AfterBlock(static_cast<int>(i), x, ctx));
  }
  MF_ASSIGN_OR_RETURN(Variable h, ln_f_->Forward(x, ctx));
  MF_ASSIGN_OR_RETURN(Variable logits, head_->Forward(h, ctx));
  if (hooks_ != nullptr) MF_RETURN_IF_ERROR(hooks_->EndForward(logits, ctx));
  return logits;
}

StatusOr<Variable> Gpt::Loss(const DTensor& batch, RankContext& ctx) const {
  const std::vector<int64_t>& s = batch.global_shape();
  if (s.size() != 2 || s[1] != config_.seq_len + 1 || (batch.dtype() != DType::kI32 && batch.dtype() != DType::kI64)) {
    return InvalidArgumentError("Gpt::Loss: the batch must be i32/i64 [batch, seq_len + 1 = " +
                                std::to_string(config_.seq_len + 1) + "], got " + std::string(DTypeName(batch.dtype())) +
                                " " + ShapeString(s));
  }
  MF_ASSIGN_OR_RETURN(Variable b, Variable::Leaf(batch, false));
  MF_ASSIGN_OR_RETURN(Variable inputs, autograd::Slice(b, 1, 0, config_.seq_len, 1, ctx));
  MF_ASSIGN_OR_RETURN(Variable targets, autograd::Slice(b, 1, 1, config_.seq_len + 1, 1, ctx));
  MF_ASSIGN_OR_RETURN(Variable logits, Forward(inputs, ctx));
  return autograd::CrossEntropy(logits, targets, LossReduction::kMean, ctx);
}

}  // namespace meshflow::lm
