#include "worker/rank/vision_stage.h"

#include "common/layout.h"

namespace dhp {

absl::StatusOr<std::unique_ptr<VisionStage>> CreateVisionStage(const VisionConfig& config,
                                                               const TensorSource& source,
                                                               comm::ProcessGroups& groups,
                                                               const StageOptions& options) {
  const CastTensorSource cast(source, options.dtype);  // the stage's dtype, slice by slice
  switch (groups.layout().vision_parallelism) {
    case comm::VisionParallelism::kTensor:
      return CreateTpVisionStage(config, cast, groups, options);
    case comm::VisionParallelism::kSequence:
      break;
  }
  return CreateUlyssesVisionStage(config, cast, groups, options);
}

}  // namespace dhp
