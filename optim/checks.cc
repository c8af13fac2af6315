#include "meshflow/optim/checks.h"

#include <cmath>
#include <string>

#include "meshflow/base/strings.h"

namespace meshflow::optim_internal {

Status CheckNonNegative(std::string_view what, double v) {
  if (!std::isfinite(v) || v < 0) {
    return InvalidArgumentError(std::string(what) + " " + DoubleString(v) + " must be finite and >= 0");
  }
  return Status::Ok();
}

}  // namespace meshflow::optim_internal
