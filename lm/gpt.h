// A GPT-style decoder on nn/ modules: byte-level (or any) vocabulary, token + learned position
// embedding, `layers` pre-norm blocks (x + attn(ln1(x)), then x + mlp(ln2(x))) of causal
// multi-head attention and a gelu MLP, a final LayerNorm and an LM head (Linear dim -> vocab,
// no bias), trained with mean next-token cross-entropy.
//
// Parameter names (NamedParameters order): tok.weight [vocab, dim], pos.weight [seq_len, dim],
// h<i>.ln1.{weight,bias}, h<i>.attn.{q,k,v,o}.weight, h<i>.ln2.{weight,bias},
// h<i>.mlp.fc1.{weight,bias}, h<i>.mlp.fc2.{weight,bias}, ln_f.{weight,bias}, head.weight.
// Values are a deterministic function of GptConfig::seed (nn/module.h), so every mesh and every
// parallel plan starts from the same model.
//
//   GptConfig cfg;                     // vocab 256, seq_len 64, dim 64, 4 heads, 2 layers
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(cfg, ctx));
//   // batch: i32 [B, seq_len + 1] token windows (data/token_file.h samples)
//   MF_ASSIGN_OR_RETURN(Variable loss, gpt->Loss(batch, ctx));   // mean CE of tokens 1..T
//   MF_RETURN_IF_ERROR(Backward(loss, ctx));
//
// Errors (INVALID_ARGUMENT naming the value): GptConfig::Validate (a size < 1, dim not divisible
// by heads, vocab > 2^24); Loss of a batch that is not integer [B, seq_len + 1]; the ops' errors.
#ifndef MESHFLOW_LM_GPT_H_
#define MESHFLOW_LM_GPT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/autograd/variable.h"
#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/nn/fsdp_blocks.h"
#include "meshflow/nn/module.h"

namespace meshflow::lm {

struct GptConfig {
  int64_t vocab = 256;
  int64_t seq_len = 64;
  int64_t dim = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t mlp_hidden = 256;
  uint64_t seed = 1;

  Status Validate() const;
  // "vocab=256 seq_len=64 dim=64 heads=4 layers=2 mlp_hidden=256 seed=1": identifies the model in
  // checkpoints (a checkpoint of another config is refused).
  std::string ToString() const;
  friend bool operator==(const GptConfig&, const GptConfig&) = default;
};

// One pre-norm transformer block.
class GptBlock : public nn::Module {
 public:
  static StatusOr<std::unique_ptr<GptBlock>> Create(const GptConfig& config, uint64_t seed, const RankContext& ctx);
  std::string_view type_name() const override { return "GptBlock"; }
  StatusOr<Variable> Forward(const Variable& x, RankContext& ctx) const;

 private:
  GptBlock() = default;
  std::unique_ptr<nn::LayerNorm> ln1_, ln2_;
  std::unique_ptr<nn::CausalSelfAttention> attn_;
  std::unique_ptr<nn::Mlp> mlp_;
};

class Gpt : public nn::Module {
 public:
  static StatusOr<std::unique_ptr<Gpt>> Create(const GptConfig& config, const RankContext& ctx);
  std::string_view type_name() const override { return "Gpt"; }
  const GptConfig& config() const { return config_; }

  // ids: integer [B, T] with T <= seq_len, any layout on the context's mesh -> logits [B, T, vocab].
  StatusOr<Variable> Forward(const Variable& ids, RankContext& ctx) const;
  // batch: integer [B, seq_len + 1]; inputs are columns [0, T), targets columns [1, T + 1).
  // Returns the mean cross-entropy (a scalar Variable).
  StatusOr<Variable> Loss(const DTensor& batch, RankContext& ctx) const;
  // Number of parameters (elements of the global tensors).
  int64_t NumParameters();
  // The blocks h0..h<layers-1>, in forward order.
  std::vector<nn::Module*> Blocks() const;
  // The modules outside the blocks: the token and position embeddings, the final norm, the head
  // (FSDP's root unit, nn/fsdp_blocks.h).
  std::vector<nn::Module*> RootModules() const;
  // Called when Forward starts, around every block's forward and when Forward ends
  // (nn/fsdp_blocks.h: FSDP unshard and prefetch); null: none. Not owned.
  void set_block_hooks(nn::BlockHooks* hooks) { hooks_ = hooks; }

 private:
  explicit Gpt(const GptConfig& config) : config_(config) {}
  GptConfig config_;
  std::unique_ptr<nn::Embedding> tok_, pos_;
  std::vector<std::unique_ptr<GptBlock>> blocks_;
  std::unique_ptr<nn::LayerNorm> ln_f_;
  std::unique_ptr<nn::Linear> head_;
  nn::BlockHooks* hooks_ = nullptr;
};

}  // namespace meshflow::lm

#endif  // MESHFLOW_LM_GPT_H_
