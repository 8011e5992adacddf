// The vision stage under Ulysses sequence parallelism (ulysses_vision.h) with ZeRO-1 AdamW over
// the whole vision group (SP x dp ranks, all holding the same whole tower): the SP ranks'
// partial gradients and the replicas' are summed by the one reduce-scatter, and every element
// of the tower counts once in the norm.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>

#include "common/status_macros.h"
#include "worker/model/param_factory.h"
#include "worker/model/torch_status.h"
#include "worker/parallel/ulysses_vision.h"
#include "worker/rank/vision_stage.h"
#include "worker/rank/vision_stage_zero1.h"

namespace dhp {
namespace {

class UlyssesVisionStage : public Zero1VisionStage {
 public:
  UlyssesVisionStage(const VisionConfig& config, std::unique_ptr<UlyssesVisionTransformer> sp,
                     comm::Communicator& zero_group, const StageOptions& options)
      : Zero1VisionStage(config, sp->model(), zero_group, /*norm_weights=*/{}, options),
        sp_(std::move(sp)) {}

  absl::StatusOr<NamedTensors> FullParameters() override {
    NamedTensors out;
    DHP_RETURN_IF_ERROR(CatchTorch("full parameters", [&] {
      for (const auto& item : tower()->named_parameters()) {
        out.emplace_back("visual." + item.key(), item.value().detach().clone());
      }
    }));
    return out;
  }

 protected:
  absl::StatusOr<at::Tensor> Embed(const at::Tensor& pixels,
                                   const VisionWindowPlan& plan) override {
    DHP_ASSIGN_OR_RETURN(VisionSequenceSplit split, sp_->Split(plan));
    return sp_->Forward(pixels, plan, split);
  }

  // The tower is whole on every rank: the reduced gradient is already the full one.
  absl::StatusOr<at::Tensor> FullGradient(const std::string& /*name*/, at::Tensor grad) override {
    return grad;
  }

 private:
  std::unique_ptr<UlyssesVisionTransformer> sp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VisionStage>> CreateUlyssesVisionStage(
    const VisionConfig& config, const TensorSource& source, comm::ProcessGroups& groups,
    const StageOptions& options) {
  // Shard-first: the tower is built from the source's tensors themselves (the whole tower is
  // this rank's share under Ulysses); no default-initialised parameter is made.
  VisionTransformer tower{nullptr};
  DHP_RETURN_IF_ERROR(CatchTorch("building the vision tower", [&] {
    tower = VisionTransformer(config, WholeTensors(source, "visual."));
  }));
  DHP_ASSIGN_OR_RETURN(std::unique_ptr<UlyssesVisionTransformer> sp,
                       UlyssesVisionTransformer::Create(tower, *groups.vision_inner()));
  return std::unique_ptr<VisionStage>(
      new UlyssesVisionStage(config, std::move(sp), *groups.vision(), options));
}

}  // namespace dhp
