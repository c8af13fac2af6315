// A consumer program: a 2x2 in-process world shards an uneven tensor, redistributes it with the
// optimal planner and gathers it back; prints "all checks passed" when every rank got the input.
#include <cstdio>
#include <memory>
#include <string>

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

}  // namespace

int main() {
  const consumer::Status mine;  // the consumer's own type from its base/status.h
  const meshflow::Status s = Run();
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%s and meshflow side by side: all checks passed\n", mine.what.c_str());
  return 0;
}
