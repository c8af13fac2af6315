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

}  // namespace
}  // namespace meshflow::nn
