// Every example in nn/module.h, nn/parallel.h and nn/distribute.h is compiled and run here on a
// 2x2 thread world (mesh dims "dp", "tp"); keep them identical.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/base/status.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/nn/distribute.h"
#include "meshflow/nn/module.h"
#include "meshflow/nn/parallel.h"
#include "meshflow/optim/optimizer.h"

namespace meshflow {
namespace {

// nn/module.h
Status ModuleExample(const Variable& x, RankContext& ctx, std::vector<std::string>* names) {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> mlp,
                      nn::Mlp::Create({.in = 16, .hidden = 32, .out = 8, .seed = 1}, ctx));
  MF_ASSIGN_OR_RETURN(Variable y, mlp->Forward(x, ctx));   // x [..., 16] -> [..., 8]
  // mlp->NamedParameters(): fc1.weight, fc1.bias, fc2.weight, fc2.bias
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(mlp->ParamSpecs(), {}, ctx));
  // ... Backward(loss, ctx); opt->Step(mlp->Grads(), ctx); mlp->ZeroGrad();
  for (const nn::NamedParameter& p : mlp->NamedParameters()) names->push_back(p.name);
  MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(y, {}, false, ctx));
  MF_RETURN_IF_ERROR(Backward(loss, ctx));
  MF_RETURN_IF_ERROR(opt->Step(mlp->Grads(), ctx));
  mlp->ZeroGrad();
  return Status::Ok();
}

// nn/parallel.h
Status ParallelExample(RankContext& ctx, std::vector<std::string>* layouts) {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> mlp, nn::Mlp::Create({.in = 16, .hidden = 32, .out = 8}, ctx));
  MF_RETURN_IF_ERROR(nn::Parallelize(*mlp, "tp", {{"fc1", nn::ColwiseParallel{}},
                                                  {"fc2", nn::RowwiseParallel{}}}, ctx));
  MF_RETURN_IF_ERROR(nn::Parallelize(*mlp, "dp", {{"", nn::Fsdp{}}}, ctx));  // FSDP + TP
  for (const nn::NamedParameter& p : mlp->NamedParameters()) {
    layouts->push_back(p.variable.value().layout().PlacementsString());
  }
  return Status::Ok();
}

// nn/distribute.h
Status DistributeExample(const Tensor& x, RankContext& ctx, std::optional<DTensor>* out) {
  // mesh {2, 2} "dp", "tp"; only rank 0 loaded x.
  const Tensor* x_or_null = ctx.world_rank() == 0 ? &x : nullptr;
  MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({8, 6}, ctx.mesh(), {Shard{0}, Replicate{}}));
  MF_ASSIGN_OR_RETURN(DTensor xd, nn::DistributeFrom(x_or_null, l, /*src_rank=*/0, ctx));
  *out = std::move(xd);
  return Status::Ok();
}

TEST(NnDocTest, Examples) {
  auto world = ThreadWorld::Create(4);
  ASSERT_TRUE(world.ok()) << world.status();
  auto mesh = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const Tensor x = Tensor::Iota(DType::kF32, {8, 6});
  std::vector<std::vector<std::string>> names(4), layouts(4);
  const Status st = (*world)->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, *mesh));
    const int r = comm.world_rank();
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({4, 16}, *mesh, {Shard{0}, Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor xd, nn::Distribute(Tensor::Iota(DType::kF32, {4, 16}), xl, ctx));
    MF_ASSIGN_OR_RETURN(Variable xv, Variable::Leaf(std::move(xd), false));
    MF_RETURN_IF_ERROR(ModuleExample(xv, ctx, &names[static_cast<size_t>(r)]));
    MF_RETURN_IF_ERROR(ParallelExample(ctx, &layouts[static_cast<size_t>(r)]));
    std::optional<DTensor> got;
    MF_RETURN_IF_ERROR(DistributeExample(x, ctx, &got));
    MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({8, 6}, *mesh, {Shard{0}, Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor want, Distribute(x, l, r));
    if (!got || !(got->local() == want.local())) return InternalError("DistributeFrom differs from Distribute");
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(names[0], (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(layouts[3], (std::vector<std::string>{"S(0),S(1)", "S(0),S(0)", "S(1),S(0)", "S(0),R"}));
}

}  // namespace
}  // namespace meshflow
