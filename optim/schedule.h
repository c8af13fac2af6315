// Learning-rate schedules: pure maps from a step index to a learning rate.
#ifndef MESHFLOW_OPTIM_SCHEDULE_H_
#define MESHFLOW_OPTIM_SCHEDULE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>

#include "meshflow/base/status.h"

namespace meshflow {

// Linear warmup then cosine decay (the schedule of transformers' get_cosine_schedule_with_warmup,
// with a floor): for the 0-based index `step` of the step about to run,
//   step < warmup_steps:            lr = base_lr * step / warmup_steps         (0 at step 0)
//   warmup_steps <= step < total:   p = (step - warmup_steps) / (total_steps - warmup_steps)
//                                   lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2
//   step >= total_steps:            lr = min_lr
// A negative step counts as step 0. Pure (no state): apply it with opt->set_lr(s.LrAt(t)).
//
//   MF_ASSIGN_OR_RETURN(WarmupCosineSchedule s, WarmupCosineSchedule::Create({.base_lr = 1e-3,
//                                                .warmup_steps = 100, .total_steps = 1000}));
//   MF_RETURN_IF_ERROR(opt->set_lr(s.LrAt(opt->step_count())));
//
// Errors (INVALID_ARGUMENT, naming the value): base_lr or min_lr negative or not finite, min_lr >
// base_lr, warmup_steps < 0, total_steps < warmup_steps.
struct WarmupCosineOptions {
  double base_lr = 1e-3;
  double min_lr = 0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
};

class WarmupCosineSchedule {
 public:
  static StatusOr<WarmupCosineSchedule> Create(WarmupCosineOptions options);
  double LrAt(int64_t step) const;
  const WarmupCosineOptions& options() const { return options_; }

 private:
  explicit WarmupCosineSchedule(WarmupCosineOptions options) : options_(options) {}
  WarmupCosineOptions options_;
};

}  // namespace meshflow

#endif  // MESHFLOW_OPTIM_SCHEDULE_H_
