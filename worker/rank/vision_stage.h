// VisionStage: the vision encoder's part of the distributed step on one vision rank, whatever
// its parallel strategy: forward on this replica's packed sequence to the image embeddings that
// the hand-off (handoff.h) carries to the text stage, backward from their gradient, and the
// TrainingStage duties (stage.h: reductions, norm share, optimizer, checkpoint state).
//
// Strategies, one file each, chosen by CreateVisionStage from Layout::vision_parallelism:
//   vision_stage_ulysses.cc  Ulysses sequence parallelism over "vision.sp<d>" (the whole tower
//                            replicated), ZeRO-1 AdamW over "vision" (SP x dp);
//   vision_stage_tp.cc       Megatron tensor parallelism over "vision.tp<d>" (the baseline),
//                            ZeRO-1 AdamW per inner rank over "vision.dp<i>".
// Both share the ZeRO-1 half in vision_stage_zero1.h. A new strategy is a new file with its
// Create function declared below and one line in CreateVisionStage.
//
// Errors: Statuses; Forward and Backward may throw c10::Error (call them inside the rank's
// CatchTorch boundary, as DistTrainer::Step does). Thread-safety: not thread-safe; the rank's
// training thread. Process groups and the source are borrowed (the source only while creating).
#ifndef DHP_WORKER_RANK_VISION_STAGE_H_
#define DHP_WORKER_RANK_VISION_STAGE_H_

#include <ATen/ATen.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/process_groups.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/tensor_source.h"
#include "worker/model/vision_model.h"
#include "worker/parallel/zero1.h"
#include "worker/rank/stage.h"

namespace dhp {

class VisionStage : public TrainingStage {
 public:
  // This replica's packed sequence -> [M, out_hidden] image embeddings, one row per
  // <|image_pad|> token in input order, identical on every rank of the replica; detached (the
  // stage keeps the graph for Backward). Undefined when the sequence has no images.
  virtual absl::StatusOr<at::Tensor> Forward(const PackedBatch& batch) = 0;
  // Backward through the last Forward from d(loss)/d(embeddings) [M, out_hidden] (complete,
  // as the text stage computes it); nothing when that Forward had no images. Gradients
  // accumulate until Step clears them.
  virtual absl::Status Backward(const at::Tensor& grad) = 0;
  // The ZeRO-1 optimizer when the strategy has one (tests check its partition); else null.
  virtual const Zero1AdamW* zero1() const { return nullptr; }
};

// The vision stage of this rank's vision role (groups.vision_coord() must be set), reading only
// the tensors it trains from `source` ("visual.*", full HF names and shapes), on the source's
// device, converted to options.dtype (the strategies below take the source as it is).
absl::StatusOr<std::unique_ptr<VisionStage>> CreateVisionStage(const VisionConfig& config,
                                                               const TensorSource& source,
                                                               comm::ProcessGroups& groups,
                                                               const StageOptions& options);

// The strategies (same arguments and contract).
absl::StatusOr<std::unique_ptr<VisionStage>> CreateUlyssesVisionStage(
    const VisionConfig& config, const TensorSource& source, comm::ProcessGroups& groups,
    const StageOptions& options);
absl::StatusOr<std::unique_ptr<VisionStage>> CreateTpVisionStage(const VisionConfig& config,
                                                                 const TensorSource& source,
                                                                 comm::ProcessGroups& groups,
                                                                 const StageOptions& options);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_VISION_STAGE_H_
