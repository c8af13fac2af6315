// Modules: layers with named parameters on top of the eager autograd (autograd/variable.h).
//
// A Module owns leaf Variables (its parameters, requires_grad) and child Modules, each under a
// name; NamedParameters() lists every parameter under its hierarchical name ("fc1.weight", or
// "mlp.fc1.weight" for a module registered as "mlp"), depth first in registration order. Each
// layer's Forward is built from autograd ops (autograd/functions.h), so it runs sharded (the
// ops' rules pick the layouts) and Backward fills every parameter's grad().
//
// Parameters are created deterministically from a seed: the same global values on every rank and
// on every mesh (a counter-based hash of (seed, parameter, element index)), as Replicate DTensors
// on the communicators' mesh, in the layer options' dtype (f32, f64 or bf16). Parallel styles
// (nn/parallel.h) then change their layouts; values never change.
//
//   Linear            weight [in, out] uniform in +-1/sqrt(in) (torch's bound), bias [out] likewise
//   Embedding         weight [num, dim] uniform in +-1
//   LayerNorm         weight [dim] = 1, bias [dim] = 0 (over the last dim)
//   RmsNorm           weight [dim] = 1 (over the last dim)
//   Mlp               fc1 (Linear in -> hidden) -> gelu -> fc2 (Linear hidden -> out)
//   CausalSelfAttention  q, k, v, o (Linear dim -> dim, no bias by default); x [B, T, D] -> [B, T, D]:
//                     heads by reshape [B, T, H, D/H] + transpose(1, 2), scores q k^T / sqrt(D/H),
//                     causal mask by autograd::Where over a constant lower-triangular [T, T]
//                     mask (-1e9 above the diagonal), softmax, @ v, heads merged back, o.
//
// Modules are neither copyable nor movable (parents hold pointers to children); Create returns
// them in a unique_ptr. A parameter is a leaf Variable: its DTensor is updated in place by an
// optimizer through Variable::mutable_leaf_value() (ParamSpecs() below).
//
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> mlp,
//                       nn::Mlp::Create({.in = 16, .hidden = 32, .out = 8, .seed = 1}, ctx));
//   MF_ASSIGN_OR_RETURN(Variable y, mlp->Forward(x, ctx));   // x [..., 16] -> [..., 8]
//   // mlp->NamedParameters(): fc1.weight, fc1.bias, fc2.weight, fc2.bias
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(mlp->ParamSpecs(), {}, ctx));
//   // ... Backward(loss, ctx); opt->Step(mlp->Grads(), ctx); mlp->ZeroGrad();
//
// Errors (INVALID_ARGUMENT, naming the value): Create with a size < 1, an integer dtype, eps <= 0
// (norms), a dim not divisible by num_heads (attention); Forward of CausalSelfAttention with an
// undefined input or one that is not [batch, seq, dim]; Submodule of an unknown path; the autograd
// ops' errors (shapes, meshes) otherwise. Rows in docs/errors.md ("nn/").
#ifndef MESHFLOW_NN_MODULE_H_
#define MESHFLOW_NN_MODULE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshflow/autograd/variable.h"
#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/optim/optimizer.h"

namespace meshflow::nn {

// One parameter: its hierarchical name and the module's leaf Variable.
struct NamedParameter {
  std::string name;
  Variable& variable;
};

class Module {
 public:
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // "Linear", "Embedding", "LayerNorm", "RmsNorm", "Mlp", "CausalSelfAttention", or a user type.
  virtual std::string_view type_name() const = 0;

  // Every parameter of this module and its descendants, depth first in registration order.
  std::vector<NamedParameter> NamedParameters();
  // This module (name "") and every descendant under its path ("fc1", "block.attn.q").
  std::vector<std::pair<std::string, Module*>> NamedModules();
  // The descendant at `path` ("" is this module). Errors: no such module (INVALID_ARGUMENT
  // naming the path and listing the submodules).
  StatusOr<Module*> Submodule(std::string_view path);

  // Clears every parameter's gradient.
  void ZeroGrad();
  // For Optimizer::Create: one ParamSpec per parameter (its name, the leaf's DTensor, the state
  // layout nullopt = the param's). Create the optimizer after Parallelize (nn/parallel.h).
  std::vector<ParamSpec> ParamSpecs();
  // For Optimizer::Step: each parameter's grad() (null where it has none), NamedParameters order.
  std::vector<const DTensor*> Grads();

  // Placements that inputs of this module should have, per mesh dim (set by SequenceParallel):
  // empty unless a style set one. InputLayout gives the layout of an input of global `shape` on
  // `mesh`: these placements, Replicate elsewhere. Errors: those of Layout::Create.
  const std::map<int, Placement>& input_placements() const { return input_placements_; }
  void set_input_placement(int mesh_dim, Placement p) { input_placements_[mesh_dim] = p; }
  StatusOr<Layout> InputLayout(std::vector<int64_t> shape, const DeviceMesh& mesh) const;

 protected:
  Module() = default;
  // The pointees must outlive this module (members of the subclass).
  void RegisterParameter(std::string name, Variable* param);
  void RegisterModule(std::string name, Module* child);

 private:
  void Collect(const std::string& prefix, std::vector<NamedParameter>* out);
  void CollectModules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>* out);
  std::vector<std::pair<std::string, Variable*>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::map<int, Placement> input_placements_;
};

// A Replicate parameter on the context's mesh: element i of `shape` is a deterministic function of
// (seed, i), uniform in [-scale, scale] (or every element = `fill` when scale == 0). Exposed for
// user modules.
StatusOr<Variable> MakeParameter(std::vector<int64_t> shape, DType dtype, uint64_t seed, double scale, double fill,
                                 const RankContext& ctx);

struct LinearOptions {
  int64_t in = 1;
  int64_t out = 1;
  bool bias = true;
  uint64_t seed = 0;
  DType dtype = DType::kF32;
};

// y = x @ weight (+ bias); weight [in, out].
class Linear : public Module {
 public:
  static StatusOr<std::unique_ptr<Linear>> Create(const LinearOptions& options, const RankContext& ctx);
  std::string_view type_name() const override { return "Linear"; }
  StatusOr<Variable> Forward(const Variable& x, RankContext& ctx) const;
  Variable& weight() { return weight_; }
  Variable& bias() { return bias_; }  // undefined without bias
  const LinearOptions& options() const { return options_; }

 private:
  explicit Linear(const LinearOptions& options) : options_(options) {}
  LinearOptions options_;
  Variable weight_, bias_;
};

struct EmbeddingOptions {
  int64_t num = 1;
  int64_t dim = 1;
  uint64_t seed = 0;
  DType dtype = DType::kF32;
};

// ids [...] (i32/i64) -> [..., dim].
class Embedding : public Module {
 public:
  static StatusOr<std::unique_ptr<Embedding>> Create(const EmbeddingOptions& options, const RankContext& ctx);
  std::string_view type_name() const override { return "Embedding"; }
  StatusOr<Variable> Forward(const Variable& ids, RankContext& ctx) const;
  Variable& weight() { return weight_; }

 private:
  Embedding() = default;
  Variable weight_;
};

struct NormOptions {
  int64_t dim = 1;
  double eps = 1e-5;
  bool bias = true;  // LayerNorm only
  DType dtype = DType::kF32;
};

class LayerNorm : public Module {
 public:
  static StatusOr<std::unique_ptr<LayerNorm>> Create(const NormOptions& options, const RankContext& ctx);
  std::string_view type_name() const override { return "LayerNorm"; }
  StatusOr<Variable> Forward(const Variable& x, RankContext& ctx) const;
  Variable& weight() { return weight_; }
  Variable& bias() { return bias_; }

 private:
  explicit LayerNorm(double eps) : eps_(eps) {}
  double eps_;
  Variable weight_, bias_;
};

class RmsNorm : public Module {
 public:
  static StatusOr<std::unique_ptr<RmsNorm>> Create(const NormOptions& options, const RankContext& ctx);
  std::string_view type_name() const override { return "RmsNorm"; }
  StatusOr<Variable> Forward(const Variable& x, RankContext& ctx) const;
  Variable& weight() { return weight_; }

 private:
  explicit RmsNorm(double eps) : eps_(eps) {}
  double eps_;
  Variable weight_;
};

struct MlpOptions {
  int64_t in = 1;
  int64_t hidden = 1;
  int64_t out = 1;
  bool bias = true;
  uint64_t seed = 0;
  DType dtype = DType::kF32;
};

// fc2(gelu(fc1(x))).
class Mlp : public Module {
 public:
  static StatusOr<std::unique_ptr<Mlp>> Create(const MlpOptions& options, const RankContext& ctx);
  std::string_view type_name() const override { return "Mlp"; }
  StatusOr<Variable> Forward(const Variable& x, RankContext& ctx) const;
  Linear& fc1() { return *fc1_; }
  Linear& fc2() { return *fc2_; }

 private:
  Mlp() = default;
  std::unique_ptr<Linear> fc1_, fc2_;
};

struct AttentionOptions {
  int64_t dim = 1;
  int64_t num_heads = 1;
  bool bias = false;
  uint64_t seed = 0;
  DType dtype = DType::kF32;
};

// Causal multi-head self-attention (num_heads == 1: single-head); submodules q, k, v, o.
class CausalSelfAttention : public Module {
 public:
  static StatusOr<std::unique_ptr<CausalSelfAttention>> Create(const AttentionOptions& options,
                                                               const RankContext& ctx);
  std::string_view type_name() const override { return "CausalSelfAttention"; }
  StatusOr<Variable> Forward(const Variable& x, RankContext& ctx) const;

 private:
  explicit CausalSelfAttention(const AttentionOptions& options) : options_(options) {}
  AttentionOptions options_;
  std::unique_ptr<Linear> q_, k_, v_, o_;
};

}  // namespace meshflow::nn

#endif  // MESHFLOW_NN_MODULE_H_
