#include "common/job_layout.h"

namespace dhp {

comm::Layout LayoutForSpec(const v1::JobSpec& spec) {
  comm::Layout layout;
  layout.vision_degree = spec.vision().has_degree() ? spec.vision().degree() : 1;
  layout.text_degree = spec.text().has_degree() ? spec.text().degree() : 1;
  layout.dp = spec.has_data_parallel_size() ? spec.data_parallel_size() : 1;
  layout.placement = spec.placement() == v1::PLACEMENT_SEPARATE ? comm::Placement::kSeparate
                                                                 : comm::Placement::kCollocated;
  layout.vision_parallelism = spec.vision().parallelism() == v1::PARALLELISM_TENSOR
                                  ? comm::VisionParallelism::kTensor
                                  : comm::VisionParallelism::kSequence;
  return layout;
}

}  // namespace dhp
