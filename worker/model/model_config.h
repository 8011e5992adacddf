// Validation and derived sizes for the Qwen2.5-VL configs in common/model_presets.h.
//
// The config structs themselves (VisionConfig, TextConfig, SpecialTokens, ModelPreset) are plain
// data shared with the controller; this file adds what the worker's model code needs on top:
// checks that a config describes a buildable model, and head sizes. No LibTorch. Stateless and
// thread-safe.
#ifndef DHP_WORKER_MODEL_MODEL_CONFIG_H_
#define DHP_WORKER_MODEL_MODEL_CONFIG_H_

#include "absl/status/status.h"
#include "common/model_presets.h"

namespace dhp {

inline int VisionHeadDim(const VisionConfig& c) { return c.hidden_size / c.num_heads; }
inline int TextHeadDim(const TextConfig& c) { return c.hidden_size / c.num_heads; }

// Patches per merged unit (spatial_merge_size^2 = 4) and merged units per window side
// (window_size / patch_size / spatial_merge_size = 4 for the official models).
inline int MergeUnit(const VisionConfig& c) { return c.spatial_merge_size * c.spatial_merge_size; }
inline int WindowUnits(const VisionConfig& c) {
  return c.window_size / c.spatial_merge_size / c.patch_size;
}

// Elements of one flattened patch: in_channels * temporal_patch * patch * patch (1176).
inline int PatchDim(const VisionConfig& c) {
  return c.in_channels * c.temporal_patch_size * c.patch_size * c.patch_size;
}

// OK when the model can be built: positive sizes, heads divide the hidden sizes, the vision head
// dim is divisible by 4 (2-D rotary), KV heads divide query heads, mrope_section sums to
// head_dim / 2, the window is a whole number of merged units, full-attention block indexes are
// within depth, and the vision output width equals the text hidden size. Otherwise
// InvalidArgument naming the field and value.
absl::Status ValidateModelConfig(const VisionConfig& vision, const TextConfig& text);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_MODEL_CONFIG_H_
