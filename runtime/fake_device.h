// A fake GPU for host tests: a CUDA device ordinal whose memory is host memory and whose streams
// are asynchronous host streams (worker threads), compute stream included.
//
// It lets the device paths of the runtime run on a machine without a GPU with the orderings a GPU
// has: kernels, copies and collectives of a rank are work on two asynchronous streams joined only
// by events, buffers have home streams and cross-stream uses, and element access on the host aborts
// (Tensor::data on a device tensor). An ordering bug (a missing event wait, a buffer freed while
// another stream still reads it) then fails a test instead of passing by luck.
//
//   InstallFakeCudaDevices();                        // once per test binary, before any CUDA use
//   MF_ASSIGN_OR_RETURN(DeviceRuntime* rt, GetDeviceRuntime(Device::Cuda(0)));
//   // rt->NewComputeStream(...) is asynchronous; rt->allocator() caches per stream.
//
// FakeDeviceCommunicator wraps a host communicator (e.g. a ThreadWorld rank's) and reports the
// fake device, so a RankContext on Device::Cuda(i) can run the executor on it: its stream-ordered
// collectives run the wrapped blocking collective as work of the given stream.
//
// Test support only (testonly target //runtime:fake_device). A process that installs it cannot
// use a real CUDA runtime (the factory is registered once).
#ifndef MESHFLOW_RUNTIME_FAKE_DEVICE_H_
#define MESHFLOW_RUNTIME_FAKE_DEVICE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/runtime/device.h"

namespace meshflow {

// Registers the fake as the CUDA runtime factory (idempotent). Returns false when another factory
// (a real CUDA runtime) was registered first.
bool InstallFakeCudaDevices();

class FakeDeviceCommunicator final : public Communicator {
 public:
  FakeDeviceCommunicator(std::shared_ptr<Communicator> inner, Device device)
      : inner_(std::move(inner)), device_(device) {}
  // Does not own `inner`.
  FakeDeviceCommunicator(Communicator& inner, Device device)
      : FakeDeviceCommunicator(std::shared_ptr<Communicator>(&inner, [](Communicator*) {}), device) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int world_rank() const override { return inner_->world_rank(); }
  const std::vector<int>& world_ranks() const override { return inner_->world_ranks(); }
  std::string backend() const override { return inner_->backend() + "+fake-device"; }
  Device device() const override { return device_; }

  Status AllGatherV(const void* send, int64_t send_count, void* recv, std::span<const int64_t> recv_counts,
                    DType dtype, CallerSite where) override {
    return inner_->AllGatherV(send, send_count, recv, recv_counts, dtype, where);
  }
  Status ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype, ReduceOp op,
                        CallerSite where) override {
    return inner_->ReduceScatterV(send, counts, recv, dtype, op, where);
  }
  Status AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, CallerSite where) override {
    return inner_->AllReduce(send, recv, count, dtype, op, where);
  }
  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype, CallerSite where) override {
    return inner_->AllToAllV(send, send_counts, recv, recv_counts, dtype, where);
  }
  Status Broadcast(void* buffer, int64_t count, DType dtype, int root, CallerSite where) override {
    return inner_->Broadcast(buffer, count, dtype, root, where);
  }
  Status Barrier(CallerSite where) override { return inner_->Barrier(where); }
  Status SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) override {
    return inner_->SendRecv(sends, recvs, dtype);
  }
  StatusOr<std::shared_ptr<Communicator>> Split(int color, int key, CallerSite where) override {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> sub, inner_->Split(color, key, where));
    if (sub == nullptr) return sub;
    return std::shared_ptr<Communicator>(std::make_shared<FakeDeviceCommunicator>(std::move(sub), device_));
  }
  ByteCounters counters() const override { return inner_->counters(); }
  void ResetCounters() override { inner_->ResetCounters(); }

 private:
  std::shared_ptr<Communicator> inner_;
  Device device_;
};

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_FAKE_DEVICE_H_
