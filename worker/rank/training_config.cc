#include "worker/rank/training_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dhp {
namespace {

LrScheduleKind ScheduleKind(v1::LrSchedule s) {
  switch (s) {
    case v1::LR_SCHEDULE_CONSTANT:
      return LrScheduleKind::kConstant;
    case v1::LR_SCHEDULE_LINEAR:
      return LrScheduleKind::kLinear;
    default:
      return LrScheduleKind::kCosine;
  }
}

}  // namespace

absl::StatusOr<TrainingConfig> TrainingConfigForSpec(const v1::JobSpec& spec, int64_t epoch_size) {
  const v1::TrainingSpec& tr = spec.training();
  if (tr.batch_size() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.batch_size: ", tr.batch_size(), " (is the spec normalised?)"));
  }
  TrainingConfig c;
  c.max_steps = tr.max_steps();
  if (c.max_steps <= 0) {  // epochs
    const int64_t draws = int64_t{tr.epochs()} * epoch_size;
    c.max_steps = (draws + tr.batch_size() - 1) / tr.batch_size();
    c.notes.push_back(absl::StrCat("training.epochs ", tr.epochs(), " of ", epoch_size,
                                   " samples at batch ", tr.batch_size(), ": ", c.max_steps,
                                   " steps"));
  }
  c.optimizer.learning_rate = tr.learning_rate();
  c.optimizer.weight_decay = tr.weight_decay();
  c.optimizer.grad_clip_norm = tr.grad_clip_norm();
  c.schedule.kind = ScheduleKind(tr.schedule());
  c.schedule.peak = tr.learning_rate();
  c.schedule.floor = tr.min_learning_rate();
  c.schedule.warmup_steps = tr.warmup_steps();
  c.schedule.max_steps = std::max<int64_t>(c.max_steps, 1);
  if (absl::Status s = ValidateLrSchedule(c.schedule); !s.ok()) return s;
  return c;
}

}  // namespace dhp
