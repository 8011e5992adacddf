#include "worker/rank/training_config.h"

#include <algorithm>
#include <utility>

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

// fp32 (and unset, in specs stored before the field) or bf16; fp16 is refused by validation.
absl::StatusOr<at::ScalarType> TrainingDtype(const char* field, v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_BF16:
      return at::kBFloat16;
    case v1::DTYPE_FP16:
      return absl::UnimplementedError(absl::StrCat(
          field, ": fp16 needs loss scaling, which dhp does not implement; use bf16 or fp32"));
    default:
      return at::kFloat;
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
  const std::pair<const char*, v1::DType> dtypes[] = {
      {"vision.dtype", spec.vision().dtype()},
      {"text.dtype", spec.text().dtype()},
      {"training.grad_reduce_dtype", tr.grad_reduce_dtype()},
      {"training.grad_accum_dtype", tr.grad_accum_dtype()}};
  at::ScalarType accum = at::kFloat;
  at::ScalarType* out[] = {&c.vision_dtype, &c.text_dtype, &c.grad_reduce_dtype, &accum};
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<at::ScalarType> d = TrainingDtype(dtypes[i].first, dtypes[i].second);
    if (!d.ok()) return d.status();
    *out[i] = *d;
  }
  c.fp32_grad_accumulation = accum == at::kFloat;
  return c;
}

}  // namespace dhp
