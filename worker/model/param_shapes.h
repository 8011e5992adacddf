// The Hugging Face name and full shape of every parameter of a Qwen2.5-VL model, from its config,
// without allocating it: in named_parameters() order of Qwen2_5_VL ("visual.*", then "model.*",
// then "lm_head.weight" when the embeddings are untied). Shard-first construction and sharded
// loading take the full shapes from here; a test compares the table with the tiny model's
// modules. No LibTorch. Stateless and thread-safe.
#ifndef DHP_WORKER_MODEL_PARAM_SHAPES_H_
#define DHP_WORKER_MODEL_PARAM_SHAPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_presets.h"

namespace dhp {

struct ParamShape {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // full (unsharded) shape
};

// The vision tower's parameters, named with `prefix` ("visual." in the full model).
std::vector<ParamShape> VisionParamShapes(const VisionConfig& config,
                                          const std::string& prefix = "visual.");
// The text stage's parameters ("model.*", "lm_head.weight").
std::vector<ParamShape> TextParamShapes(const TextConfig& config);
// Both, as Qwen2_5_VL lists them.
std::vector<ParamShape> QwenParamShapes(const ModelPreset& preset);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_PARAM_SHAPES_H_
