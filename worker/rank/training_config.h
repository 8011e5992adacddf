// The optimizer, learning-rate schedule and length of a training run, from a normalised job
// spec's `training` section. Shared by the single-rank trainer and the distributed rank so that
// both train a spec identically.
//
// Thread-safety: pure functions.
#ifndef DHP_WORKER_RANK_TRAINING_CONFIG_H_
#define DHP_WORKER_RANK_TRAINING_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/optim/lr_schedule.h"
#include "worker/optim/optimizer.h"

namespace dhp {

struct TrainingConfig {
  OptimizerConfig optimizer;  // learning_rate, weight_decay, grad_clip_norm of the spec
  LrScheduleConfig schedule;  // kind, peak, floor, warmup; max_steps = the run's length
  int64_t max_steps = 0;      // training.max_steps, or epochs * epoch_size / batch_size (up)
  std::vector<std::string> notes;  // how max_steps was derived from epochs, if it was
  // The distributed rank's precision (DistTrainerOptions): vision.dtype, text.dtype and
  // training.grad_reduce_dtype as LibTorch dtypes (fp32 or bf16).
  at::ScalarType vision_dtype = at::kFloat;
  at::ScalarType text_dtype = at::kFloat;
  at::ScalarType grad_reduce_dtype = at::kFloat;
  // training.grad_accum_dtype is fp32 (a bf16 stage sums micro-batches in fp32 buffers).
  bool fp32_grad_accumulation = true;
};

// `epoch_size`: samples per epoch of the data mix (used when the spec counts epochs).
// InvalidArgument for a batch size below 1 or a schedule lr_schedule.h refuses; Unimplemented
// for an fp16 dtype (validation refuses those at submit).
absl::StatusOr<TrainingConfig> TrainingConfigForSpec(const v1::JobSpec& spec, int64_t epoch_size);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_TRAINING_CONFIG_H_
