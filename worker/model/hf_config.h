// Reads a Hugging Face Qwen2.5-VL `config.json` into dhp's config structs.
//
// Accepts both layouts transformers has written: text fields at the top level (the published
// checkpoints, transformers 4.4x) and text fields under "text_config" (transformers 5, which
// also moves rope_theta and mrope_section into "rope_parameters"). The vision fields are under
// "vision_config" in both. A key that is absent takes transformers' default (Qwen2_5_VLConfig
// and its two sub-configs), as transformers itself would load the file; a key of the wrong type
// is refused, naming it. The result is validated with ValidateModelConfig. No LibTorch.
// Stateless and thread-safe.
#ifndef DHP_WORKER_MODEL_HF_CONFIG_H_
#define DHP_WORKER_MODEL_HF_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/model_presets.h"

namespace dhp {

// Parses the text of a config.json. `name` becomes ModelPreset::name. Errors name the field
// (InvalidArgument), e.g. "config.json: vision_config.depth is missing".
absl::StatusOr<ModelPreset> ParseHfConfig(const std::string& json_text, const std::string& name);

// Reads `path`, which is either a config.json file or a checkpoint directory holding one.
// NotFound when there is no such file. The preset is named after the path.
absl::StatusOr<ModelPreset> LoadHfConfig(const std::string& path);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_HF_CONFIG_H_
