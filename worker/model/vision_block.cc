#include "worker/model/vision_block.h"

#include "worker/model/model_config.h"

namespace dhp {

VisionAttentionImpl::VisionAttentionImpl(const VisionConfig& config)
    : head_dim_(VisionHeadDim(config)) {
  const int64_t h = config.hidden_size;
  qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(h, 3 * h).bias(true)));
  proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(h, h).bias(true)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> VisionAttentionImpl::QkvHeads(
    const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t s_len = x.size(0);
  const int64_t heads = qkv->weight.size(0) / (3 * head_dim_);  // explicit: S may be 0
  at::Tensor packed = qkv(x).view({s_len, 3, heads, head_dim_});                // [S, 3, H, D]
  at::Tensor q = ApplyRotary(packed.select(1, 0), cos, sin, /*in_fp32=*/true);  // [S, H, D]
  at::Tensor k = ApplyRotary(packed.select(1, 1), cos, sin, /*in_fp32=*/true);
  at::Tensor v = packed.select(1, 2);
  return {q, k, v};
}

at::Tensor VisionAttentionImpl::OutProj(const at::Tensor& attn) {
  // [S, H, D] -> [S, H*D] -> [S, hidden]; explicit sizes: S may be 0.
  return proj(attn.reshape({attn.size(0), attn.size(1) * attn.size(2)}));
}

at::Tensor VisionAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                        const at::Tensor& sin,
                                        const std::vector<int64_t>& cu_seqlens) {
  auto [q, k, v] = QkvHeads(x, cos, sin);
  return OutProj(attention_fn_(q, k, v, cu_seqlens, /*causal=*/false));
}

VisionBlockImpl::VisionBlockImpl(const VisionConfig& config) {
  // Hugging Face hard-codes eps 1e-6 for the vision norms; VisionConfig carries the same value.
  norm1 = register_module("norm1", RmsNorm(config.hidden_size, config.rms_norm_eps));
  norm2 = register_module("norm2", RmsNorm(config.hidden_size, config.rms_norm_eps));
  attn = register_module("attn", VisionAttention(config));
  mlp = register_module("mlp", GatedMlp(config.hidden_size, config.intermediate_size, true));
}

at::Tensor VisionBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                    const at::Tensor& sin, const std::vector<int64_t>& cu_seqlens) {
  at::Tensor h = x + attn(norm1(x), cos, sin, cu_seqlens);
  return h + mlp(norm2(h));
}

}  // namespace dhp
