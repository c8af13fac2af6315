#include "meshflow/dtensor/tensor_buffer.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "meshflow/runtime/device_runtime.h"

namespace meshflow {

TensorBuffer::TensorBuffer(int64_t bytes) {
  if (bytes <= 0) return;
  StatusOr<void*> p = HostAllocator().Allocate(bytes);
  if (!p.ok()) {
    std::fprintf(stderr, "meshflow: TensorBuffer: %s\n", p.status().ToString().c_str());
    std::abort();
  }
  data_ = static_cast<std::byte*>(*p);
  size_ = capacity_ = bytes;
  allocator_ = &HostAllocator();
}

StatusOr<TensorBuffer> TensorBuffer::Allocate(Device device, int64_t bytes, std::shared_ptr<Stream> stream) {
  if (bytes < 0) return InvalidArgumentError("TensorBuffer::Allocate: negative size " + std::to_string(bytes));
  if (stream != nullptr && stream->device() != device) {
    return InvalidArgumentError("TensorBuffer::Allocate: a buffer on " + device.ToString() + " for stream '" +
                                stream->name() + "' on " + stream->device().ToString());
  }
  TensorBuffer b;
  b.device_ = device;
  b.stream_ = std::move(stream);
  if (bytes == 0) return b;
  MF_ASSIGN_OR_RETURN(DeviceRuntime * rt, GetDeviceRuntime(device));
  MF_ASSIGN_OR_RETURN(void* p, rt->allocator().Allocate(bytes, b.stream_.get()));
  b.data_ = static_cast<std::byte*>(p);
  b.size_ = b.capacity_ = bytes;
  b.allocator_ = &rt->allocator();
  return b;
}

TensorBuffer::TensorBuffer(TensorBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      allocator_(std::exchange(other.allocator_, nullptr)),
      device_(other.device_),
      stream_(std::move(other.stream_)),
      uses_(std::move(other.uses_)) {}

TensorBuffer& TensorBuffer::operator=(TensorBuffer&& other) noexcept {
  if (this == &other) return *this;
  Release();
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  capacity_ = std::exchange(other.capacity_, 0);
  allocator_ = std::exchange(other.allocator_, nullptr);
  device_ = other.device_;
  stream_ = std::move(other.stream_);
  uses_ = std::move(other.uses_);
  return *this;
}

Status TensorBuffer::Resize(int64_t bytes) {
  if (bytes < 0) return InvalidArgumentError("TensorBuffer::Resize: negative size " + std::to_string(bytes));
  if (bytes <= capacity_) {
    size_ = bytes;
    return Status::Ok();
  }
  MF_ASSIGN_OR_RETURN(TensorBuffer fresh, Allocate(device_, bytes, stream_));
  *this = std::move(fresh);
  return Status::Ok();
}

void TensorBuffer::RecordStream(std::shared_ptr<Stream> stream) {
  if (stream == nullptr || stream == stream_) return;
  for (const std::shared_ptr<Stream>& s : uses_) {
    if (s == stream) return;
  }
  uses_.push_back(std::move(stream));
}

void TensorBuffer::Rehome(std::shared_ptr<Stream> home) {
  if (home == stream_) return;
  std::shared_ptr<Stream> old = std::exchange(stream_, std::move(home));
  for (size_t i = 0; i < uses_.size(); ++i) {
    if (uses_[i] == stream_) {
      uses_.erase(uses_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  RecordStream(std::move(old));
}

void TensorBuffer::Release() noexcept {
  if (allocator_ != nullptr && data_ != nullptr) {
    if (uses_.empty()) {
      allocator_->Deallocate(data_, capacity_, stream_.get());
    } else {
      std::vector<Stream*> others;
      others.reserve(uses_.size());
      for (const std::shared_ptr<Stream>& s : uses_) others.push_back(s.get());
      allocator_->Deallocate(data_, capacity_, stream_.get(), others);
    }
  }
  data_ = nullptr;
  size_ = capacity_ = 0;
  allocator_ = nullptr;
  uses_.clear();
}

}  // namespace meshflow
