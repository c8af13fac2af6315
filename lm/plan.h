// Parallel plans for the GPT (lm/gpt.h) as configuration: a plan name and a mesh spec become
// layouts of the params, of the optimizer state and of the batch; the planner picks every
// collective (optim/optimizer.h, nn/parallel.h).
//
//   plan      mesh dims     params                              optimizer state     batch
//   ddp       dp            Replicate                           = params            Shard(0) over dp
//   zero1     dp            Replicate                           Shard(0) over dp    Shard(0) over dp
//   fsdp      dp            Fsdp (Shard on the first dim)        = params            Shard(0) over dp
//   tp        tp            Megatron over tp (below)             = params            Replicate
//   fsdp+tp   dp, tp        Megatron over tp, then Fsdp over dp  = params            Shard(0) over dp
// Megatron: attention q, k, v and mlp.fc1 ColwiseParallel, attention o and mlp.fc2
// RowwiseParallel, the LM head ColwiseParallel (vocab-parallel logits); embeddings and norms
// replicated over tp.
//
// Mesh specs read "dp=2,tp=2" (names from {dp, tp}, sizes >= 1, each name once, in mesh order).
// Without one, a plan takes dp=<world> (ddp, zero1, fsdp), tp=<world> (tp) or dp=<world/2>,tp=2
// (fsdp+tp, even worlds).
//
//   MF_ASSIGN_OR_RETURN(PlanKind plan, ParsePlan("fsdp+tp"));
//   MF_ASSIGN_OR_RETURN(MeshSpec spec, ParseMeshSpec("dp=2,tp=2"));
//   MF_ASSIGN_OR_RETURN(MeshSpec mesh, ResolveMesh(plan, spec, /*world_size=*/4));
//   // ... build the DeviceMesh, RankContext and the Gpt, then:
//   MF_ASSIGN_OR_RETURN(AppliedPlan applied, ApplyPlan(plan, *gpt, ctx));
//
// Errors (INVALID_ARGUMENT naming the value): an unknown plan name (listing the known ones), a
// malformed mesh spec, an unknown or repeated dim name, a mesh whose size is not the world size,
// a mesh that lacks a dim the plan needs or has one it does not use, fsdp+tp on an odd world
// without a mesh spec, heads or vocab not divisible by the tp size (tp plans).
#ifndef MESHFLOW_LM_PLAN_H_
#define MESHFLOW_LM_PLAN_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/lm/gpt.h"

namespace meshflow::lm {

struct DdpPlan {};
struct Zero1Plan {};
struct FsdpPlan {};
struct TpPlan {};
struct FsdpTpPlan {};
using PlanKind = std::variant<DdpPlan, Zero1Plan, FsdpPlan, TpPlan, FsdpTpPlan>;

// "ddp", "zero1", "fsdp", "tp", "fsdp+tp".
std::string_view PlanName(const PlanKind& plan);
StatusOr<PlanKind> ParsePlan(std::string_view name);

struct MeshSpec {
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  int64_t size() const;
  std::string ToString() const;  // "dp=2,tp=2"
  friend bool operator==(const MeshSpec&, const MeshSpec&) = default;
};

StatusOr<MeshSpec> ParseMeshSpec(std::string_view text);
// The plan's mesh on `world_size` ranks: `given` checked against the plan, or the default.
StatusOr<MeshSpec> ResolveMesh(const PlanKind& plan, const std::optional<MeshSpec>& given, int64_t world_size);

struct AppliedPlan {
  // Per parameter (Gpt::ParamSpecs order): the optimizer state layout, nullopt = the param's.
  std::vector<std::optional<Layout>> state_layouts;
  // Mesh dims the batch is sharded over (the loader's dp dims); empty = replicated batch.
  std::vector<std::string> dp_dims;
};

// Collective: redistributes the model's params to the plan's layouts (nn::Parallelize).
StatusOr<AppliedPlan> ApplyPlan(const PlanKind& plan, Gpt& model, RankContext& ctx);

}  // namespace meshflow::lm

#endif  // MESHFLOW_LM_PLAN_H_
