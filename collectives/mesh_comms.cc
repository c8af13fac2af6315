#include "meshflow/collectives/mesh_comms.h"

#include <algorithm>

namespace meshflow {

StatusOr<MeshComms> MeshComms::Create(std::shared_ptr<Communicator> world, DeviceMesh mesh) {
  if (world == nullptr) return InvalidArgumentError("MeshComms: null world communicator");
  std::vector<int> mesh_ranks = mesh.ranks();
  std::vector<int> world_ranks = world->world_ranks();
  std::sort(mesh_ranks.begin(), mesh_ranks.end());
  std::sort(world_ranks.begin(), world_ranks.end());
  if (mesh_ranks != world_ranks) {
    return InvalidArgumentError(mesh.ToString() + " has " + std::to_string(mesh.size()) +
                                " ranks but the " + world->backend() + " world communicator has " +
                                std::to_string(world->size()) + " ranks; the mesh must cover the world exactly");
  }
  return MeshComms(std::move(world), std::move(mesh));
}

StatusOr<MeshComms> MeshComms::Create(Communicator& world, DeviceMesh mesh) {
  return Create(std::shared_ptr<Communicator>(&world, [](Communicator*) {}), std::move(mesh));
}

StatusOr<Communicator*> MeshComms::Group(std::span<const int> dims) {
  std::vector<int> key(dims.begin(), dims.end());
  auto it = groups_.find(key);
  if (it != groups_.end()) return it->second.get();
  const int me = world_->world_rank();
  MF_ASSIGN_OR_RETURN(std::vector<int> group, mesh_.Group(me, dims));
  // Full-mesh group in mesh order over all dims equal to the world order: reuse the world.
  if (group == world_->world_ranks()) {
    groups_[key] = world_;
    return world_.get();
  }
  MF_ASSIGN_OR_RETURN(std::vector<std::vector<int>> all, mesh_.AllGroups(dims));
  int color = -1;
  for (size_t g = 0; g < all.size(); ++g) {
    if (all[g].front() == group.front()) color = static_cast<int>(g);
  }
  const int key_pos = static_cast<int>(std::find(group.begin(), group.end(), me) - group.begin());
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> sub, world_->Split(color, key_pos));
  if (sub == nullptr || sub->world_ranks() != group) {
    return InternalError("Split produced a group that differs from the mesh group");
  }
  groups_[key] = sub;
  return sub.get();
}

}  // namespace meshflow
