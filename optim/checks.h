// Argument checks shared by the optimizers and the LR schedules (internal): INVALID_ARGUMENT
// naming the option and its value.
#ifndef MESHFLOW_OPTIM_CHECKS_H_
#define MESHFLOW_OPTIM_CHECKS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <string_view>

#include "meshflow/base/status.h"

namespace meshflow::optim_internal {

// "lr -1 must be finite and >= 0" unless v is finite and >= 0.
Status CheckNonNegative(std::string_view what, double v);

}  // namespace meshflow::optim_internal

#endif  // MESHFLOW_OPTIM_CHECKS_H_
