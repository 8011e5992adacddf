#include "worker/model/text_layer.h"

#include "worker/model/model_config.h"

namespace dhp {

std::pair<at::Tensor, at::Tensor> MropeCosSin(const TextConfig& config,
                                              const at::Tensor& position_ids,
                                              at::ScalarType dtype) {
  TORCH_CHECK_VALUE(position_ids.dim() == 2 && position_ids.size(0) == 3,
                    "M-RoPE position ids must be [3, S], got ", position_ids.sizes());
  const int64_t head_dim = TextHeadDim(config);
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(position_ids.device());
  at::Tensor inv_freq =
      1.0 / at::pow(config.rope_theta, at::arange(0, head_dim, 2, f32) / double(head_dim));
  // [3, S, 1] * [D/2] -> [3, S, D/2], then both rotate-half halves -> [3, S, D].
  at::Tensor freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv_freq;
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  at::Tensor cos3 = emb.cos(), sin3 = emb.sin();
  // Slot ranges: sections [s0, s1, s2, s0, s1, s2]; range i reads axis i % 3.
  std::vector<at::Tensor> cos_parts, sin_parts;
  int64_t offset = 0;
  for (int i = 0; i < 6; ++i) {
    const int64_t width = config.mrope_section[i % 3];
    cos_parts.push_back(cos3.select(0, i % 3).narrow(-1, offset, width));
    sin_parts.push_back(sin3.select(0, i % 3).narrow(-1, offset, width));
    offset += width;
  }
  return {at::cat(cos_parts, -1).to(dtype), at::cat(sin_parts, -1).to(dtype)};  // [S, D]
}

TextAttentionImpl::TextAttentionImpl(const TextConfig& c) : head_dim_(TextHeadDim(c)) {
  using torch::nn::Linear;
  using torch::nn::LinearOptions;
  const int64_t h = c.hidden_size;
  const int64_t q_dim = int64_t{c.num_heads} * head_dim_;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * head_dim_;
  q_proj = register_module("q_proj", Linear(LinearOptions(h, q_dim).bias(true)));
  k_proj = register_module("k_proj", Linear(LinearOptions(h, kv_dim).bias(true)));
  v_proj = register_module("v_proj", Linear(LinearOptions(h, kv_dim).bias(true)));
  o_proj = register_module("o_proj", Linear(LinearOptions(q_dim, h).bias(false)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> TextAttentionImpl::QkvHeads(const at::Tensor& x,
                                                                           const at::Tensor& cos,
                                                                           const at::Tensor& sin) {
  const int64_t s_len = x.size(0);
  at::Tensor q = q_proj(x).view({s_len, -1, head_dim_});  // [S, Hq, D]
  at::Tensor k = k_proj(x).view({s_len, -1, head_dim_});  // [S, Hkv, D]
  at::Tensor v = v_proj(x).view({s_len, -1, head_dim_});  // [S, Hkv, D]
  return {ApplyRotary(q, cos, sin, /*in_fp32=*/false), ApplyRotary(k, cos, sin, false), v};
}

at::Tensor TextAttentionImpl::OutProj(const at::Tensor& attn) {
  return o_proj(attn.reshape({attn.size(0), -1}));
}

at::Tensor TextAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                      const at::Tensor& sin,
                                      const std::vector<int64_t>& cu_seqlens) {
  auto [q, k, v] = QkvHeads(x, cos, sin);
  return OutProj(attention_fn_(q, k, v, cu_seqlens, /*causal=*/true));
}

DecoderLayerImpl::DecoderLayerImpl(const TextConfig& c) {
  input_layernorm = register_module("input_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps));
  self_attn = register_module("self_attn", TextAttention(c));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps));
  mlp = register_module("mlp", GatedMlp(c.hidden_size, c.intermediate_size, /*bias=*/false));
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                     const at::Tensor& sin,
                                     const std::vector<int64_t>& cu_seqlens) {
  at::Tensor h = x + self_attn(input_layernorm(x), cos, sin, cu_seqlens);
  return h + mlp(post_attention_layernorm(h));
}

}  // namespace dhp
