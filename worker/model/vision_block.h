// One block of the Qwen2.5-VL vision tower: x += attn(norm1(x)); x += mlp(norm2(x)).
//
// Attention is bidirectional within segments (windows for window blocks, frames for
// full-attention blocks). The steps are public so that a sequence-parallel block can run them
// around its all-to-alls: QkvHeads -> (attention core) -> OutProj. Parameter names under the
// block: norm1.weight, norm2.weight, attn.qkv.{weight,bias}, attn.proj.{weight,bias},
// mlp.{gate,up,down}_proj.{weight,bias}. Built from a ParamFactory (param_factory.h), a block
// holds exactly the tensors it yields, e.g. a rank's shards; without one, LibTorch's default
// initialisation. Not thread-safe.
#ifndef DHP_WORKER_MODEL_VISION_BLOCK_H_
#define DHP_WORKER_MODEL_VISION_BLOCK_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <tuple>
#include <vector>

#include "common/model_presets.h"
#include "worker/model/attention.h"
#include "worker/model/layers.h"
#include "worker/model/param_factory.h"

namespace dhp {

class VisionAttentionImpl : public torch::nn::Module {
 public:
  explicit VisionAttentionImpl(const VisionConfig& config);
  // Parameters from `make`: "qkv.weight", "qkv.bias", "proj.weight", "proj.bias".
  VisionAttentionImpl(const VisionConfig& config, const ParamFactory& make);

  // x: [S, hidden], cos/sin: [S, head_dim] (fp32 rotary tables in the same order as x),
  // cu_seqlens: segment bounds of x on the host -> [S, hidden].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<int64_t>& cu_seqlens);

  // qkv projection split into heads, rotary applied to q and k: each [S, H, head_dim]. The head
  // count is read from the weight, so a head-sharded qkv works unchanged.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> QkvHeads(const at::Tensor& x,
                                                          const at::Tensor& cos,
                                                          const at::Tensor& sin);
  // [S, H, head_dim] -> proj -> [S, hidden].
  at::Tensor OutProj(const at::Tensor& attn);

  void set_attention_fn(AttentionFn fn) { attention_fn_ = std::move(fn); }

  Dense qkv{nullptr};   // [3*hidden, hidden] + bias; rows q, k, v
  Dense proj{nullptr};  // [hidden, hidden] + bias

 private:
  int64_t head_dim_;
  AttentionFn attention_fn_ = VarlenAttention;
};
TORCH_MODULE(VisionAttention);

class VisionBlockImpl : public torch::nn::Module {
 public:
  explicit VisionBlockImpl(const VisionConfig& config);
  // Parameters from `make`, named as listed above, in registration order.
  VisionBlockImpl(const VisionConfig& config, const ParamFactory& make);

  // x: [S, hidden] -> [S, hidden]; see VisionAttentionImpl::forward.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<int64_t>& cu_seqlens);

  RmsNorm norm1{nullptr};
  RmsNorm norm2{nullptr};
  VisionAttention attn{nullptr};
  GatedMlp mlp{nullptr};
};
TORCH_MODULE(VisionBlock);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_VISION_BLOCK_H_
