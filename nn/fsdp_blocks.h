// FsdpBlocks: FSDP's per-block unshard / reshard with prefetching (torch FSDP2's fully_shard on
// each block: all-gather before the block's forward, free after it, all-gather again in backward,
// each gather started one block ahead so that it runs while the current block computes).
//
// Under Fsdp (nn/parallel.h) a block's parameters are sharded over the fsdp mesh dims. Without
// FsdpBlocks every op that uses one lets its strategy decide how to redistribute it (gathering it,
// or resharding the activation instead), on the spot. With FsdpBlocks the model calls its hooks
// around each block (BlockHooks; lm::Gpt does, see Gpt::set_block_hooks):
//   - BeginForward: with `prefetch`, block 0's gathers start (they run while the layers ahead of
//     block 0 compute).
//   - BeforeBlock(i): the block's sharded parameters are replaced, in the module, by their gathered
//     form (autograd::Redistribute to the parameter's layout with the fsdp dims Replicate; the
//     gradient passes through to the sharded leaf unchanged and is reduce-scattered by whoever
//     consumes it: the optimizer, or a GradReducer bucket during backward). With `prefetch`, the
//     gathers of block i+1 are started here too, on the communication stream
//     (PrefetchRedistribute, runtime/prefetch_cache.h), so they run while block i computes.
//   - AfterBlock(i, output): the leaves are put back in the module; with reshard_after_forward the
//     gathered values are freed (Variable::ReleaseValue) and Backward gathers them again when the
//     block's VJPs need them. With `prefetch`, a pre-backward hook on the block's output starts
//     the gathers of block i (if not started) and block i-1 when Backward reaches the block, and
//     the last block's gathers start right after its forward.
// The gathers are the same plans with or without prefetching, so the two paths give the same bits.
// Finish() (after Backward) drops the prefetches no op took.
//
// The root unit. The modules outside the blocks (`root`: a GPT's embeddings, final norm and head)
// are gathered once per step, as FSDP2's root module is: BeginForward gathers their sharded
// parameters (ahead of block 0's gathers, which then run while the embeddings compute) and puts
// them in the modules; EndForward(output) puts the leaves back. The gathered values stay alive
// (the autograd graph holds them) until Backward is done with them: the root is not resharded
// after forward. Without a root unit every op that uses a sharded root parameter chooses on the
// spot how to redistribute it; for an embedding table sharded over the vocabulary that is a
// vocabulary-parallel lookup whose Partial output then flows, unreduced, through every block.
// A model that has a root unit must call EndForward after the last root module's forward.
//
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::FsdpBlocks> fsdp,
//                       nn::FsdpBlocks::Create(blocks, /*fsdp_dims=*/{0}, {.prefetch = true}, ctx));
//   gpt->set_block_hooks(fsdp.get());
//   MF_ASSIGN_OR_RETURN(Variable loss, gpt->Loss(batch, ctx));   // gathers run one block ahead
//   MF_RETURN_IF_ERROR(Backward(loss, ctx));                      // and in backward
//   MF_RETURN_IF_ERROR(fsdp->Finish(ctx));
//
// Errors: Create with a null block or root module, an fsdp dim outside the mesh or repeated
// (INVALID_ARGUMENT); BeforeBlock / AfterBlock out of order, BeginForward again before
// EndForward with a root unit (FAILED_PRECONDITION); the redistributions' errors.
#ifndef MESHFLOW_NN_FSDP_BLOCKS_H_
#define MESHFLOW_NN_FSDP_BLOCKS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <memory>
#include <utility>
#include <vector>

#include "meshflow/autograd/variable.h"
#include "meshflow/base/status.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/nn/module.h"
#include "meshflow/runtime/rank_context.h"

namespace meshflow::nn {

// Called by a sequential model: BeginForward when its forward starts (before the layers ahead of
// block 0, e.g. the embeddings), then around the forward of each block 0..n-1, in order, then
// EndForward after the layers behind the last block (e.g. the head).
class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  virtual Status BeginForward(RankContext& ctx) = 0;
  virtual Status BeforeBlock(int block, RankContext& ctx) = 0;
  // `output`: the block's output.
  virtual Status AfterBlock(int block, Variable& output, RankContext& ctx) = 0;
  // `output`: the model's output.
  virtual Status EndForward(Variable& output, RankContext& ctx) = 0;
};

struct FsdpBlocksOptions {
  bool prefetch = true;               // start each block's gathers one block ahead
  bool reshard_after_forward = true;  // free the gathered parameters after the block's forward
};

class FsdpBlocks final : public BlockHooks {
 public:
  // blocks: the model's blocks in forward order; root: the modules outside them, gathered for the
  // whole step (see "The root unit"; empty: none). Both must outlive this object. A parameter is
  // managed when its layout shards a tensor dim over one of `fsdp_dims`.
  static StatusOr<std::unique_ptr<FsdpBlocks>> Create(std::vector<Module*> blocks, std::vector<int> fsdp_dims,
                                                     FsdpBlocksOptions options, const RankContext& ctx,
                                                     std::vector<Module*> root = {});

  Status BeginForward(RankContext& ctx) override;
  Status BeforeBlock(int block, RankContext& ctx) override;
  Status AfterBlock(int block, Variable& output, RankContext& ctx) override;
  Status EndForward(Variable& output, RankContext& ctx) override;
  // Drops (and waits for) the prefetches no op took. Call after Backward.
  Status Finish(RankContext& ctx);

  int num_blocks() const { return static_cast<int>(params_.size()); }
  // The managed parameters of block `b` (the module's Variable) with their gathered layouts.
  const std::vector<std::pair<Variable*, Layout>>& managed(int b) const { return params_[static_cast<size_t>(b)]; }
  // The managed parameters of the root unit.
  const std::vector<std::pair<Variable*, Layout>>& managed_root() const { return root_; }
  const FsdpBlocksOptions& options() const { return options_; }

 private:
  using Managed = std::vector<std::pair<Variable*, Layout>>;
  FsdpBlocks(std::vector<Managed> params, Managed root, FsdpBlocksOptions options)
      : params_(std::move(params)), root_(std::move(root)), saved_(params_.size()), options_(options) {}
  Status Prefetch(const Managed& unit, RankContext& ctx);
  Status Prefetch(int block, RankContext& ctx);
  // Puts the gathered form of each of `unit`'s parameters in its module; `saved` gets (leaf, gathered).
  static Status Gather(const Managed& unit, std::vector<std::pair<Variable, Variable>>& saved, RankContext& ctx);

  std::vector<Managed> params_;
  Managed root_;
  std::vector<std::vector<std::pair<Variable, Variable>>> saved_;  // per block: (leaf, gathered) in forward
  std::vector<std::pair<Variable, Variable>> root_saved_;          // the root's, BeginForward to EndForward
  FsdpBlocksOptions options_;
  int current_ = -1;  // the block between BeforeBlock and AfterBlock
  bool in_forward_ = false;  // between BeginForward and EndForward (tracked with a root unit)
};

}  // namespace meshflow::nn

#endif  // MESHFLOW_NN_FSDP_BLOCKS_H_
