// Zero1VisionStage: the half of a vision stage that strategies with ZeRO-1 AdamW share
// (vision_stage_ulysses.cc, vision_stage_tp.cc): the forward/backward bookkeeping around the
// strategy's tower, the ZeRO-1 reduce-scatter, norm share and step (zero1.h), the checkpoint
// state and the re-assembled gradients. A strategy supplies its forward (Embed) and how one of
// its gradients becomes the full HF-shaped one (FullGradient).
//
// Checkpoint state (DistTrainer::State names, in this order):
//   "visual.*"                                  this rank's tower (whole or shards)
//   "optim.vision.{master,exp_avg,exp_avg_sq}"  ZeRO-1 partition [P] fp32
//   "optim.vision.step"                         [1] int64
// TakeState takes the partition first: its size differs whenever the layout does, so it leads
// the error message.
//
// Thread-safety: not thread-safe; the rank's training thread. The ZeRO group is borrowed.
#ifndef DHP_WORKER_RANK_VISION_STAGE_ZERO1_H_
#define DHP_WORKER_RANK_VISION_STAGE_ZERO1_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/vision_model.h"
#include "worker/model/vision_window.h"
#include "worker/parallel/zero1.h"
#include "worker/rank/stage.h"
#include "worker/rank/vision_stage.h"

namespace dhp {

class Zero1VisionStage : public VisionStage {
 public:
  void BeginStep(int64_t micro_batches) override;
  absl::StatusOr<at::Tensor> Forward(const PackedBatch& batch) override;
  absl::Status Backward(const at::Tensor& grad) override;
  const Zero1AdamW* zero1() const override { return zero1_.get(); }

  absl::Status ReduceGradients() override;
  absl::StatusOr<double> GradSquaredNormShare() override;
  absl::Status Step(double lr, double clip_coef) override;
  NamedTensors Parameters() const override;
  void AppendLiveState(NamedTensors* out) override;
  StateLoad TakeState(StateReader& reader) override;
  absl::StatusOr<NamedTensors> FullGradients() override;
  at::Device device() const override { return device_; }

 protected:
  // `tower`: this rank's trainable tower under the HF names (whole or shards; shared, not
  // copied). ZeRO-1 over `zero_group`; `norm_weights` as Zero1AdamW's (empty: all 1).
  Zero1VisionStage(const VisionConfig& config, VisionTransformer tower,
                   comm::Communicator& zero_group, const std::vector<double>& norm_weights,
                   const StageOptions& options);

  // The strategy's forward: pixels [N, 1176] -> [N/4, out_hidden] in input order, identical on
  // every rank of the replica (collective over the strategy's group).
  virtual absl::StatusOr<at::Tensor> Embed(const at::Tensor& pixels,
                                           const VisionWindowPlan& plan) = 0;
  // The full HF-shaped gradient of tower parameter `name` from this rank's reduced `grad` of it
  // (collective over the strategy's group where the tower is sharded).
  virtual absl::StatusOr<at::Tensor> FullGradient(const std::string& name, at::Tensor grad) = 0;

  VisionTransformer& tower() { return tower_; }

 private:
  VisionConfig config_;
  StageOptions options_;
  VisionTransformer tower_;
  at::Device device_ = at::kCPU;
  std::unique_ptr<Zero1AdamW> zero1_;
  at::Tensor output_;  // the last Forward's [M, out_hidden], with its graph, until Backward
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_VISION_STAGE_ZERO1_H_
