#include "common/model_presets.h"

namespace dhp {
namespace {

// `vision_mlp` is the vision tower's MLP width: 3420 in the 3B and 7B config.json, 3456 in the
// 32B and 72B ones (the rest of the vision tower is the same in all four).
ModelPreset Official(const std::string& name, int hidden, int layers, int heads, int kv_heads,
                     int mlp, int64_t vocab, bool tied, int vision_mlp, double billions) {
  ModelPreset p;
  p.name = name;
  p.vision.intermediate_size = vision_mlp;
  p.vision.out_hidden_size = hidden;
  p.text.hidden_size = hidden;
  p.text.num_layers = layers;
  p.text.num_heads = heads;
  p.text.num_kv_heads = kv_heads;
  p.text.intermediate_size = mlp;
  p.text.vocab_size = vocab;
  p.text.tie_word_embeddings = tied;
  p.published_params_billions = billions;
  return p;
}

// A few-MB model for tests and the CPU demo that keeps every structural feature of the real
// ones: window and full-attention blocks, GQA (4 query heads over 2 KV heads), M-RoPE with
// three sections, the 2x2 patch merger, the same patch/window geometry in pixels.
ModelPreset Tiny() {
  ModelPreset p;
  p.name = "tiny";
  p.vision.depth = 4;
  p.vision.hidden_size = 64;
  p.vision.num_heads = 4;
  p.vision.intermediate_size = 128;
  p.vision.fullatt_block_indexes = {1, 3};
  p.vision.out_hidden_size = 64;
  p.text.hidden_size = 64;
  p.text.num_layers = 2;
  p.text.num_heads = 4;
  p.text.num_kv_heads = 2;
  p.text.intermediate_size = 128;
  p.text.vocab_size = 1024;
  p.text.tie_word_embeddings = false;
  p.text.rope_theta = 10000.0;
  p.text.mrope_section = {2, 3, 3};  // head_dim 16
  p.text.max_position_embeddings = 4096;
  // The tiny tokenizer (configs/tiny-tokenizer.json) puts its special tokens at 1000..1006.
  p.tokens = {1000, 1001, 1002, 1003, 1004, 1005, 1006};
  return p;
}

const std::vector<ModelPreset>& Presets() {
  static const std::vector<ModelPreset>* presets = new std::vector<ModelPreset>{
      Tiny(),
      Official("qwen2_5_vl_3b", 2048, 36, 16, 2, 11008, 151936, true, 3420, 3.75),
      Official("qwen2_5_vl_7b", 3584, 28, 28, 4, 18944, 152064, false, 3420, 8.29),
      Official("qwen2_5_vl_32b", 5120, 64, 40, 8, 27648, 152064, false, 3456, 33.5),
      Official("qwen2_5_vl_72b", 8192, 80, 64, 8, 29568, 152064, false, 3456, 73.4),
  };
  return *presets;
}

}  // namespace

const ModelPreset* FindModelPreset(const std::string& name) {
  for (const ModelPreset& p : Presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const ModelPreset& p : Presets()) names.push_back(p.name);
  return names;
}

}  // namespace dhp
