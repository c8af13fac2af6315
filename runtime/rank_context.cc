#include "meshflow/runtime/rank_context.h"

#include <utility>

namespace meshflow {

StatusOr<RankContext> RankContext::Create(std::shared_ptr<Communicator> world, DeviceMesh mesh) {
  MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(std::move(world), std::move(mesh)));
  return RankContext(std::make_unique<State>(std::move(comms)));
}

StatusOr<RankContext> RankContext::Create(Communicator& world, DeviceMesh mesh) {
  return Create(std::shared_ptr<Communicator>(&world, [](Communicator*) {}), std::move(mesh));
}

RankContext::~RankContext() = default;

}  // namespace meshflow
