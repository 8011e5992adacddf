// Layout changes of a job spec: a new layout asked for at resume (ResumeJobRequest) and the
// layouts a spec's `elastic` bounds let the scheduler choose (proto/dhp/v1/job_spec.proto
// ElasticSpec). Plain C++ over the spec: the controller and dhpctl use it without LibTorch.
#ifndef DHP_COMMON_ELASTIC_H_
#define DHP_COMMON_ELASTIC_H_

#include <optional>
#include <string>
#include <vector>

#include "common/spec_validate.h"
#include "dhp/v1/job_spec.pb.h"

namespace dhp {

// The layout fields to change; unset ones keep the spec's.
struct LayoutChoice {
  std::optional<int> vision_degree;
  std::optional<int> text_degree;
  std::optional<int> data_parallel_size;
  v1::Placement placement = v1::PLACEMENT_UNSPECIFIED;
};

// `spec` with `choice` in place of its layout fields. A micro-batch of the replica's whole
// share (the default: no gradient accumulation) stays the whole share on a new
// data_parallel_size: it is cleared for normalisation to fill in again. Any other micro-batch
// is kept, for validation to check. The result still needs NormalizeAndValidateSpec.
v1::JobSpec WithLayout(v1::JobSpec spec, const LayoutChoice& choice);

// " on layout NEW (was OLD)" for a reason or an event, with training.micro_batch_size when it
// changed with the data-parallel size. Both specs must be normalised.
std::string DescribeLayoutChange(const v1::JobSpec& before, const v1::JobSpec& after);

// At most this many layouts are offered to the scheduler per job: the largest ones, and always
// the smallest.
inline constexpr int kMaxElasticLayouts = 16;

// The normalised specs of the layouts that `spec`'s elastic bounds allow and that validate under
// `options`, by world size descending; among equal sizes the spec's own layout comes first,
// then more data-parallel replicas, then a larger text degree. The first is `spec` itself when
// no larger layout is allowed; with no range at all the result is just `spec`. A degree is
// tried only where it divides the architecture's attention heads, and data_parallel_size only
// where it divides training.batch_size. When the architecture is unknown here (a spec naming
// only model.weights_path, on the controller), only data_parallel_size varies: the ranks would
// find out too late that a degree does not divide the heads. `spec` must be normalised.
std::vector<v1::JobSpec> ElasticLayouts(const v1::JobSpec& spec, const SpecOptions& options);

}  // namespace dhp

#endif  // DHP_COMMON_ELASTIC_H_
