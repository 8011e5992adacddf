// Training on one rank: the whole Qwen2.5-VL model (vision tower and text decoder) on one device,
// driven by a normalised job spec. The reference that parallel layouts are checked against.
//
// Create() builds, in order: the tokenizer and chat template, the dataset mix and the resumable
// data loader (spec.data; relative paths are relative to the data root), the model (seeded with
// at::manual_seed(training.seed), then Hugging Face's initialisation or the strict load of
// model.weights_path), AdamW with its two parameter groups and the learning-rate schedule
// (optimizer.h, lr_schedule.h).
//
// One Step(): the next training.batch_size samples (all of them: on one rank the global batch is
// the local batch), packed into sequences of at most data.max_seq_len tokens; for each packed
// sequence a forward pass and a backward pass of (its loss sum / the step's number of loss
// targets), so that the gradients are those of the mean loss over the step whatever the packing;
// then clipping, the learning rate of the schedule, and one AdamW update. A step whose loss or
// gradient norm is not finite is an error and updates nothing.
//
// Precision: a stage whose dtype is bf16 runs under bf16 autocast on its device, CUDA or CPU
// (compat::AutocastGuard: matmuls, linears and convolutions in bf16), with fp32 master weights,
// fp32 gradients and fp32 optimizer state; fp16 is refused (it would need loss scaling).
// Spec fields about the parallel layout (degrees, ZeRO stage, data_parallel_size, placement)
// do not apply on one rank: notes() says so.
//
// Determinism: on the CPU two trainers from the same spec produce bit-identical losses
// (same seed: same weights, same data order; LibTorch's CPU kernels are deterministic for a
// fixed thread count).
//
// Thread-safety: not thread-safe; one training thread owns it. LibTorch errors are returned as
// Statuses (CatchTorch), never thrown.
#ifndef DHP_WORKER_RANK_TRAINER_H_
#define DHP_WORKER_RANK_TRAINER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/data/data_loader.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/weights.h"
#include "worker/optim/lr_schedule.h"
#include "worker/rank/data_pipeline.h"
#include "worker/optim/optimizer.h"

namespace dhp {

struct TrainerOptions {
  // Relative annotation paths, image roots and model.weights_path are taken relative to this.
  std::string data_root = ".";
  // tokenizer.json. Empty: <model.weights_path>/tokenizer.json when weights are given, else
  // configs/tiny-tokenizer.json (relative to the working directory) for the tiny preset; other
  // presets then need one.
  std::string tokenizer_path;
  std::string device = "cpu";  // "cpu", "cuda", "cuda:1"
  // true: samples that fail to build are skipped and counted (DataLoader::skipped()); false:
  // the step fails with the sample's error.
  bool skip_invalid_samples = true;
  // When set, the first step writes its batch (input_ids, labels, cu_seqlens over all its
  // samples, pixel_values, image_grid_thw) to this safetensors file, with the step's loss
  // (17 digits) and loss target count as metadata: what tests/hf_model_parity.py gives
  // transformers to compare the loss of a step that dhp-train took.
  std::string dump_first_batch;
  // When set, the first step writes every parameter's gradient of the step's mean loss (before
  // clipping; zeros for a parameter that got none) to this safetensors file, by checkpoint name:
  // what tells a parity test where Adam's first update is well conditioned
  // (tests/multiprocess_parity_test.py).
  std::string save_first_grads;
};

struct StepStats {
  int64_t step = 0;        // 1-based: the number of updates done, this one included
  double loss = 0;         // mean next-token loss over the step's loss targets
  double lr = 0;           // the learning rate this update used
  double grad_norm = 0;    // global L2 norm of the gradients, before clipping
  int64_t samples = 0;
  int64_t sequences = 0;   // packed sequences (one forward/backward each)
  int64_t tokens = 0;      // all tokens, image tokens included
  int64_t image_tokens = 0;
  int64_t loss_tokens = 0; // positions whose next-token loss is taken
  int64_t patches = 0;     // vision patches
  double seconds = 0;      // wall time of the whole step
  double data_seconds = 0; // of which loading, preprocessing and packing
};

class SingleRankTrainer {
 public:
  // `spec` must be normalised (ParseJobSpec / NormalizeAndValidateSpec). Errors: unknown preset,
  // tokenizer missing or not matching the preset's special tokens, unreadable datasets (naming
  // the file), a checkpoint that does not match the model, a device LibTorch cannot use, fp16 on
  // CUDA.
  static absl::StatusOr<std::unique_ptr<SingleRankTrainer>> Create(const v1::JobSpec& spec,
                                                                   const TrainerOptions& options);
  ~SingleRankTrainer();

  // One training step (see the file comment). OutOfRange once max_steps() steps are done.
  absl::StatusOr<StepStats> Step();

  int64_t step() const { return step_; }            // updates done so far
  int64_t max_steps() const { return max_steps_; }  // training.max_steps, or from the epochs
  const ModelPreset& preset() const { return preset_; }
  const at::Device& device() const { return device_; }
  Qwen2_5_VL& model() { return model_; }
  TrainingOptimizer& optimizer() { return *optimizer_; }
  const data::DataLoader& loader() const { return *loader_; }
  const LrScheduleConfig& schedule() const { return schedule_; }
  // Parameters by checkpoint name (for SaveWeights).
  NamedTensors NamedParameters() const;
  // What the trainer decided about the spec (ignored layout fields, precision, data sizes),
  // one line each, for the caller to log.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  SingleRankTrainer(const v1::JobSpec& spec, const ModelPreset& preset, const at::Device& device);
  absl::Status Init(const TrainerOptions& options);
  absl::Status InitModel(const TrainerOptions& options, const OptimizerConfig& optimizer);
  // (sum of the per-token losses [] fp32, count [] int64) of one packed batch.
  std::pair<at::Tensor, at::Tensor> ForwardLossSum(const PackedBatch& batch);

  v1::JobSpec spec_;
  ModelPreset preset_;
  std::string dump_first_batch_;  // TrainerOptions::dump_first_batch
  std::string save_first_grads_;  // TrainerOptions::save_first_grads
  at::Device device_;
  bool vision_bf16_ = false;  // autocast per stage
  bool text_bf16_ = false;

  std::unique_ptr<DataPipeline> data_;
  std::unique_ptr<data::DataLoader> loader_;

  Qwen2_5_VL model_{nullptr};
  std::unique_ptr<TrainingOptimizer> optimizer_;
  LrScheduleConfig schedule_;
  int64_t step_ = 0;
  int64_t max_steps_ = 0;
  std::vector<std::string> notes_;
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_TRAINER_H_
