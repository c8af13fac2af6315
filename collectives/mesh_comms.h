// MeshComms: one rank's communicators for the groups of a DeviceMesh.
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

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/buffer_pool.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/collectives/send_recv_cache.h"
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

  // This rank's pool of step buffers (collectives/buffer_pool.h): the plan executor takes its
  // step outputs and scratch from it and gives back the buffers it is done with, so a repeated
  // redistribution allocates nothing in steady state. Clear() it to free the memory.
  BufferPool& buffers() { return buffers_; }

  // This rank's send_recv step bookkeeping (collectives/send_recv_cache.h): the executor computes
  // a step's sends and receives once and reuses them on every later execution of an equal step.
  SendRecvCache& send_recv_cache() { return send_recv_cache_; }

 private:
  MeshComms(std::shared_ptr<Communicator> world, DeviceMesh mesh) : world_(std::move(world)), mesh_(std::move(mesh)) {}
  std::shared_ptr<Communicator> world_;
  DeviceMesh mesh_;
  std::map<std::vector<int>, std::shared_ptr<Communicator>> groups_;
  BufferPool buffers_;
  SendRecvCache send_recv_cache_;
};

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_MESH_COMMS_H_
