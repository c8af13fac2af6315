// Parallel styles: layouts for the parameters of a Module (nn/module.h), applied by Parallelize.
//
// A style only sets placements on one mesh dim (named by Parallelize's mesh_dim_name) and keeps
// every other mesh dim's placement, so styles on different mesh dims compose (tp then dp):
//   ColwiseParallel   Linear: weight [in, out] Shard(1), bias Shard(0) (Megatron column-parallel);
//                     Embedding: weight [num, dim] Shard(1).
//   RowwiseParallel   Linear: weight Shard(0), bias Replicate (row-parallel: the matmul result is
//                     Partial(sum) and the rules reduce it where needed);
//                     Embedding: weight Shard(0) (vocab-parallel).
//   SequenceParallel  LayerNorm / RmsNorm: weight and bias Replicate, and inputs of the module
//                     Shard(sequence_dim) (Module::input_placements / InputLayout: the layout to
//                     distribute its inputs with; the norm rules keep the sequence sharding).
//   Fsdp              any module: every parameter of it and its descendants Shard on the first
//                     tensor dim no other mesh dim shards (dim 0 when every dim is sharded: the
//                     shard nests); rank-0 parameters stay as they are.
// Activations are not redistributed by a style: the ops' sharding rules choose them (the
// planner prices every input redistribution), so Colwise fc1 + Rowwise fc2 runs as Megatron's
// MLP with one reduction of the Partial output.
//
// Parallelize redistributes (runtime/redistribute.h Redistribute) the parameters of each named
// submodule ("" = the module itself; paths like "block.mlp.fc1") in place, keeping the leaf
// Variables (their values are equal; gradients are cleared). Call it before creating an
// optimizer over the params. It is collective: every rank calls it with the same plan.
//
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> mlp, nn::Mlp::Create({.in = 16, .hidden = 32, .out = 8}, ctx));
//   MF_RETURN_IF_ERROR(nn::Parallelize(*mlp, "tp", {{"fc1", nn::ColwiseParallel{}},
//                                                   {"fc2", nn::RowwiseParallel{}}}, ctx));
//   MF_RETURN_IF_ERROR(nn::Parallelize(*mlp, "dp", {{"", nn::Fsdp{}}}, ctx));  // FSDP + TP
//
// Errors (INVALID_ARGUMENT naming the value; checked for the whole plan before anything moves):
// a mesh dim name the communicators' mesh does not have, a submodule path the module does not
// have, a style applied to a module type it does not fit (Colwise / Rowwise on other than Linear
// or Embedding, SequenceParallel on other than LayerNorm or RmsNorm), a SequenceParallel
// sequence_dim < 0, a parameter on another mesh than the communicators'. Redistribute's errors
// (communicator failures) are returned as they are.
#ifndef MESHFLOW_NN_PARALLEL_H_
#define MESHFLOW_NN_PARALLEL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/nn/module.h"

namespace meshflow::nn {

struct ColwiseParallel {};
struct RowwiseParallel {};
struct SequenceParallel {
  int sequence_dim = 1;  // of the module's inputs ([batch, seq, ...])
};
struct Fsdp {};

using ParallelStyle = std::variant<ColwiseParallel, RowwiseParallel, SequenceParallel, Fsdp>;

// "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "Fsdp".
std::string_view StyleName(const ParallelStyle& style);

struct ParallelRule {
  std::string submodule;  // a path of Module::NamedModules ("" = the module itself)
  ParallelStyle style;
};

// Collective. See the banner.
Status Parallelize(Module& module, std::string_view mesh_dim_name, const std::vector<ParallelRule>& plan,
                   RankContext& ctx);

}  // namespace meshflow::nn

#endif  // MESHFLOW_NN_PARALLEL_H_
