#include "meshflow/nn/fsdp_blocks.h"

#include <set>
#include <string>
#include <utility>

#include "meshflow/autograd/functions.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow::nn {

namespace {

using Managed = std::vector<std::pair<Variable*, Layout>>;

// The parameters of `module` whose layout shards a tensor dim over one of `dims`, with that layout
// made Replicate on those dims.
StatusOr<Managed> ManagedOf(Module& module, const std::set<int>& dims) {
  Managed mine;
  for (const NamedParameter& p : module.NamedParameters()) {
    const Layout& l = p.variable.value().layout();
    Placements gathered = l.placements();
    bool sharded = false;
    for (int d : dims) {
      if (IsShard(gathered[static_cast<size_t>(d)])) {
        gathered[static_cast<size_t>(d)] = Replicate{};
        sharded = true;
      }
    }
    if (!sharded) continue;
    MF_ASSIGN_OR_RETURN(Layout target, l.WithPlacements(std::move(gathered)));
    mine.emplace_back(&p.variable, std::move(target));
  }
  return mine;
}

}  // namespace

StatusOr<std::unique_ptr<FsdpBlocks>> FsdpBlocks::Create(std::vector<Module*> blocks, std::vector<int> fsdp_dims,
                                                         FsdpBlocksOptions options, const RankContext& ctx,
                                                         std::vector<Module*> root) {
  const int ndim = ctx.mesh().ndim();
  std::set<int> dims;
  for (int d : fsdp_dims) {
    if (d < 0 || d >= ndim || !dims.insert(d).second) {
      return InvalidArgumentError("FsdpBlocks: fsdp dim " + std::to_string(d) + " is outside the mesh or repeated (mesh " +
                                  ctx.mesh().ToString() + ")");
    }
  }
  std::vector<Managed> params;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b] == nullptr) return InvalidArgumentError("FsdpBlocks: block " + std::to_string(b) + " is null");
    MF_ASSIGN_OR_RETURN(Managed mine, ManagedOf(*blocks[b], dims));
    params.push_back(std::move(mine));
  }
  Managed root_params;
  for (size_t m = 0; m < root.size(); ++m) {
    if (root[m] == nullptr) return InvalidArgumentError("FsdpBlocks: root module " + std::to_string(m) + " is null");
    MF_ASSIGN_OR_RETURN(Managed mine, ManagedOf(*root[m], dims));
    for (auto& p : mine) root_params.push_back(std::move(p));
  }
  return std::unique_ptr<FsdpBlocks>(new FsdpBlocks(std::move(params), std::move(root_params), options));
}

Status FsdpBlocks::Prefetch(const Managed& unit, RankContext& ctx) {
  // Called outside a block's forward only (the members are the leaves then).
  for (const auto& [member, target] : unit) MF_RETURN_IF_ERROR(PrefetchRedistribute(member->value(), target, ctx));
  return Status::Ok();
}

Status FsdpBlocks::Prefetch(int block, RankContext& ctx) {
  if (!options_.prefetch || block < 0 || block >= num_blocks()) return Status::Ok();
  return Prefetch(params_[static_cast<size_t>(block)], ctx);
}

Status FsdpBlocks::Gather(const Managed& unit, std::vector<std::pair<Variable, Variable>>& saved, RankContext& ctx) {
  saved.clear();
  for (auto& [member, target] : unit) {
    MF_ASSIGN_OR_RETURN(Variable gathered, autograd::Redistribute(*member, target, ctx));  // takes the prefetch
    saved.emplace_back(*member, gathered);
    *member = std::move(gathered);
  }
  return Status::Ok();
}

Status FsdpBlocks::BeginForward(RankContext& ctx) {
  if (root_.empty()) return Prefetch(0, ctx);
  if (in_forward_) return FailedPreconditionError("FsdpBlocks::BeginForward again before EndForward (root unit)");
  // The root's gathers go first: the embeddings need them at once; block 0's run behind them.
  if (options_.prefetch) MF_RETURN_IF_ERROR(Prefetch(root_, ctx));
  MF_RETURN_IF_ERROR(Prefetch(0, ctx));
  MF_RETURN_IF_ERROR(Gather(root_, root_saved_, ctx));
  in_forward_ = true;
  return Status::Ok();
}

Status FsdpBlocks::EndForward(Variable& output, RankContext& ctx) {
  if (root_.empty()) return Status::Ok();
  if (!in_forward_) return FailedPreconditionError("FsdpBlocks::EndForward without BeginForward (root unit)");
  for (size_t k = 0; k < root_saved_.size(); ++k) *root_[k].first = root_saved_[k].first;  // the leaves again
  root_saved_.clear();  // the autograd graph keeps the gathered values for Backward
  in_forward_ = false;
  return Status::Ok();
}

Status FsdpBlocks::BeforeBlock(int block, RankContext& ctx) {
  if (block < 0 || block >= num_blocks() || current_ != -1) {
    return FailedPreconditionError("FsdpBlocks::BeforeBlock(" + std::to_string(block) + ") out of order (" +
                                   std::to_string(num_blocks()) + " blocks, current " + std::to_string(current_) + ")");
  }
  MF_RETURN_IF_ERROR(Prefetch(block, ctx));      // not started yet: block 0, or no prefetching
  MF_RETURN_IF_ERROR(Prefetch(block + 1, ctx));  // runs while this block computes
  MF_RETURN_IF_ERROR(Gather(params_[static_cast<size_t>(block)], saved_[static_cast<size_t>(block)], ctx));
  current_ = block;
  return Status::Ok();
}

Status FsdpBlocks::AfterBlock(int block, Variable& output, RankContext& ctx) {
  if (block != current_) {
    return FailedPreconditionError("FsdpBlocks::AfterBlock(" + std::to_string(block) + ") without BeforeBlock (current " +
                                   std::to_string(current_) + ")");
  }
  std::vector<std::pair<Variable, Variable>>& saved = saved_[static_cast<size_t>(block)];
  for (size_t k = 0; k < saved.size(); ++k) {
    *params_[static_cast<size_t>(block)][k].first = saved[k].first;  // the leaf again
  }
  current_ = -1;
  if (options_.reshard_after_forward) {
    RankContext* c = &ctx;
    for (size_t k = 0; k < saved.size(); ++k) {
      Variable& gathered = saved[k].second;
      if (gathered.is_leaf()) continue;  // no gradient needed: nothing keeps it
      const Variable leaf = saved[k].first;
      const Layout target = params_[static_cast<size_t>(block)][k].second;
      MF_RETURN_IF_ERROR(gathered.ReleaseValue([leaf, target, c]() -> StatusOr<DTensor> {
        if (std::optional<StatusOr<DTensor>> pre = c->prefetches().Take(leaf.value(), target)) return std::move(*pre);
        return Redistribute(leaf.value(), target, *c);
      }));
    }
  }
  saved.clear();
  if (options_.prefetch) {
    if (block == num_blocks() - 1) MF_RETURN_IF_ERROR(Prefetch(block, ctx));  // for the start of Backward
    if (output.defined() && !output.is_leaf()) {
      RankContext* c = &ctx;
      MF_RETURN_IF_ERROR(output.AddPreBackwardHook([this, c, block]() -> Status {
        MF_RETURN_IF_ERROR(Prefetch(block, *c));
        return Prefetch(block - 1, *c);
      }));
    }
  }
  return Status::Ok();
}

Status FsdpBlocks::Finish(RankContext& ctx) { return ctx.prefetches().Clear(); }

}  // namespace meshflow::nn
