// Job spec normalisation and validation: the one place that decides whether a spec is valid.
//
// The controller runs it before anything is stored; dhpctl can run it locally (dry run).
// Errors are INVALID_ARGUMENT and name the field, the value and the rule, e.g.
//   vision.degree: 3 does not divide the 16 attention heads of the qwen2_5_vl_7b vision encoder
// When several fields are wrong, all are reported, separated by "; ". Thread-safe.
//
// A spec may name its model by preset, by Hugging Face model directory (model.weights_path),
// or both (ResolveSpecModel). The controller cannot read model directories: it accepts a spec
// naming only a directory and leaves the architecture's checks (stage degrees dividing head
// counts) to the ranks, which run this validation again with read_model_config set.
#ifndef DHP_COMMON_SPEC_VALIDATE_H_
#define DHP_COMMON_SPEC_VALIDATE_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "dhp/v1/job_spec.pb.h"

namespace dhp {

struct SpecOptions {
  // Checkpoint directories must resolve inside this root. Empty: any relative directory
  // without ".." is accepted (dhpctl's local check, which does not know the root).
  std::string checkpoint_root;
  // Reads the architecture from model.weights_path's config.json (a Hugging Face model
  // directory). Set where the directory can be read: the ranks and dhp-train, relative to their
  // data root. NOT_FOUND when the directory has no config.json.
  std::function<absl::StatusOr<ModelPreset>(const std::string& weights_path)> read_model_config;
};

// The architecture a spec trains:
//   model.preset alone           the preset;
//   model.weights_path alone     its config.json (a fine-tuned or resized Qwen2.5-VL needs no
//                                preset);
//   both                         the config.json, which must agree with the preset field by
//                                field (a directory without config.json: the preset).
// Errors name the field: "model.preset: qwen2_5_vl_7b disagrees with model.weights_path
// ckpt/config.json: text.num_layers: 28 vs 2". Without options.read_model_config, a spec naming
// only model.weights_path is FAILED_PRECONDITION (this process cannot read the directory).
absl::StatusOr<ModelPreset> ResolveSpecModel(const v1::JobSpec& spec, const SpecOptions& options);

// Fills defaults for omitted fields (degrees 1, zero_stage 1 with sequence parallelism,
// collocated placement, cosine schedule, ...) and checks every rule. On success `spec` is the
// normalised spec that the controller stores; on failure it is unspecified.
absl::Status NormalizeAndValidateSpec(v1::JobSpec* spec, const SpecOptions& options);

// ParseProtoYaml (strict) followed by NormalizeAndValidateSpec.
absl::StatusOr<v1::JobSpec> ParseJobSpec(std::string_view text, const SpecOptions& options);

}  // namespace dhp

#endif  // DHP_COMMON_SPEC_VALIDATE_H_
