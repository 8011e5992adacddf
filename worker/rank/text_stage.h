// TextStage: the text decoder's part of the distributed step on one text rank: forward and loss
// over this replica's packed sequence with the image embeddings of the hand-off (handoff.h)
// scattered into its <|image_pad|> rows, backward to d(loss)/d(image embeddings) for the vision
// stage, and the TrainingStage duties (stage.h).
//
// The strategy today (text_stage.cc): Megatron tensor parallelism over "text.tp<d>"
// (TextTpModel: vocab-parallel embedding and cross entropy, column/row-parallel layers) with
// AdamW (TrainingOptimizer) on this rank's shards; gradients: FinishTpGradients, then a sum over
// "text.dp<j>" (tp_state.h). Checkpoint state, in this order:
//   "model.*", "lm_head.*"                          this rank's TP shards
//   "optim.text.<param>.{exp_avg,exp_avg_sq,step}"  AdamW state of each updated shard
//                                                   (optimizer_state.h)
//
// Errors: Statuses; Forward and Backward may throw c10::Error (call them inside the rank's
// CatchTorch boundary). Thread-safety: not thread-safe; the rank's training thread. Process
// groups are borrowed; the source only while creating.
#ifndef DHP_WORKER_RANK_TEXT_STAGE_H_
#define DHP_WORKER_RANK_TEXT_STAGE_H_

#include <ATen/ATen.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "worker/comm/process_groups.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/tensor_source.h"
#include "worker/rank/stage.h"

namespace dhp {

class TextStage : public TrainingStage {
 public:
  // The labelled tokens of `batch` (positions whose next-token loss Forward takes): [] int64 on
  // the batch's device. Local; known before any forward, so that the loss of every micro-batch
  // can be divided by the global count before its backward.
  virtual at::Tensor LabelledTokens(const PackedBatch& batch) const = 0;
  // Forward and loss over `batch` with `image` [M, H] (undefined: no images) scattered into its
  // image rows: the loss summed over the labelled tokens, [] fp32, identical on every TP rank.
  // The stage keeps the graph for Backward.
  virtual absl::StatusOr<at::Tensor> Forward(const PackedBatch& batch,
                                             const at::Tensor& image) = 0;
  // Backward of the last Forward's loss sum / `global_count` (the labelled tokens of the whole
  // global batch: every micro-batch of every replica). Returns d(loss)/d(image) [M, H],
  // contiguous, complete and identical on every TP rank (zeros where no gradient reached it);
  // undefined when Forward had no image. Gradients accumulate until Step clears them.
  virtual absl::StatusOr<at::Tensor> Backward(double global_count) = 0;
};

// The text stage of this rank's text role (groups.text_coord() must be set), reading only its
// TP slices from `source` (full HF names and shapes), on the source's device, converted to
// options.dtype.
absl::StatusOr<std::unique_ptr<TextStage>> CreateTextStage(const ModelPreset& preset,
                                                           const TensorSource& source,
                                                           comm::ProcessGroups& groups,
                                                           const StageOptions& options);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_TEXT_STAGE_H_
