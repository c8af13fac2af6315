#include "meshflow/runtime/rank_context.h"

#include <chrono>
#include <string>
#include <utility>

namespace meshflow {

StatusOr<RankContext> RankContext::Create(std::shared_ptr<Communicator> world, DeviceMesh mesh,
                                          RankContextOptions options) {
  if (world == nullptr) return InvalidArgumentError("RankContext: null world communicator");
  const Device comm_device = world->device();
  const Device device = options.device.value_or(comm_device);
  if (device != comm_device) {
    return InvalidArgumentError("RankContext: device " + device.ToString() + " but the " + world->backend() +
                                " world communicator moves " + comm_device.ToString() + " buffers");
  }
  MF_ASSIGN_OR_RETURN(DeviceRuntime * rt, GetDeviceRuntime(device));
  MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(std::move(world), std::move(mesh)));
  auto state = std::make_unique<State>(std::move(comms), rt);
  const std::string rank = std::to_string(state->comms.world_rank());
  MF_ASSIGN_OR_RETURN(state->compute, rt->NewComputeStream("rank " + rank + " compute"));
  if (options.comm_stream) {
    MF_ASSIGN_OR_RETURN(state->comm, rt->NewStream("rank " + rank + " comm"));
  } else {
    state->comm = state->compute;
  }
  // Host buffers carry no stream (host work is synchronous or owns its buffers); device buffers are
  // homed on the communication stream, where the executor uses them.
  state->buffers = device.is_host() ? BufferPool() : BufferPool(device, state->comm);
  return RankContext(std::move(state));
}

StatusOr<RankContext> RankContext::Create(Communicator& world, DeviceMesh mesh, RankContextOptions options) {
  return Create(std::shared_ptr<Communicator>(&world, [](Communicator*) {}), std::move(mesh), options);
}

RankContext::~RankContext() = default;

RankContext::State::~State() {
  // Pending communication may use the pool and the communicators: let it finish first.
  (void)prefetches.Clear();
  if (comm != nullptr) (void)comm->Synchronize();
  if (compute != nullptr) (void)compute->Synchronize();
  buffers.Clear();
}

Status RankContext::RunCollective(std::function<Status()> work, const char* label) {
  Stream& comm = *state_->comm;
  Stream& compute = *state_->compute;
  Status result;
  auto wrapped = [&result, &work]() -> Status {
    result = work();
    return Status::Ok();
  };
  // Host compute: the caller is the compute stream, so nothing is pending on it. A device's compute
  // stream may still run work the collective reads: order the comm stream after it, and the compute
  // stream after the collective.
  if (!compute.is_inline()) MF_RETURN_IF_ERROR(StreamWaitStream(comm, compute));
  const auto start = std::chrono::steady_clock::now();
  MF_RETURN_IF_ERROR(comm.RunNow(std::move(wrapped), label));  // `work` has run when this returns
  if (compute.is_inline()) {
    // The rank's thread ran (or waited for) the collective: exposed communication.
    compute.RecordBlocked(label, start, std::chrono::steady_clock::now());
  } else {
    MF_RETURN_IF_ERROR(StreamWaitStream(compute, comm));
  }
  return result;
}

Status RankContext::SyncComm() {
  Stream& comm = *state_->comm;
  Stream& compute = *state_->compute;
  if (&comm == &compute) return compute.Synchronize();
  if (compute.is_inline()) return comm.Synchronize();
  return StreamWaitStream(compute, comm);
}

}  // namespace meshflow
