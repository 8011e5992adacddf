// The learning-rate schedule of a training run: linear warmup, then constant, cosine or linear
// decay to a floor. No LibTorch.
//
// Semantics (those of Hugging Face's get_{constant,cosine,linear}_schedule_with_warmup and of
// Megatron-LM's OptimizerParamScheduler), for the update with 0-based index `step` (the number of
// updates already applied), W = warmup_steps, T = max_steps:
//   step < W:  lr = peak * step / W            (so the very first update uses lr 0 when W > 0)
//   step >= W: p  = min(1, (step - W) / max(1, T - W))
//              constant: lr = peak
//              cosine:   lr = floor + (peak - floor) * 0.5 * (1 + cos(pi * p))
//              linear:   lr = floor + (peak - floor) * (1 - p)
// so lr(W) = peak and lr(T) = floor (steps past T stay at the floor). `floor` is the spec's
// min_learning_rate (Megatron's min_lr; Hugging Face's schedules use 0); the constant schedule
// ignores it. The last update of a run of T steps has index T - 1, i.e. lr slightly above the
// floor, as in both reference implementations.
//
// Thread-safety: pure functions on plain structs.
#ifndef DHP_WORKER_OPTIM_LR_SCHEDULE_H_
#define DHP_WORKER_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace dhp {

enum class LrScheduleKind { kConstant, kCosine, kLinear };

struct LrScheduleConfig {
  LrScheduleKind kind = LrScheduleKind::kCosine;
  double peak = 1e-3;    // reached at step == warmup_steps
  double floor = 0.0;    // reached at step == max_steps (ignored by kConstant)
  int64_t warmup_steps = 0;
  int64_t max_steps = 1;
};

// InvalidArgument naming the field: negative or non-finite rates, floor above peak, negative
// warmup, max_steps < 1.
absl::Status ValidateLrSchedule(const LrScheduleConfig& config);

// The learning rate of update `step` (0-based; negative steps are treated as 0).
double LearningRateAt(const LrScheduleConfig& config, int64_t step);

}  // namespace dhp

#endif  // DHP_WORKER_OPTIM_LR_SCHEDULE_H_
