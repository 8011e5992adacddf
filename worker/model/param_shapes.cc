#include "worker/model/param_shapes.h"

#include "absl/strings/str_cat.h"
#include "worker/model/model_config.h"

namespace dhp {
namespace {

// nn.Linear(in, out, bias) registers weight [out, in], then bias [out].
void AddLinear(std::vector<ParamShape>* out, const std::string& prefix, int64_t in, int64_t out_f,
               bool bias) {
  out->push_back({prefix + "weight", {out_f, in}});
  if (bias) out->push_back({prefix + "bias", {out_f}});
}

void AddGatedMlp(std::vector<ParamShape>* out, const std::string& prefix, int64_t hidden,
                 int64_t inter, bool bias) {
  AddLinear(out, prefix + "gate_proj.", hidden, inter, bias);
  AddLinear(out, prefix + "up_proj.", hidden, inter, bias);
  AddLinear(out, prefix + "down_proj.", inter, hidden, bias);
}

}  // namespace

std::vector<ParamShape> VisionParamShapes(const VisionConfig& v, const std::string& prefix) {
  std::vector<ParamShape> out;
  const int64_t h = v.hidden_size;
  out.push_back({prefix + "patch_embed.proj.weight",
                 {h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size}});
  for (int i = 0; i < v.depth; ++i) {
    const std::string b = absl::StrCat(prefix, "blocks.", i, ".");
    out.push_back({b + "norm1.weight", {h}});
    out.push_back({b + "norm2.weight", {h}});
    AddLinear(&out, b + "attn.qkv.", h, 3 * h, true);
    AddLinear(&out, b + "attn.proj.", h, h, true);
    AddGatedMlp(&out, b + "mlp.", h, v.intermediate_size, true);
  }
  const int64_t merged = h * MergeUnit(v);
  out.push_back({prefix + "merger.ln_q.weight", {h}});
  AddLinear(&out, prefix + "merger.mlp.0.", merged, merged, true);
  AddLinear(&out, prefix + "merger.mlp.2.", merged, v.out_hidden_size, true);
  return out;
}

std::vector<ParamShape> TextParamShapes(const TextConfig& t) {
  std::vector<ParamShape> out;
  const int64_t h = t.hidden_size;
  const int64_t q = int64_t{t.num_heads} * TextHeadDim(t);
  const int64_t kv = int64_t{t.num_kv_heads} * TextHeadDim(t);
  out.push_back({"model.embed_tokens.weight", {t.vocab_size, h}});
  for (int i = 0; i < t.num_layers; ++i) {
    const std::string l = absl::StrCat("model.layers.", i, ".");
    out.push_back({l + "input_layernorm.weight", {h}});
    AddLinear(&out, l + "self_attn.q_proj.", h, q, true);
    AddLinear(&out, l + "self_attn.k_proj.", h, kv, true);
    AddLinear(&out, l + "self_attn.v_proj.", h, kv, true);
    AddLinear(&out, l + "self_attn.o_proj.", q, h, false);
    out.push_back({l + "post_attention_layernorm.weight", {h}});
    AddGatedMlp(&out, l + "mlp.", h, t.intermediate_size, false);
  }
  out.push_back({"model.norm.weight", {h}});
  if (!t.tie_word_embeddings) out.push_back({"lm_head.weight", {t.vocab_size, h}});
  return out;
}

std::vector<ParamShape> QwenParamShapes(const ModelPreset& preset) {
  std::vector<ParamShape> out = VisionParamShapes(preset.vision);
  for (ParamShape& p : TextParamShapes(preset.text)) out.push_back(std::move(p));
  return out;
}

}  // namespace dhp
