// Every example in runtime/pending.h, runtime/prefetch_cache.h, runtime/device_copy.h,
// ops/device_op_kernels.h, nn/fsdp_blocks.h and optim/grad_reducer.h is compiled (and run) here, on
// a 2-rank threads world; keep them identical.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/lm/gpt.h"
#include "meshflow/nn/fsdp_blocks.h"
#include "meshflow/nn/parallel.h"
#include "meshflow/ops/device_op_kernels.h"
#include "meshflow/optim/grad_reducer.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/runtime/device_copy.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/pending.h"
#include "meshflow/runtime/prefetch_cache.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

Status OnTwoRanks(const std::function<Status(RankContext&)>& body) {
  static ThreadWorld* world = ThreadWorld::Create(2).value().release();
  const DeviceMesh mesh = *DeviceMesh::Create({2}, {"dp"});
  return world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return body(ctx);
  });
}

// runtime/pending.h (plan: S(0) -> R of a [4, 2] tensor; local: this rank's rows).
Status PendingExample(RankContext& ctx) {
  MF_ASSIGN_OR_RETURN(Layout from, Layout::Create({4, 2}, ctx.mesh(), {Shard{0}}));
  MF_ASSIGN_OR_RETURN(Layout to, Layout::Create({4, 2}, ctx.mesh(), {Replicate{}}));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(from, to, DType::kF32));
  MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Tensor::Iota(DType::kF32, {4, 2}), from, ctx.world_rank()));
  Tensor local = x.local();

  MF_ASSIGN_OR_RETURN(PendingTensor p, ExecutePlanAsync(plan, ctx, std::move(local)));
  // ...                                   // compute; the plan runs on the communication stream
  MF_ASSIGN_OR_RETURN(Tensor result, p.Wait());

  EXPECT_EQ(result, Tensor::Iota(DType::kF32, {4, 2}));
  return Status::Ok();
}

TEST(PendingDocTest, Example) { EXPECT_EQ(OnTwoRanks(PendingExample), Status::Ok()); }

// runtime/prefetch_cache.h (w: a [4, 3] weight in S(0); x: [2, 4] replicated).
Status PrefetchExample(RankContext& ctx) {
  MF_ASSIGN_OR_RETURN(Layout ws, Layout::Create({4, 3}, ctx.mesh(), {Shard{0}}));
  MF_ASSIGN_OR_RETURN(Layout w_full_layout, Layout::Create({4, 3}, ctx.mesh(), {Replicate{}}));
  MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({2, 4}, ctx.mesh(), {Replicate{}}));
  MF_ASSIGN_OR_RETURN(DTensor w, Distribute(Tensor::Iota(DType::kF32, {4, 3}), ws, ctx.world_rank()));
  MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Tensor::Iota(DType::kF32, {2, 4}), xl, ctx.world_rank()));

  MF_RETURN_IF_ERROR(PrefetchRedistribute(w, w_full_layout, ctx));   // block i+1's weight
  // ...                                                                // block i computes
  // Matmul(x, w, ctx) takes the prefetched all-gather instead of gathering w itself.
  MF_ASSIGN_OR_RETURN(DTensor y, Matmul(x, w, ctx));
  const int64_t hits = ctx.prefetches().stats().hits;
  MF_RETURN_IF_ERROR(ctx.prefetches().Clear());

  EXPECT_EQ(y.global_shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_LE(hits, 1);  // 1 when the strategy gathered w (the layout prefetched), else 0
  return Status::Ok();
}

TEST(PrefetchCacheDocTest, Example) { EXPECT_EQ(OnTwoRanks(PrefetchExample), Status::Ok()); }

// runtime/device_copy.h (a host rank: both calls return their argument).
Status DeviceCopyExample(RankContext& ctx) {
  MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({2, 4}, ctx.mesh(), {Shard{0}}));
  MF_ASSIGN_OR_RETURN(DTensor batch, Distribute(Tensor::Iota(DType::kI32, {2, 4}), l, ctx.world_rank()));
  MF_ASSIGN_OR_RETURN(Layout r, Layout::Create({2}, ctx.mesh(), {Replicate{}}));
  MF_ASSIGN_OR_RETURN(DTensor loss, Distribute(Tensor::Iota(DType::kF32, {2}), r, ctx.world_rank()));

  MF_ASSIGN_OR_RETURN(DTensor batch_d, OnRankDevice(std::move(batch), ctx));   // copy on compute
  MF_ASSIGN_OR_RETURN(Tensor loss_h, OnHost(loss.local()));                    // waits for it

  EXPECT_TRUE(batch_d.local().is_host());
  EXPECT_EQ(loss_h, Tensor::Iota(DType::kF32, {2}));
  return Status::Ok();
}

TEST(DeviceCopyDocTest, Example) { EXPECT_EQ(OnTwoRanks(DeviceCopyExample), Status::Ok()); }

// ops/device_op_kernels.h (x [2, 3] and w [3, 4] on the host; stream: the compute stream).
Status DeviceOpKernelsExample(RankContext& ctx) {
  const Tensor x = Tensor::Iota(DType::kF32, {2, 3}), w = Tensor::Iota(DType::kF32, {3, 4});
  const std::shared_ptr<Stream>& stream = ctx.compute_stream_ptr();

  MF_ASSIGN_OR_RETURN(DeviceOpKernels * k, DeviceOpKernelsFor(x.device()));
  const Tensor* operands[] = {&x, &w};
  MF_ASSIGN_OR_RETURN(Tensor y, k->Run(OpSpec::Matmul(), operands, KernelContext{}, stream));

  EXPECT_EQ(y, RunKernel(OpSpec::Matmul(), operands).value());
  return Status::Ok();
}

TEST(DeviceOpKernelsDocTest, Example) { EXPECT_EQ(OnTwoRanks(DeviceOpKernelsExample), Status::Ok()); }

// nn/fsdp_blocks.h (a 2-layer GPT under FSDP over dp; batch: i32 [2, 9] windows).
Status FsdpBlocksExample(RankContext& ctx) {
  lm::GptConfig cfg;
  cfg.seq_len = 8;
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.mlp_hidden = 32;
  MF_ASSIGN_OR_RETURN(std::unique_ptr<lm::Gpt> gpt, lm::Gpt::Create(cfg, ctx));
  MF_RETURN_IF_ERROR(nn::Parallelize(*gpt, "dp", {{"", nn::Fsdp{}}}, ctx));
  std::vector<nn::Module*> blocks = gpt->Blocks();
  Tensor ids = Tensor::Zeros(DType::kI32, {2, 9});
  for (int64_t i = 0; i < ids.NumElements(); ++i) ids.SetFromDouble(i, static_cast<double>(i * 5 % 200));
  MF_ASSIGN_OR_RETURN(Layout bl, Layout::Create({2, 9}, ctx.mesh(), {Shard{0}}));
  MF_ASSIGN_OR_RETURN(DTensor batch, Distribute(ids, bl, ctx.world_rank()));

  MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::FsdpBlocks> fsdp,
                      nn::FsdpBlocks::Create(blocks, /*fsdp_dims=*/{0}, {.prefetch = true}, ctx));
  gpt->set_block_hooks(fsdp.get());
  MF_ASSIGN_OR_RETURN(Variable loss, gpt->Loss(batch, ctx));   // gathers run one block ahead
  MF_RETURN_IF_ERROR(Backward(loss, ctx));                      // and in backward
  MF_RETURN_IF_ERROR(fsdp->Finish(ctx));

  EXPECT_GT(ctx.prefetches().stats().hits, 0);
  return Status::Ok();
}

TEST(FsdpBlocksDocTest, Example) { EXPECT_EQ(OnTwoRanks(FsdpBlocksExample), Status::Ok()); }

// optim/grad_reducer.h (params: two replicated leaves; loss: their sum of squares).
Status GradReducerExample(RankContext& ctx) {
  MF_ASSIGN_OR_RETURN(Layout r, Layout::Create({8}, ctx.mesh(), {Replicate{}}));
  MF_ASSIGN_OR_RETURN(DTensor a0, Distribute(Tensor::Iota(DType::kF32, {8}), r, ctx.world_rank()));
  MF_ASSIGN_OR_RETURN(Variable a, Variable::Leaf(a0, true));
  MF_ASSIGN_OR_RETURN(Variable b, Variable::Leaf(a0, true));
  std::vector<Variable*> params = {&a, &b};
  std::vector<ParamSpec> specs = {{"a", a.mutable_leaf_value(), std::nullopt}, {"b", b.mutable_leaf_value(), std::nullopt}};
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(specs, AdamWOptions{}, ctx));
  MF_ASSIGN_OR_RETURN(Layout bs, Layout::Create({8}, ctx.mesh(), {Shard{0}}));
  MF_ASSIGN_OR_RETURN(Variable as, autograd::Redistribute(a, bs, ctx));  // each rank: its half
  MF_ASSIGN_OR_RETURN(Variable ab, autograd::Mul(as, b, ctx));
  MF_ASSIGN_OR_RETURN(Variable loss, autograd::Sum(ab, {}, false, ctx));

  MF_ASSIGN_OR_RETURN(std::unique_ptr<GradReducer> reducer,
                      GradReducer::Create(params, *opt, GradReducerOptions{.bucket_bytes = 1 << 20}, ctx));
  MF_RETURN_IF_ERROR(Backward(loss, ctx));      // buckets start as their gradients are ready
  MF_RETURN_IF_ERROR(reducer->Finish(ctx));     // waits; leaves hold the reduced gradients
  std::vector<const DTensor*> grads = {&*a.grad(), &*b.grad()};
  MF_RETURN_IF_ERROR(opt->Step(grads, ctx));

  EXPECT_TRUE(a.grad()->layout() == r);  // reduced into the state layout
  return Status::Ok();
}

TEST(GradReducerDocTest, Example) { EXPECT_EQ(OnTwoRanks(GradReducerExample), Status::Ok()); }

}  // namespace
}  // namespace meshflow
