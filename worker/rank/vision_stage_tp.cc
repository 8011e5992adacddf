// The vision stage under Megatron tensor parallelism (vision_tp.h, the baseline layout): the
// replica is a VisionTpTransformer over "vision.tp<d>", whose gradients are complete per shard,
// so ZeRO-1 runs per inner rank over "vision.dp<i>" on that rank's shards. Replicated parameters
// are held by all Sv ranks of the replica and weigh 1/Sv in the norm (each element of the full
// model counted once).
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "worker/parallel/vision_tp.h"
#include "worker/rank/vision_stage.h"
#include "worker/rank/vision_stage_zero1.h"

namespace dhp {
namespace {

// Zero1AdamW's norm weights of the tower's trainable parameters (named_parameters() order).
std::vector<double> NormWeights(VisionTransformer& tower, int degree) {
  std::vector<double> weights;
  for (const auto& item : tower->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    weights.push_back(VisionTpShardOf(item.key()) == VisionTpShardKind::kReplicated
                          ? 1.0 / degree
                          : 1.0);
  }
  return weights;
}

class TpVisionStage : public Zero1VisionStage {
 public:
  TpVisionStage(const VisionConfig& config, std::unique_ptr<VisionTpTransformer> tp,
                comm::Communicator& tp_group, comm::Communicator& zero_group,
                const StageOptions& options)
      : Zero1VisionStage(config, tp->model(), zero_group,
                         NormWeights(tp->model(), tp_group.size()), options),
        tp_(std::move(tp)),
        tp_group_(tp_group) {}

  absl::StatusOr<NamedTensors> FullParameters() override {
    DHP_ASSIGN_OR_RETURN(auto full, tp_->GatherFullParameters());
    NamedTensors out;
    for (auto& [name, tensor] : full) out.emplace_back("visual." + name, tensor);
    return out;
  }

 protected:
  absl::StatusOr<at::Tensor> Embed(const at::Tensor& pixels,
                                   const VisionWindowPlan& plan) override {
    return tp_->Forward(pixels, plan);
  }

  // Re-assembles the shards of `name` over the vision TP group.
  absl::StatusOr<at::Tensor> FullGradient(const std::string& name, at::Tensor grad) override {
    DHP_ASSIGN_OR_RETURN(at::Tensor all, tp_group_.AllGather(grad.unsqueeze(0)));
    std::vector<at::Tensor> shards;
    for (int r = 0; r < tp_group_.size(); ++r) shards.push_back(all[r]);
    return UnshardVisionTensor(name, shards);
  }

 private:
  std::unique_ptr<VisionTpTransformer> tp_;
  comm::Communicator& tp_group_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VisionStage>> CreateTpVisionStage(const VisionConfig& config,
                                                                 const TensorSource& source,
                                                                 comm::ProcessGroups& groups,
                                                                 const StageOptions& options) {
  comm::Communicator& tp_group = *groups.vision_inner();
  DHP_ASSIGN_OR_RETURN(std::unique_ptr<VisionTpTransformer> tp,
                       VisionTpTransformer::Create(config, source, "visual.", tp_group));
  return std::unique_ptr<VisionStage>(
      new TpVisionStage(config, std::move(tp), tp_group, *groups.vision_dp(), options));
}

}  // namespace dhp
