// Architecture constants of the Qwen2.5-VL model family, by preset name.
//
// Plain data with no LibTorch: the controller validates job specs against these (head counts
// must divide by parallel degrees) and the worker builds its model from them. Thread-safe: the
// table is immutable.
#ifndef DHP_COMMON_MODEL_PRESETS_H_
#define DHP_COMMON_MODEL_PRESETS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dhp {

struct VisionConfig {
  int depth = 32;
  int hidden_size = 1280;
  int num_heads = 16;
  int intermediate_size = 3420;
  int in_channels = 3;
  int patch_size = 14;
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;
  int window_size = 112;  // pixels
  std::vector<int> fullatt_block_indexes = {7, 15, 23, 31};
  int out_hidden_size = 3584;  // = text hidden size
  double rms_norm_eps = 1e-6;
};

struct TextConfig {
  int hidden_size = 3584;
  int num_layers = 28;
  int num_heads = 28;
  int num_kv_heads = 4;
  int intermediate_size = 18944;
  int64_t vocab_size = 152064;
  bool tie_word_embeddings = false;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  std::array<int, 3> mrope_section = {16, 24, 24};  // sums to head_dim / 2
  int64_t max_position_embeddings = 128000;
};

struct SpecialTokens {
  int64_t endoftext = 151643;
  int64_t im_start = 151644;
  int64_t im_end = 151645;
  int64_t vision_start = 151652;
  int64_t vision_end = 151653;
  int64_t image_pad = 151655;
  int64_t video_pad = 151656;
};

struct ModelPreset {
  std::string name;
  VisionConfig vision;
  TextConfig text;
  SpecialTokens tokens;
  double published_params_billions = 0;  // 0 for presets without a published size
};

// Returns the preset with this name, or nullptr when there is none.
const ModelPreset* FindModelPreset(const std::string& name);

// All preset names, in a stable order (for error messages and `dhpctl`).
std::vector<std::string> ModelPresetNames();

// The architecture fields (vision, text, special tokens) in which `a` and `b` differ, as
// "text.num_layers: 28 vs 2", in declaration order; empty when they describe the same model.
// Names and published sizes are not compared; a negative special token id in either (unknown,
// e.g. <|im_start|>, which config.json does not carry) matches any.
std::vector<std::string> DiffModelPresets(const ModelPreset& a, const ModelPreset& b);

}  // namespace dhp

#endif  // DHP_COMMON_MODEL_PRESETS_H_
