// One Qwen2.5-VL text decoder layer under Megatron tensor parallelism (the TP twin of
// DecoderLayer in worker/model/text_layer.h):
//   x += o_proj(attn(copy_to_tp(input_layernorm(x))))             o_proj row-parallel
//   x += down_proj(silu(gate(copy_to_tp(n))) * up(copy_to_tp(n))) gate/up column-, down
//   row-parallel
// with n = post_attention_layernorm(x). q/k/v/gate/up are column-parallel (this rank's query
// heads, KV heads and MLP columns per TextTpPlan); the norms are replicated. Each branch enters
// the parallel region once (comm::CopyToParallelRegion: identity forward, all-reduce backward),
// which makes the gradient flowing back into the residual stream complete on every rank, and
// leaves it through the row-parallel all-reduce. Collectives per layer (T > 1): forward 2
// all-reduces of [S, H], backward 2 all-reduces of [S, H].
//
// GQA: local query heads [r*Hq/T, ...) use local KV heads [r*Hkv/T, ...) when KV heads are split,
// or the single KV head r*Hkv/T when they are replicated (T > Hkv); VarlenAttention's repeat of
// KV heads over query-head groups is then correct on local heads (see tp_shard.h).
//
// Parameters keep HF names (input_layernorm.weight, self_attn.{q,k,v}_proj.{weight,bias},
// self_attn.o_proj.weight, post_attention_layernorm.weight, mlp.{gate,up,down}_proj.weight), each
// holding this rank's shard. Built from its slices of the full tensors (TensorSource), whose
// names are `prefix` + those names (e.g. "model.layers.3.").
//
// Thread-safety: not thread-safe (one rank's training thread); the Communicator is borrowed and
// must outlive the layer and its backward pass.
#ifndef DHP_WORKER_PARALLEL_TEXT_TP_LAYER_H_
#define DHP_WORKER_PARALLEL_TEXT_TP_LAYER_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/model_presets.h"
#include "worker/comm/communicator.h"
#include "worker/model/attention.h"
#include "worker/model/layers.h"
#include "worker/parallel/tp_layers.h"
#include "worker/parallel/tp_shard.h"

namespace dhp::tp {

// An RmsNorm (replicated) whose weight is read whole from src's prefix + "weight".
RmsNorm MakeReplicatedRmsNorm(const TextConfig& config, const TensorSource& src,
                              const std::string& prefix);

class TpTextAttentionImpl : public torch::nn::Module {
 public:
  // prefix: e.g. "model.layers.3.self_attn." (the full tensors' names start with it).
  TpTextAttentionImpl(const TextTpPlan& plan, const TensorSource& src, const std::string& prefix,
                      comm::Communicator& comm);

  // x: [S, H] (replicated, outside the parallel region), cos/sin: [S, D] -> [S, H] (complete).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<int64_t>& cu_seqlens);

  // x_parallel: [S, H] already through CopyToParallelRegion -> q [S, Hq/T, D], k/v [S, Hkv_r, D]
  // with rotary applied to q and k.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> QkvHeads(const at::Tensor& x_parallel,
                                                          const at::Tensor& cos,
                                                          const at::Tensor& sin);

  void set_attention_fn(AttentionFn fn) { attention_fn_ = std::move(fn); }

  ColumnParallelLinear q_proj{nullptr};  // [Hq/T*D, H] + bias
  ColumnParallelLinear k_proj{nullptr};  // [Hkv_r*D, H] + bias
  ColumnParallelLinear v_proj{nullptr};  // [Hkv_r*D, H] + bias
  RowParallelLinear o_proj{nullptr};     // [H, Hq/T*D], no bias

 private:
  int64_t head_dim_;
  comm::Communicator* comm_;
  AttentionFn attention_fn_ = VarlenAttention;
};
TORCH_MODULE(TpTextAttention);

class TpGatedMlpImpl : public torch::nn::Module {
 public:
  // prefix: e.g. "model.layers.3.mlp.".
  TpGatedMlpImpl(const TextTpPlan& plan, const TensorSource& src, const std::string& prefix,
                 comm::Communicator& comm);

  at::Tensor forward(const at::Tensor& x);  // [S, H] replicated -> [S, H] complete

  ColumnParallelLinear gate_proj{nullptr};  // [I_r, H]
  ColumnParallelLinear up_proj{nullptr};    // [I_r, H]
  RowParallelLinear down_proj{nullptr};     // [H, I_r]

 private:
  comm::Communicator* comm_;
};
TORCH_MODULE(TpGatedMlp);

class TpDecoderLayerImpl : public torch::nn::Module {
 public:
  // prefix: e.g. "model.layers.3.".
  TpDecoderLayerImpl(const TextConfig& config, const TextTpPlan& plan, const TensorSource& src,
                     const std::string& prefix, comm::Communicator& comm);

  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<int64_t>& cu_seqlens);  // [S, H] -> [S, H]

  RmsNorm input_layernorm{nullptr};
  TpTextAttention self_attn{nullptr};
  RmsNorm post_attention_layernorm{nullptr};
  TpGatedMlp mlp{nullptr};
};
TORCH_MODULE(TpDecoderLayer);

}  // namespace dhp::tp

#endif  // DHP_WORKER_PARALLEL_TEXT_TP_LAYER_H_
