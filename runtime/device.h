// Device: where a tensor's bytes live and where its kernels and copies run.
//
// A value type: the host (CPU memory, host kernels) or one CUDA device by ordinal. Layouts and the
// planner never see a Device; a Tensor's storage has one (dtensor/tensor.h), and the runtime
// dispatches kernels, copies and collectives on it (runtime/device_runtime.h).
//
//   Device d = Device::Cuda(1);
//   d.ToString();                              // "cuda:1"
//   MF_ASSIGN_OR_RETURN(Device h, ParseDevice("host"));
//   h == Device::Host();                       // true
//
// Errors: ParseDevice rejects anything but "host", "cpu", "cuda" (ordinal 0) and "cuda:N"
// (0 <= N < 1024), naming the text.
#ifndef MESHFLOW_RUNTIME_DEVICE_H_
#define MESHFLOW_RUNTIME_DEVICE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <string>
#include <string_view>
#include <variant>

#include "meshflow/base/status.h"

namespace meshflow {

struct HostDevice {
  friend bool operator==(const HostDevice&, const HostDevice&) = default;
};
struct CudaDevice {
  int ordinal = 0;
  friend bool operator==(const CudaDevice&, const CudaDevice&) = default;
};

class Device {
 public:
  using Kind = std::variant<HostDevice, CudaDevice>;

  constexpr Device() = default;  // the host
  static constexpr Device Host() { return Device(HostDevice{}); }
  static constexpr Device Cuda(int ordinal) { return Device(CudaDevice{ordinal}); }

  const Kind& kind() const { return kind_; }
  bool is_host() const { return std::holds_alternative<HostDevice>(kind_); }
  bool is_cuda() const { return std::holds_alternative<CudaDevice>(kind_); }
  // The CUDA ordinal; -1 for the host.
  int cuda_ordinal() const { return is_cuda() ? std::get<CudaDevice>(kind_).ordinal : -1; }

  // "host" or "cuda:N".
  std::string ToString() const;

  friend bool operator==(const Device&, const Device&) = default;

 private:
  constexpr explicit Device(Kind kind) : kind_(kind) {}
  Kind kind_ = HostDevice{};
};

// Largest CUDA ordinal ParseDevice accepts, plus one.
inline constexpr int kMaxCudaOrdinal = 1024;

// "host" / "cpu" -> Host; "cuda" -> Cuda(0); "cuda:N" -> Cuda(N). INVALID_ARGUMENT otherwise.
StatusOr<Device> ParseDevice(std::string_view text);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_DEVICE_H_
