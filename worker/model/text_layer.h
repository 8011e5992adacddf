// One decoder layer of the Qwen2.5-VL text model (Qwen2 with multimodal rotary):
// x += o_proj(attn(input_layernorm(x))); x += mlp(post_attention_layernorm(x)).
//
// Attention is causal within each packed sample, with grouped-query heads. Head counts are read
// from the projection weights, so a tensor-parallel layer can build the same modules with sharded
// q/k/v (column-parallel) and o_proj/down_proj (row-parallel) and add its collectives around
// them. Parameter names under the layer: input_layernorm.weight, post_attention_layernorm.weight,
// self_attn.{q,k,v}_proj.{weight,bias}, self_attn.o_proj.weight, mlp.{gate,up,down}_proj.weight.
// Not thread-safe.
#ifndef DHP_WORKER_MODEL_TEXT_LAYER_H_
#define DHP_WORKER_MODEL_TEXT_LAYER_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <tuple>
#include <utility>
#include <vector>

#include "common/model_presets.h"
#include "worker/model/attention.h"
#include "worker/model/layers.h"

namespace dhp {

// M-RoPE tables. position_ids: [3, S] int64 (t, h, w) -> (cos, sin), each [S, head_dim] in
// `dtype`: frequency slot f of the rotate-half layout takes its position from axis
// (section of f) with sections mrope_section repeated for both halves.
std::pair<at::Tensor, at::Tensor> MropeCosSin(const TextConfig& config,
                                              const at::Tensor& position_ids, at::ScalarType dtype);

class TextAttentionImpl : public torch::nn::Module {
 public:
  explicit TextAttentionImpl(const TextConfig& config);

  // x: [S, hidden], cos/sin: [S, head_dim], cu_seqlens: sample bounds -> [S, hidden].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<int64_t>& cu_seqlens);

  // q: [S, Hq, D], k/v: [S, Hkv, D], rotary applied to q and k.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> QkvHeads(const at::Tensor& x,
                                                          const at::Tensor& cos,
                                                          const at::Tensor& sin);
  at::Tensor OutProj(const at::Tensor& attn);  // [S, Hq, D] -> [S, hidden]

  void set_attention_fn(AttentionFn fn) { attention_fn_ = std::move(fn); }

  torch::nn::Linear q_proj{nullptr};  // [Hq*D, hidden] + bias
  torch::nn::Linear k_proj{nullptr};  // [Hkv*D, hidden] + bias
  torch::nn::Linear v_proj{nullptr};  // [Hkv*D, hidden] + bias
  torch::nn::Linear o_proj{nullptr};  // [hidden, Hq*D], no bias

 private:
  int64_t head_dim_;
  AttentionFn attention_fn_ = VarlenAttention;
};
TORCH_MODULE(TextAttention);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const TextConfig& config);

  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<int64_t>& cu_seqlens);  // [S, hidden] -> [S, hidden]

  RmsNorm input_layernorm{nullptr};
  TextAttention self_attn{nullptr};
  RmsNorm post_attention_layernorm{nullptr};
  GatedMlp mlp{nullptr};
};
TORCH_MODULE(DecoderLayer);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_TEXT_LAYER_H_
