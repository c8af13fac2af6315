#include "meshflow/nn/fsdp_blocks.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/autograd/functions.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/nn/parallel.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow::nn {
namespace {

Status OnWorld(int n, const std::vector<int64_t>& shape, const std::function<Status(RankContext&)>& body) {
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(n).value());
  std::vector<std::string> names = {"dp", "tp"};
  names.resize(shape.size());
  const DeviceMesh mesh = *DeviceMesh::Create(shape, names);
  return world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    return body(ctx);
  });
}

// Two Linear blocks under Fsdp: the gathered layouts, the swap during a block's forward, the
// release after it, and errors.
TEST(FsdpBlocksTest, ManagesTheShardedParametersOfEachBlock) {
  const Status s = OnWorld(4, {2, 2}, [](RankContext& ctx) -> Status {
    std::vector<std::unique_ptr<Linear>> layers;
    for (int i = 0; i < 2; ++i) {
      MF_ASSIGN_OR_RETURN(std::unique_ptr<Linear> l,
                          Linear::Create({.in = 8, .out = 8, .bias = true, .seed = static_cast<uint64_t>(i)}, ctx));
      MF_RETURN_IF_ERROR(Parallelize(*l, "tp", {{"", ColwiseParallel{}}}, ctx));
      MF_RETURN_IF_ERROR(Parallelize(*l, "dp", {{"", Fsdp{}}}, ctx));
      layers.push_back(std::move(l));
    }
    std::vector<Module*> blocks = {layers[0].get(), layers[1].get()};
    if (FsdpBlocks::Create({nullptr}, {0}, {}, ctx).status().code() != StatusCode::kInvalidArgument ||
        FsdpBlocks::Create(blocks, {2}, {}, ctx).status().code() != StatusCode::kInvalidArgument ||
        FsdpBlocks::Create(blocks, {0, 0}, {}, ctx).status().code() != StatusCode::kInvalidArgument) {
      return InternalError("Create errors");
    }
    MF_ASSIGN_OR_RETURN(std::unique_ptr<FsdpBlocks> f, FsdpBlocks::Create(blocks, {0}, {}, ctx));
    if (f->num_blocks() != 2 || f->managed(0).size() != 2) return InternalError("managed params");
    // weight [8, 8]: S(0) on dp, S(1) on tp (colwise) -> gathered R on dp, S(1) on tp.
    const Layout& gathered = f->managed(0)[0].second;
    if (gathered.ToString().find("R,S(1)") == std::string::npos) return InternalError("gathered " + gathered.ToString());
    if (f->AfterBlock(0, layers[0]->weight(), ctx).code() != StatusCode::kFailedPrecondition) {
      return InternalError("AfterBlock without BeforeBlock");
    }
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({4, 8}, ctx.mesh(), {Shard{0}, Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(Tensor::Iota(DType::kF32, {4, 8}), xl, ctx.world_rank()));
    MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(std::move(xd), false));
    const Variable leaf = layers[0]->weight();
    MF_RETURN_IF_ERROR(f->BeginForward(ctx));
    MF_RETURN_IF_ERROR(f->BeforeBlock(0, ctx));
    if (layers[0]->weight() == leaf || !(layers[0]->weight().value().layout() == gathered)) {
      return InternalError("the block's weight is not the gathered value during its forward");
    }
    if (f->BeforeBlock(1, ctx).code() != StatusCode::kFailedPrecondition) return InternalError("nested BeforeBlock");
    MF_ASSIGN_OR_RETURN(Variable h, layers[0]->Forward(x, ctx));
    Variable gathered_w = layers[0]->weight();
    MF_RETURN_IF_ERROR(f->AfterBlock(0, h, ctx));
    if (!(layers[0]->weight() == leaf)) return InternalError("the leaf was not put back");
    if (!gathered_w.value_released()) return InternalError("the gathered weight was not released");
    MF_RETURN_IF_ERROR(f->BeforeBlock(1, ctx));
    MF_ASSIGN_OR_RETURN(Variable y, layers[1]->Forward(h, ctx));
    MF_RETURN_IF_ERROR(f->AfterBlock(1, y, ctx));
    MF_ASSIGN_OR_RETURN(Variable loss, autograd::Sum(y, {}, false, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    MF_RETURN_IF_ERROR(f->Finish(ctx));
    // The sharded leaves got full-shape gradients (Partial over dp: reduce-scattered by whoever
    // consumes them).
    if (!layers[0]->weight().grad() || layers[0]->weight().grad()->global_shape() != std::vector<int64_t>{8, 8}) {
      return InternalError("leaf gradient");
    }
    if (ctx.prefetches().stats().hits == 0) return InternalError("no prefetch was used");
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A root unit (a Linear before the blocks and one after): gathered for the whole forward, the
// leaves back after EndForward, the gathered values kept for Backward, the hook order checked.
TEST(FsdpBlocksTest, GathersTheRootUnitForTheWholeForward) {
  const Status s = OnWorld(2, {2}, [](RankContext& ctx) -> Status {
    std::vector<std::unique_ptr<Linear>> layers;
    for (int i = 0; i < 3; ++i) {
      MF_ASSIGN_OR_RETURN(std::unique_ptr<Linear> l,
                          Linear::Create({.in = 8, .out = 8, .bias = true, .seed = static_cast<uint64_t>(i)}, ctx));
      MF_RETURN_IF_ERROR(Parallelize(*l, "dp", {{"", Fsdp{}}}, ctx));
      layers.push_back(std::move(l));
    }
    Linear& first = *layers[0];
    Linear& block = *layers[1];
    Linear& last = *layers[2];
    if (FsdpBlocks::Create({&block}, {0}, {}, ctx, {nullptr}).status().code() != StatusCode::kInvalidArgument) {
      return InternalError("null root module accepted");
    }
    MF_ASSIGN_OR_RETURN(std::unique_ptr<FsdpBlocks> f, FsdpBlocks::Create({&block}, {0}, {}, ctx, {&first, &last}));
    if (f->managed_root().size() != 4) return InternalError("root params: " + std::to_string(f->managed_root().size()));
    Variable none;
    if (f->EndForward(none, ctx).code() != StatusCode::kFailedPrecondition) return InternalError("EndForward first");
    const Variable first_leaf = first.weight(), last_leaf = last.weight();
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({4, 8}, ctx.mesh(), {Shard{0}}));
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(Tensor::Iota(DType::kF32, {4, 8}), xl, ctx.world_rank()));
    MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(std::move(xd), false));
    MF_RETURN_IF_ERROR(f->BeginForward(ctx));
    if (f->BeginForward(ctx).code() != StatusCode::kFailedPrecondition) return InternalError("BeginForward twice");
    for (Linear* l : {&first, &last}) {
      if (!(l->weight().value().layout() == f->managed_root()[0].second)) {
        return InternalError("a root weight is not gathered: " + l->weight().value().layout().ToString());
      }
    }
    MF_ASSIGN_OR_RETURN(Variable h, first.Forward(x, ctx));
    MF_RETURN_IF_ERROR(f->BeforeBlock(0, ctx));
    MF_ASSIGN_OR_RETURN(h, block.Forward(h, ctx));
    MF_RETURN_IF_ERROR(f->AfterBlock(0, h, ctx));
    const Variable last_gathered = last.weight();
    MF_ASSIGN_OR_RETURN(Variable y, last.Forward(h, ctx));
    MF_RETURN_IF_ERROR(f->EndForward(y, ctx));
    if (!(first.weight() == first_leaf) || !(last.weight() == last_leaf)) return InternalError("root leaves not back");
    if (last_gathered.value_released()) return InternalError("the root was resharded after forward");
    MF_ASSIGN_OR_RETURN(Variable loss, autograd::Sum(y, {}, false, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    MF_RETURN_IF_ERROR(f->Finish(ctx));
    for (const Variable& leaf : {first_leaf, last_leaf}) {
      if (!leaf.grad() || leaf.grad()->global_shape() != std::vector<int64_t>{8, 8}) return InternalError("root gradient");
    }
    // A second step runs the same way (the unit is reusable).
    MF_RETURN_IF_ERROR(f->BeginForward(ctx));
    return f->EndForward(y, ctx);
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshflow::nn
