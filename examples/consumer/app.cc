// A consumer program: a 2x2 in-process world shards an uneven tensor, redistributes it with the
// optimal planner and gathers it back; prints "all checks passed" when every rank got the input.
// Then it times an eager training step (MLP 256 -> 1024 -> 256, batch 64, AdamW, one rank) and
// prints the median: `bazel run //:app` (the consumer's default fastbuild) vs
// `bazel run -c opt //:app` shows what a consumer's default build costs (bench/README.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"          // the consumer's own header of that name
#include "meshflow/meshflow.h"    // the front door

namespace {

meshflow::Status Run() {
  MF_ASSIGN_OR_RETURN(meshflow::DeviceMesh mesh, meshflow::DeviceMesh::Create({2, 2}, {"dp", "tp"}));
  const meshflow::Tensor global = meshflow::Tensor::Iota(meshflow::DType::kF32, {5, 6});
  MF_ASSIGN_OR_RETURN(meshflow::Layout from,
                      meshflow::Layout::Create({5, 6}, mesh, {meshflow::Shard{0}, meshflow::Shard{1}}));
  MF_ASSIGN_OR_RETURN(meshflow::Layout to,
                      meshflow::Layout::Create({5, 6}, mesh, {meshflow::Shard{1}, meshflow::Shard{0}}));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const meshflow::Plan> plan,
                      meshflow::PlanFor(from, to, meshflow::DType::kF32));
  std::printf("plan %s -> %s: %zu step(s)\n", from.PlacementsString().c_str(),
              to.PlacementsString().c_str(), plan->steps.size());
  MF_ASSIGN_OR_RETURN(std::unique_ptr<meshflow::ThreadWorld> world,
                      meshflow::ThreadWorld::Create(mesh.size()));
  return world->Run([&](meshflow::Communicator& comm) -> meshflow::Status {
    MF_ASSIGN_OR_RETURN(meshflow::RankContext ctx, meshflow::RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(meshflow::DTensor x, meshflow::Distribute(global, from, comm.world_rank()));
    MF_ASSIGN_OR_RETURN(meshflow::DTensor y, meshflow::Redistribute(x, to, ctx));
    MF_ASSIGN_OR_RETURN(meshflow::Tensor full, meshflow::FullTensor(y, ctx));
    if (!(full == global)) {
      return meshflow::InternalError("rank " + std::to_string(comm.world_rank()) +
                                     ": gathered tensor differs from the input");
    }
    return meshflow::Status::Ok();
  });
}

// Median milliseconds of an eager training step on a one-rank world, over `steps` steps after 3
// warm-up steps.
meshflow::StatusOr<double> TrainStepMs(int steps) {
  MF_ASSIGN_OR_RETURN(meshflow::DeviceMesh mesh, meshflow::DeviceMesh::Create({1}, {"dp"}));
  MF_ASSIGN_OR_RETURN(std::unique_ptr<meshflow::ThreadWorld> world, meshflow::ThreadWorld::Create(1));
  std::vector<double> ms;
  MF_RETURN_IF_ERROR(world->Run([&](meshflow::Communicator& comm) -> meshflow::Status {
    MF_ASSIGN_OR_RETURN(meshflow::RankContext ctx, meshflow::RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<meshflow::nn::Mlp> mlp,
                        meshflow::nn::Mlp::Create({.in = 256, .hidden = 1024, .out = 256, .seed = 1}, ctx));
    MF_ASSIGN_OR_RETURN(std::unique_ptr<meshflow::Optimizer> opt,
                        meshflow::AdamW::Create(mlp->ParamSpecs(), {}, ctx));
    MF_ASSIGN_OR_RETURN(meshflow::Layout xl, meshflow::Layout::Create({64, 256}, mesh, {meshflow::Replicate{}}));
    MF_ASSIGN_OR_RETURN(meshflow::DTensor xd,
                        meshflow::nn::Distribute(meshflow::Tensor::Iota(meshflow::DType::kF32, {64, 256}), xl, ctx));
    MF_ASSIGN_OR_RETURN(meshflow::Variable x, meshflow::Variable::Leaf(std::move(xd), false));
    for (int i = 0; i < steps + 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      MF_ASSIGN_OR_RETURN(meshflow::Variable y, mlp->Forward(x, ctx));
      MF_ASSIGN_OR_RETURN(meshflow::Variable loss, meshflow::autograd::Mean(y, {}, false, ctx));
      MF_RETURN_IF_ERROR(meshflow::Backward(loss, ctx));
      MF_RETURN_IF_ERROR(opt->Step(mlp->Grads(), ctx));
      mlp->ZeroGrad();
      if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return meshflow::Status::Ok();
  }));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main() {
  const consumer::Status mine;  // the consumer's own type from its base/status.h
  const meshflow::Status s = Run();
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%s and meshflow side by side: all checks passed\n", mine.what.c_str());
  const meshflow::StatusOr<double> ms = TrainStepMs(20);
  if (!ms.ok()) {
    std::fprintf(stderr, "consumer: %s\n", ms.status().ToString().c_str());
    return 1;
  }
  std::printf("eager training step (MLP 256-1024-256, batch 64, AdamW, 1 rank): %.2f ms (median of 20)\n", *ms);
  return 0;
}
