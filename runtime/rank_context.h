// RankContext: everything one rank runs with.
//
// One per rank (a thread of an in-process world, or a process): the rank's communicators (a
// MeshComms: the world and the lazily split groups of the mesh), its device and that device's
// runtime (allocator, streams, byte operations), two streams, the executor's step buffers
// (BufferPool) and its send/recv schedules (SendRecvCache). Every op, module, optimizer and
// checkpoint call takes it, the way torch code takes a process group plus the current device and
// stream.
//
// Streams. The *compute stream* runs kernels: on the host it is the rank's own thread (an inline
// stream: work runs as it is issued); on a GPU an asynchronous CUDA stream. The *communication
// stream* runs collectives and plan steps: on the host a worker thread (runtime/stream.h), so an
// asynchronous redistribution (RedistributeAsync, FSDP prefetch, bucketed gradient reduction)
// overlaps with the rank's compute. Every collective of a rank runs on its communication stream,
// issued in program order by the rank's thread, so every rank runs its collectives in the same
// order. RunCollective orders a piece of communication after the compute issued so far and makes
// the compute stream wait for it; on the host it returns once the work ran (and runs it on the
// caller's thread when the communication stream is idle, so a synchronous redistribution costs no
// thread hand-off). With RankContextOptions::comm_stream = false both streams are the compute
// stream: everything is serial, and asynchronous forms complete before they return.
//
// Direct use of world() / Group() communicators (control messages: checkpoint metadata, flags)
// must not overlap pending communication: call it through RunCollective, or after SyncComm().
//
//   MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, target, ctx));   // runtime/redistribute.h
//   int64_t flag = 1;
//   MF_RETURN_IF_ERROR(ctx.RunCollective([&]() -> Status {
//     return ctx.world().AllReduce(&flag, &flag, 1, DType::kI64, ReduceOp::kMax, ctx.comm_stream());
//   }, "flag"));
//
// A RankContext is used by one thread at a time (its rank's). Moving it keeps every address the
// executor and the streams hold (the state lives behind a pointer). Destroying it waits for the
// pending communication.
//
// Errors (Create): those of MeshComms::Create (the mesh must cover the world communicator's ranks
// exactly); a device whose runtime is not linked in (UNAVAILABLE); a device other than the world
// communicator's (INVALID_ARGUMENT: NCCL communicators live on their GPU, the others on the host).
#ifndef MESHFLOW_RUNTIME_RANK_CONTEXT_H_
#define MESHFLOW_RUNTIME_RANK_CONTEXT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <functional>
#include <memory>
#include <span>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/runtime/buffer_pool.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/prefetch_cache.h"
#include "meshflow/runtime/send_recv_cache.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

struct RankContextOptions {
  // The rank's device; nullopt: the world communicator's (the host for threads and MPI).
  std::optional<Device> device;
  // A communication stream of its own (true), or communication on the compute stream (serial).
  bool comm_stream = true;
};

class RankContext {
 public:
  static StatusOr<RankContext> Create(std::shared_ptr<Communicator> world, DeviceMesh mesh,
                                      RankContextOptions options = {});
  // For backends that hand out a Communicator& (e.g. ThreadWorld::Run): does not own it.
  static StatusOr<RankContext> Create(Communicator& world, DeviceMesh mesh, RankContextOptions options = {});

  RankContext(RankContext&&) noexcept = default;
  RankContext& operator=(RankContext&&) noexcept = default;
  ~RankContext();

  const DeviceMesh& mesh() const { return state_->comms.mesh(); }
  MeshComms& comms() { return state_->comms; }
  Communicator& world() { return state_->comms.world(); }
  int world_rank() const { return state_->comms.world_rank(); }
  // The communicator of the flattened group over `dims` (MeshComms::Group; collective on first use:
  // call it from communication work).
  StatusOr<Communicator*> Group(std::span<const int> dims) { return state_->comms.Group(dims); }

  Device device() const { return state_->runtime->device(); }
  DeviceRuntime& runtime() { return *state_->runtime; }
  Stream& compute_stream() { return *state_->compute; }
  const std::shared_ptr<Stream>& compute_stream_ptr() const { return state_->compute; }
  Stream& comm_stream() { return *state_->comm; }
  const std::shared_ptr<Stream>& comm_stream_ptr() const { return state_->comm; }
  bool has_comm_stream() const { return state_->comm != state_->compute; }

  // Runs `work` on the communication stream after the compute issued so far, and makes the compute
  // stream wait for it. Returns `work`'s Status (on a device: its enqueue status; device errors
  // surface at the next synchronization). The stream does not keep `work`'s error: a failed
  // collective breaks its communicator, not the stream.
  Status RunCollective(std::function<Status()> work, const char* label = "collective");
  // Waits until every communication issued so far ran (host), or makes the compute stream wait for
  // it (device). Returns the first asynchronous error not yet reported.
  Status SyncComm();

  // The plan executor's step buffers (runtime/buffer_pool.h) on this device, homed on the
  // communication stream. Used from communication work only.
  BufferPool& buffers() { return state_->buffers; }
  // The executor's send_recv schedules (runtime/send_recv_cache.h), one per distinct step. Used
  // from communication work only.
  SendRecvCache& send_recv_cache() { return state_->send_recv_cache; }
  // Redistributions started ahead of the op that needs them (runtime/prefetch_cache.h; FSDP
  // prefetch). Used by the rank's thread.
  PrefetchCache& prefetches() { return state_->prefetches; }

 private:
  struct State {
    State(MeshComms c, DeviceRuntime* rt) : comms(std::move(c)), runtime(rt) {}
    ~State();
    MeshComms comms;
    DeviceRuntime* runtime;
    std::shared_ptr<Stream> compute, comm;
    BufferPool buffers;
    SendRecvCache send_recv_cache;
    PrefetchCache prefetches;
  };
  explicit RankContext(std::unique_ptr<State> state) : state_(std::move(state)) {}
  std::unique_ptr<State> state_;
};

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_RANK_CONTEXT_H_
