#include "meshflow/runtime/device.h"

#include <charconv>

namespace meshflow {

std::string Device::ToString() const {
  if (is_host()) return "host";
  return "cuda:" + std::to_string(cuda_ordinal());
}

StatusOr<Device> ParseDevice(std::string_view text) {
  if (text == "host" || text == "cpu") return Device::Host();
  if (text == "cuda") return Device::Cuda(0);
  constexpr std::string_view kPrefix = "cuda:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = text.substr(kPrefix.size());
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (!digits.empty() && ec == std::errc() && end == digits.data() + digits.size() && ordinal >= 0 &&
        ordinal < kMaxCudaOrdinal) {
      return Device::Cuda(ordinal);
    }
  }
  return InvalidArgumentError("device '" + std::string(text) +
                              "' is not one of host, cpu, cuda, cuda:N (0 <= N < " +
                              std::to_string(kMaxCudaOrdinal) + ")");
}

}  // namespace meshflow
