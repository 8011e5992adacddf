#include "worker/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace dhp {

absl::Status ValidateLrSchedule(const LrScheduleConfig& c) {
  if (!std::isfinite(c.peak) || c.peak < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning rate schedule: peak ", c.peak, " must be finite and >= 0"));
  }
  if (!std::isfinite(c.floor) || c.floor < 0 || c.floor > c.peak) {
    return absl::InvalidArgumentError(absl::StrCat("learning rate schedule: floor ", c.floor,
                                                   " must be finite and in [0, peak ", c.peak,
                                                   "]"));
  }
  if (c.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning rate schedule: warmup_steps ", c.warmup_steps, " is negative"));
  }
  if (c.max_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning rate schedule: max_steps ", c.max_steps, " must be at least 1"));
  }
  return absl::OkStatus();
}

double LearningRateAt(const LrScheduleConfig& c, int64_t step) {
  step = std::max<int64_t>(step, 0);
  if (step < c.warmup_steps) {
    return c.peak * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  }
  if (c.kind == LrScheduleKind::kConstant) return c.peak;
  const double span = static_cast<double>(std::max<int64_t>(1, c.max_steps - c.warmup_steps));
  const double p = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  const double coeff = c.kind == LrScheduleKind::kCosine ? 0.5 * (1.0 + std::cos(M_PI * p))
                                                         : 1.0 - p;
  return c.floor + (c.peak - c.floor) * coeff;
}

}  // namespace dhp
