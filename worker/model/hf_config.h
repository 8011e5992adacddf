// Reads a Hugging Face Qwen2.5-VL `config.json` into dhp's config structs, and writes one for a
// preset (what `dhp-ckpt export --hf-dir` puts beside the weights of a preset model).
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

// The config.json of `preset`, in the layout of the published Qwen2.5-VL checkpoints (text fields
// at the top level, "rope_scaling": {"type": "mrope", "mrope_section"}, the vision fields under
// "vision_config"), which transformers 4.x and 5 and vLLM load; `torch_dtype` is the weights'
// dtype ("float32", "bfloat16", "float16"). Every architecture field is written, so ParseHfConfig
// reads back `preset` exactly (DiffModelPresets is empty) whatever transformers' defaults are.
// Special token ids below 0 (unknown) are left out. Pretty-printed, ending in a newline.
std::string HfConfigJson(const ModelPreset& preset, const std::string& torch_dtype);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_HF_CONFIG_H_
