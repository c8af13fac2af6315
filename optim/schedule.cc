#include "meshflow/optim/schedule.h"

#include <cmath>
#include <numbers>
#include <string>

#include "meshflow/base/strings.h"
#include "meshflow/optim/checks.h"

namespace meshflow {
namespace {

std::string Num(double v) { return DoubleString(v); }

using optim_internal::CheckNonNegative;

}  // namespace

StatusOr<WarmupCosineSchedule> WarmupCosineSchedule::Create(WarmupCosineOptions options) {
  MF_RETURN_IF_ERROR(CheckNonNegative("base_lr", options.base_lr));
  MF_RETURN_IF_ERROR(CheckNonNegative("min_lr", options.min_lr));
  if (options.min_lr > options.base_lr) {
    return InvalidArgumentError("min_lr " + Num(options.min_lr) + " must be <= base_lr " + Num(options.base_lr));
  }
  if (options.warmup_steps < 0) {
    return InvalidArgumentError("warmup_steps " + std::to_string(options.warmup_steps) + " must be >= 0");
  }
  if (options.total_steps < options.warmup_steps) {
    return InvalidArgumentError("total_steps " + std::to_string(options.total_steps) + " must be >= warmup_steps " +
                                std::to_string(options.warmup_steps));
  }
  return WarmupCosineSchedule(options);
}

double WarmupCosineSchedule::LrAt(int64_t step) const {
  const WarmupCosineOptions& o = options_;
  if (step < 0) step = 0;
  if (step < o.warmup_steps) {
    return o.base_lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  }
  if (step >= o.total_steps) return o.min_lr;
  const double p = static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.total_steps - o.warmup_steps);
  return o.min_lr + (o.base_lr - o.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace meshflow
