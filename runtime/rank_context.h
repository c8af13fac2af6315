// RankContext: everything one rank runs with.
//
// One per rank (thread of an in-process world, or process): the rank's communicators (a MeshComms:
// the world and the lazily split groups of the mesh), the executor's step buffers (BufferPool) and
// its send/recv schedules (SendRecvCache). Every op, module, optimizer and checkpoint call takes
// it, the way torch code takes a process group plus the current device.
//
//   MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(Communicator* tp, ctx.Group(std::vector<int>{1}));
//   MF_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, target, ctx));   // runtime/redistribute.h
//
// A RankContext is used by one thread at a time (its rank's). Moving it keeps every address the
// executor holds (the state lives behind a pointer).
//
// Errors: those of MeshComms::Create (the mesh must cover the world communicator's ranks exactly).
#ifndef MESHFLOW_RUNTIME_RANK_CONTEXT_H_
#define MESHFLOW_RUNTIME_RANK_CONTEXT_H_

#include <memory>
#include <span>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/runtime/buffer_pool.h"
#include "meshflow/runtime/send_recv_cache.h"

namespace meshflow {

class RankContext {
 public:
  static StatusOr<RankContext> Create(std::shared_ptr<Communicator> world, DeviceMesh mesh);
  // For backends that hand out a Communicator& (e.g. ThreadWorld::Run): does not own it.
  static StatusOr<RankContext> Create(Communicator& world, DeviceMesh mesh);

  RankContext(RankContext&&) noexcept = default;
  RankContext& operator=(RankContext&&) noexcept = default;
  ~RankContext();

  const DeviceMesh& mesh() const { return state_->comms.mesh(); }
  MeshComms& comms() { return state_->comms; }
  Communicator& world() { return state_->comms.world(); }
  int world_rank() const { return state_->comms.world_rank(); }
  // The communicator of the flattened group over `dims` (MeshComms::Group).
  StatusOr<Communicator*> Group(std::span<const int> dims) { return state_->comms.Group(dims); }

  // The plan executor's step buffers (runtime/buffer_pool.h): taken and given back by ExecutePlan,
  // so a repeated redistribution allocates nothing in steady state. Clear() it to free the memory.
  BufferPool& buffers() { return state_->buffers; }
  // The executor's send_recv schedules (runtime/send_recv_cache.h), one per distinct step.
  SendRecvCache& send_recv_cache() { return state_->send_recv_cache; }

 private:
  struct State {
    explicit State(MeshComms c) : comms(std::move(c)) {}
    MeshComms comms;
    BufferPool buffers;
    SendRecvCache send_recv_cache;
  };
  explicit RankContext(std::unique_ptr<State> state) : state_(std::move(state)) {}
  std::unique_ptr<State> state_;
};

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_RANK_CONTEXT_H_
