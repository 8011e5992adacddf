#include "worker/model/param_count.h"

#include "worker/model/model_config.h"

namespace dhp {
namespace {

// nn.Linear(in, out, bias).
int64_t Linear(int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); }

}  // namespace

ParamCount CountParams(const VisionConfig& v, const TextConfig& t) {
  ParamCount c;
  const int64_t vh = v.hidden_size;
  const int64_t vi = v.intermediate_size;
  c.vision_patch_embed = vh * PatchDim(v);     // Conv3d without bias
  c.vision_block = 2 * vh                      // norm1, norm2
                   + Linear(vh, 3 * vh, true)  // attn.qkv
                   + Linear(vh, vh, true)      // attn.proj
                   + 2 * Linear(vh, vi, true)  // mlp.gate_proj, mlp.up_proj
                   + Linear(vi, vh, true);     // mlp.down_proj
  c.vision_blocks = c.vision_block * v.depth;
  const int64_t merged = vh * MergeUnit(v);
  c.vision_merger = vh                                          // ln_q
                    + Linear(merged, merged, true)              // mlp.0
                    + Linear(merged, v.out_hidden_size, true);  // mlp.2
  c.vision_total = c.vision_patch_embed + c.vision_blocks + c.vision_merger;

  const int64_t th = t.hidden_size;
  const int64_t kv = int64_t{t.num_kv_heads} * TextHeadDim(t);
  c.text_embed = t.vocab_size * th;
  c.text_layer = 2 * th                      // input_layernorm, post_attention_layernorm
                 + Linear(th, th, true)      // self_attn.q_proj
                 + 2 * Linear(th, kv, true)  // self_attn.k_proj, v_proj
                 + Linear(th, th, false)     // self_attn.o_proj
                 + 3 * Linear(th, t.intermediate_size, false);  // mlp gate/up/down
  c.text_layers = c.text_layer * t.num_layers;
  c.text_final_norm = th;
  c.lm_head = t.tie_word_embeddings ? 0 : t.vocab_size * th;
  c.text_total = c.text_embed + c.text_layers + c.text_final_norm + c.lm_head;

  c.total = c.vision_total + c.text_total;
  return c;
}

}  // namespace dhp
