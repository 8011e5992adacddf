#include "worker/rank/vision_stage.h"

#include "common/layout.h"

namespace dhp {

absl::StatusOr<std::unique_ptr<VisionStage>> CreateVisionStage(const VisionConfig& config,
                                                               const TensorSource& source,
                                                               comm::ProcessGroups& groups,
                                                               const StageOptions& options) {
  switch (groups.layout().vision_parallelism) {
    case comm::VisionParallelism::kTensor:
      return CreateTpVisionStage(config, source, groups, options);
    case comm::VisionParallelism::kSequence:
      break;
  }
  return CreateUlyssesVisionStage(config, source, groups, options);
}

}  // namespace dhp
