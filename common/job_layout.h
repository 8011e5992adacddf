// The rank layout (common/layout.h) a normalised job spec asks for: vision and text degrees,
// data-parallel replicas, placement and vision parallelism. Used by the scheduler (how many
// ranks, which must share a node) and by the ranks themselves (which roles they host).
#ifndef DHP_COMMON_JOB_LAYOUT_H_
#define DHP_COMMON_JOB_LAYOUT_H_

#include "common/layout.h"
#include "dhp/v1/job_spec.pb.h"

namespace dhp {

// `spec` must be normalised (common/spec_validate.h): degrees and data_parallel_size set.
comm::Layout LayoutForSpec(const v1::JobSpec& spec);

}  // namespace dhp

#endif  // DHP_COMMON_JOB_LAYOUT_H_
