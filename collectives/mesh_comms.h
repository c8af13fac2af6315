// MeshComms: one rank's communicators for the groups of a DeviceMesh (groups only: the rank's
// device, streams, buffers and schedules are in runtime/rank_context.h, which holds a MeshComms).
//
// Wraps the world communicator of a backend and hands out, per set of mesh dims, the
// communicator of the group containing this rank (DeviceMesh::Group order). Groups are created
// lazily with Communicator::Split, which is collective over the world, so every rank must ask
// for groups in the same order; the plan executor does, because every rank runs the same plan.
//
//   MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(Communicator* tp, comms.Group(std::vector<int>{1}));
#ifndef MESHFLOW_COLLECTIVES_MESH_COMMS_H_
#define MESHFLOW_COLLECTIVES_MESH_COMMS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {

class MeshComms {
 public:
  // Errors: the mesh's ranks are not exactly the world communicator's world ranks, or this rank
  // is not in the mesh.
  static StatusOr<MeshComms> Create(std::shared_ptr<Communicator> world, DeviceMesh mesh);
  // Convenience for backends that hand out a Communicator& (e.g. ThreadWorld::Run): does not own it.
  static StatusOr<MeshComms> Create(Communicator& world, DeviceMesh mesh);

  const DeviceMesh& mesh() const { return mesh_; }
  Communicator& world() { return *world_; }
  int world_rank() const { return world_->world_rank(); }

  // The communicator of the flattened group over `dims` (order matters) that contains this rank.
  // Errors: bad dims (see DeviceMesh::Group).
  StatusOr<Communicator*> Group(std::span<const int> dims);

 private:
  MeshComms(std::shared_ptr<Communicator> world, DeviceMesh mesh) : world_(std::move(world)), mesh_(std::move(mesh)) {}
  std::shared_ptr<Communicator> world_;
  DeviceMesh mesh_;
  std::map<std::vector<int>, std::shared_ptr<Communicator>> groups_;
};

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_MESH_COMMS_H_
