#include "worker/model/vision_block.h"

#include "worker/model/model_config.h"

namespace dhp {

VisionAttentionImpl::VisionAttentionImpl(const VisionConfig& config)
    : VisionAttentionImpl(config, LibTorchDefaultInit()) {}

VisionAttentionImpl::VisionAttentionImpl(const VisionConfig& config, const ParamFactory& make)
    : head_dim_(VisionHeadDim(config)) {
  const int64_t h = config.hidden_size;
  qkv = register_module("qkv", Dense(h, 3 * h, /*bias=*/true, ScopedFactory(make, "qkv.")));
  proj = register_module("proj", Dense(h, h, /*bias=*/true, ScopedFactory(make, "proj.")));
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

VisionBlockImpl::VisionBlockImpl(const VisionConfig& config)
    : VisionBlockImpl(config, LibTorchDefaultInit()) {}

VisionBlockImpl::VisionBlockImpl(const VisionConfig& config, const ParamFactory& make) {
  // Hugging Face hard-codes eps 1e-6 for the vision norms; VisionConfig carries the same value.
  const int64_t h = config.hidden_size;
  norm1 = register_module("norm1", RmsNorm(h, config.rms_norm_eps, ScopedFactory(make, "norm1.")));
  norm2 = register_module("norm2", RmsNorm(h, config.rms_norm_eps, ScopedFactory(make, "norm2.")));
  attn = register_module("attn", VisionAttention(config, ScopedFactory(make, "attn.")));
  mlp = register_module("mlp", GatedMlp(h, config.intermediate_size, /*bias=*/true,
                                        ScopedFactory(make, "mlp.")));
}

at::Tensor VisionBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                    const at::Tensor& sin, const std::vector<int64_t>& cu_seqlens) {
  at::Tensor h = x + attn(norm1(x), cos, sin, cu_seqlens);
  return h + mlp(norm2(h));
}

}  // namespace dhp
