// Job spec normalisation and validation: the one place that decides whether a spec is valid.
//
// The controller runs it before anything is stored; dhpctl can run it locally (dry run).
// Errors are INVALID_ARGUMENT and name the field, the value and the rule, e.g.
//   vision.degree: 3 does not divide the 16 attention heads of the qwen2_5_vl_7b vision encoder
// When several fields are wrong, all are reported, separated by "; ". Thread-safe.
#ifndef DHP_COMMON_SPEC_VALIDATE_H_
#define DHP_COMMON_SPEC_VALIDATE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dhp/v1/job_spec.pb.h"

namespace dhp {

struct SpecOptions {
  // Checkpoint directories must resolve inside this root. Empty: any relative directory
  // without ".." is accepted (dhpctl's local check, which does not know the root).
  std::string checkpoint_root;
};

// Fills defaults for omitted fields (degrees 1, zero_stage 1 with sequence parallelism,
// collocated placement, cosine schedule, ...) and checks every rule. On success `spec` is the
// normalised spec that the controller stores; on failure it is unspecified.
absl::Status NormalizeAndValidateSpec(v1::JobSpec* spec, const SpecOptions& options);

// ParseProtoYaml (strict) followed by NormalizeAndValidateSpec.
absl::StatusOr<v1::JobSpec> ParseJobSpec(std::string_view text, const SpecOptions& options);

}  // namespace dhp

#endif  // DHP_COMMON_SPEC_VALIDATE_H_
