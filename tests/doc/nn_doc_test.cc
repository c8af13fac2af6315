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
#include "meshflow/collectives/dtensor_api.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/nn/distribute.h"
#include "meshflow/nn/module.h"
#include "meshflow/nn/parallel.h"
#include "meshflow/train/optimizer.h"

namespace meshflow {
namespace {

// nn/module.h
Status ModuleExample(const Variable& x, MeshComms& comms, std::vector<std::string>* names) {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> mlp,
                      nn::Mlp::Create({.in = 16, .hidden = 32, .out = 8, .seed = 1}, comms));
  MF_ASSIGN_OR_RETURN(Variable y, mlp->Forward(x, comms));   // x [..., 16] -> [..., 8]
  // mlp->NamedParameters(): fc1.weight, fc1.bias, fc2.weight, fc2.bias
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(mlp->ParamSpecs(), {}, comms));
  // ... Backward(loss, comms); opt->Step(mlp->Grads(), comms); mlp->ZeroGrad();
  for (const nn::NamedParameter& p : mlp->NamedParameters()) names->push_back(p.name);
  MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(y, {}, false, comms));
  MF_RETURN_IF_ERROR(Backward(loss, comms));
  MF_RETURN_IF_ERROR(opt->Step(mlp->Grads(), comms));
  mlp->ZeroGrad();
  return Status::Ok();
}

// nn/parallel.h
Status ParallelExample(MeshComms& comms, std::vector<std::string>* layouts) {
  MF_ASSIGN_OR_RETURN(std::unique_ptr<nn::Mlp> mlp, nn::Mlp::Create({.in = 16, .hidden = 32, .out = 8}, comms));
  MF_RETURN_IF_ERROR(nn::Parallelize(*mlp, "tp", {{"fc1", nn::ColwiseParallel{}},
                                                  {"fc2", nn::RowwiseParallel{}}}, comms));
  MF_RETURN_IF_ERROR(nn::Parallelize(*mlp, "dp", {{"", nn::Fsdp{}}}, comms));  // FSDP + TP
  for (const nn::NamedParameter& p : mlp->NamedParameters()) {
    layouts->push_back(p.variable.value().layout().PlacementsString());
  }
  return Status::Ok();
}

// nn/distribute.h
Status DistributeExample(const Tensor& x, MeshComms& comms, std::optional<DTensor>* out) {
  // mesh {2, 2} "dp", "tp"; only rank 0 loaded x.
  const Tensor* x_or_null = comms.world_rank() == 0 ? &x : nullptr;
  MF_ASSIGN_OR_RETURN(Layout l, Layout::Create({8, 6}, comms.mesh(), {Shard{0}, Replicate{}}));
  MF_ASSIGN_OR_RETURN(DTensor xd, nn::DistributeFrom(x_or_null, l, /*src_rank=*/0, comms));
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
    MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, *mesh));
    const int r = comm.world_rank();
    MF_ASSIGN_OR_RETURN(Layout xl, Layout::Create({4, 16}, *mesh, {Shard{0}, Replicate{}}));
    MF_ASSIGN_OR_RETURN(DTensor xd, nn::Distribute(Tensor::Iota(DType::kF32, {4, 16}), xl, comms));
    MF_ASSIGN_OR_RETURN(Variable xv, Variable::Leaf(std::move(xd), false));
    MF_RETURN_IF_ERROR(ModuleExample(xv, comms, &names[static_cast<size_t>(r)]));
    MF_RETURN_IF_ERROR(ParallelExample(comms, &layouts[static_cast<size_t>(r)]));
    std::optional<DTensor> got;
    MF_RETURN_IF_ERROR(DistributeExample(x, comms, &got));
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
