#include "common/model_presets.h"

#include <sstream>

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

namespace {

std::string Str(const std::vector<int>& v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  return o.str() + "]";
}
std::string Str(const std::array<int, 3>& v) { return Str(std::vector<int>(v.begin(), v.end())); }
template <typename T>
std::string Str(const T& v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

struct Differ {
  std::vector<std::string> out;
  template <typename T>
  void operator()(const char* field, const T& a, const T& b) {
    if (!(a == b)) out.push_back(std::string(field) + ": " + Str(a) + " vs " + Str(b));
  }
  void Token(const char* field, int64_t a, int64_t b) {
    if (a >= 0 && b >= 0) (*this)(field, a, b);
  }
};

}  // namespace

std::vector<std::string> DiffModelPresets(const ModelPreset& a, const ModelPreset& b) {
  Differ d;
  const VisionConfig &va = a.vision, &vb = b.vision;
  d("vision.depth", va.depth, vb.depth);
  d("vision.hidden_size", va.hidden_size, vb.hidden_size);
  d("vision.num_heads", va.num_heads, vb.num_heads);
  d("vision.intermediate_size", va.intermediate_size, vb.intermediate_size);
  d("vision.in_channels", va.in_channels, vb.in_channels);
  d("vision.patch_size", va.patch_size, vb.patch_size);
  d("vision.temporal_patch_size", va.temporal_patch_size, vb.temporal_patch_size);
  d("vision.spatial_merge_size", va.spatial_merge_size, vb.spatial_merge_size);
  d("vision.window_size", va.window_size, vb.window_size);
  d("vision.fullatt_block_indexes", va.fullatt_block_indexes, vb.fullatt_block_indexes);
  d("vision.out_hidden_size", va.out_hidden_size, vb.out_hidden_size);
  d("vision.rms_norm_eps", va.rms_norm_eps, vb.rms_norm_eps);
  const TextConfig &ta = a.text, &tb = b.text;
  d("text.hidden_size", ta.hidden_size, tb.hidden_size);
  d("text.num_layers", ta.num_layers, tb.num_layers);
  d("text.num_heads", ta.num_heads, tb.num_heads);
  d("text.num_kv_heads", ta.num_kv_heads, tb.num_kv_heads);
  d("text.intermediate_size", ta.intermediate_size, tb.intermediate_size);
  d("text.vocab_size", ta.vocab_size, tb.vocab_size);
  d("text.tie_word_embeddings", ta.tie_word_embeddings, tb.tie_word_embeddings);
  d("text.rms_norm_eps", ta.rms_norm_eps, tb.rms_norm_eps);
  d("text.rope_theta", ta.rope_theta, tb.rope_theta);
  d("text.mrope_section", ta.mrope_section, tb.mrope_section);
  d("text.max_position_embeddings", ta.max_position_embeddings, tb.max_position_embeddings);
  const SpecialTokens &ka = a.tokens, &kb = b.tokens;
  d.Token("tokens.endoftext", ka.endoftext, kb.endoftext);
  d.Token("tokens.im_start", ka.im_start, kb.im_start);
  d.Token("tokens.im_end", ka.im_end, kb.im_end);
  d.Token("tokens.vision_start", ka.vision_start, kb.vision_start);
  d.Token("tokens.vision_end", ka.vision_end, kb.vision_end);
  d.Token("tokens.image_pad", ka.image_pad, kb.image_pad);
  d.Token("tokens.video_pad", ka.video_pad, kb.video_pad);
  return d.out;
}

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
