// TensorBuffer: a Tensor's bytes. An owning, move-only byte buffer on a Device, allocated by that
// device's allocator (runtime/allocator.h, through runtime/device_runtime.h).
//
// Host buffers come from the host caching allocator, so a training step that frees and allocates
// the same large blocks gets them back without touching new pages. A device buffer may carry the
// stream it was allocated for (its *home* stream: the bytes are valid in that stream's order) and
// the other streams that used it (RecordStream); the allocator reuses its block only once those
// streams ran past the free. Capacity can pass from one tensor to another (Tensor::ReleaseBuffer,
// Tensor::Uninitialized(..., reuse)), e.g. through the executor's pool (runtime/buffer_pool.h).
//
//   TensorBuffer b(1024);                          // 1 KiB of uninitialized host memory
//   b.data()[0] = std::byte{7};
//   MF_RETURN_IF_ERROR(b.Resize(512));             // within the capacity: same memory, bytes kept
//   MF_ASSIGN_OR_RETURN(TensorBuffer d, TensorBuffer::Allocate(Device::Host(), 64));
//
// Errors: Allocate and Resize return the allocator's RESOURCE_EXHAUSTED (device memory), or
// UNAVAILABLE for a device whose runtime is not linked in. The host constructor aborts when the
// host is out of memory, as operator new would.
#ifndef MESHFLOW_DTENSOR_TENSOR_BUFFER_H_
#define MESHFLOW_DTENSOR_TENSOR_BUFFER_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/allocator.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {

class TensorBuffer {
 public:
  TensorBuffer() = default;  // empty, on the host, no allocation
  // `bytes` uninitialized host bytes. Precondition: bytes >= 0.
  explicit TensorBuffer(int64_t bytes);
  // `bytes` uninitialized bytes on `device`, valid in `stream`'s order (null: no stream).
  static StatusOr<TensorBuffer> Allocate(Device device, int64_t bytes, std::shared_ptr<Stream> stream = nullptr);

  TensorBuffer(TensorBuffer&& other) noexcept;
  TensorBuffer& operator=(TensorBuffer&& other) noexcept;
  TensorBuffer(const TensorBuffer&) = delete;
  TensorBuffer& operator=(const TensorBuffer&) = delete;
  ~TensorBuffer() { Release(); }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  Device device() const { return device_; }
  const std::shared_ptr<Stream>& stream() const { return stream_; }

  // Sets the size to `bytes`: within the capacity the memory and its bytes stay; above it a new
  // block is allocated on the same device and stream (contents not kept). Precondition: bytes >= 0.
  Status Resize(int64_t bytes);
  // Notes that `stream` (other than the home stream) used the bytes: the block is reused only
  // after the work enqueued on `stream` up to the free has run.
  void RecordStream(std::shared_ptr<Stream> stream);
  // Makes `home` the home stream (e.g. a result of communication handed to compute after the
  // compute stream waited for it): the old home counts as a use (RecordStream).
  void Rehome(std::shared_ptr<Stream> home);

 private:
  void Release() noexcept;

  std::byte* data_ = nullptr;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
  Allocator* allocator_ = nullptr;  // set when capacity_ > 0
  Device device_;
  std::shared_ptr<Stream> stream_;
  std::vector<std::shared_ptr<Stream>> uses_;
};

}  // namespace meshflow

#endif  // MESHFLOW_DTENSOR_TENSOR_BUFFER_H_
