#include "worker/parallel/text_tp_layer.h"

#include <c10/util/Exception.h>

#include "worker/comm/autograd_collectives.h"

namespace dhp::tp {

RmsNorm MakeReplicatedRmsNorm(const TextConfig& config, const FullTensorFn& full,
                              const std::string& prefix) {
  at::Tensor w = full(prefix + "weight");
  TORCH_CHECK_VALUE(w.dim() == 1 && w.size(0) == config.hidden_size, prefix, "weight must be [",
                    config.hidden_size, "], got ", w.sizes());
  RmsNorm norm(config.hidden_size, config.rms_norm_eps);
  at::NoGradGuard no_grad;
  norm->weight.set_data(w.detach().clone());
  return norm;
}

TpTextAttentionImpl::TpTextAttentionImpl(const TextTpPlan& plan, const FullTensorFn& full,
                                         const std::string& prefix, comm::Communicator& comm)
    : head_dim_(plan.head_dim), comm_(&comm) {
  const int r = plan.tp_rank;
  q_proj = register_module(
      "q_proj", ColumnParallelLinear(full(prefix + "q_proj.weight"), full(prefix + "q_proj.bias"),
                                     plan.QRows(), r));
  k_proj = register_module(
      "k_proj", ColumnParallelLinear(full(prefix + "k_proj.weight"), full(prefix + "k_proj.bias"),
                                     plan.KvRows(), r));
  v_proj = register_module(
      "v_proj", ColumnParallelLinear(full(prefix + "v_proj.weight"), full(prefix + "v_proj.bias"),
                                     plan.KvRows(), r));
  o_proj = register_module("o_proj", RowParallelLinear(full(prefix + "o_proj.weight"), at::Tensor(),
                                                       plan.QRows(), comm));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> TpTextAttentionImpl::QkvHeads(
    const at::Tensor& x_parallel, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t s_len = x_parallel.size(0);
  at::Tensor q = q_proj(x_parallel).view({s_len, -1, head_dim_});  // [S, Hq/T, D]
  at::Tensor k = k_proj(x_parallel).view({s_len, -1, head_dim_});  // [S, Hkv_r, D]
  at::Tensor v = v_proj(x_parallel).view({s_len, -1, head_dim_});  // [S, Hkv_r, D]
  return {ApplyRotary(q, cos, sin, /*in_fp32=*/false), ApplyRotary(k, cos, sin, false), v};
}

at::Tensor TpTextAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                        const at::Tensor& sin,
                                        const std::vector<int64_t>& cu_seqlens) {
  at::Tensor xp = comm::CopyToParallelRegion(x, *comm_);  // [S, H]
  auto [q, k, v] = QkvHeads(xp, cos, sin);
  at::Tensor attn = attention_fn_(q, k, v, cu_seqlens, /*causal=*/true);  // [S, Hq/T, D]
  return o_proj(attn.reshape({attn.size(0), -1}));                        // [S, H]
}

TpGatedMlpImpl::TpGatedMlpImpl(const TextTpPlan& plan, const FullTensorFn& full,
                               const std::string& prefix, comm::Communicator& comm)
    : comm_(&comm) {
  const int r = plan.tp_rank;
  gate_proj = register_module(
      "gate_proj",
      ColumnParallelLinear(full(prefix + "gate_proj.weight"), at::Tensor(), plan.intermediate, r));
  up_proj = register_module("up_proj", ColumnParallelLinear(full(prefix + "up_proj.weight"),
                                                            at::Tensor(), plan.intermediate, r));
  down_proj = register_module(
      "down_proj",
      RowParallelLinear(full(prefix + "down_proj.weight"), at::Tensor(), plan.intermediate, comm));
}

at::Tensor TpGatedMlpImpl::forward(const at::Tensor& x) {
  at::Tensor xp = comm::CopyToParallelRegion(x, *comm_);    // [S, H]
  return down_proj(at::silu(gate_proj(xp)) * up_proj(xp));  // [S, I_r] -> [S, H]
}

TpDecoderLayerImpl::TpDecoderLayerImpl(const TextConfig& config, const TextTpPlan& plan,
                                       const FullTensorFn& full, const std::string& prefix,
                                       comm::Communicator& comm) {
  input_layernorm = register_module(
      "input_layernorm", MakeReplicatedRmsNorm(config, full, prefix + "input_layernorm."));
  self_attn =
      register_module("self_attn", TpTextAttention(plan, full, prefix + "self_attn.", comm));
  post_attention_layernorm =
      register_module("post_attention_layernorm",
                      MakeReplicatedRmsNorm(config, full, prefix + "post_attention_layernorm."));
  mlp = register_module("mlp", TpGatedMlp(plan, full, prefix + "mlp.", comm));
}

at::Tensor TpDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                       const at::Tensor& sin,
                                       const std::vector<int64_t>& cu_seqlens) {
  at::Tensor h = x + self_attn(input_layernorm(x), cos, sin, cu_seqlens);  // [S, H]
  return h + mlp(post_attention_layernorm(h));
}

}  // namespace dhp::tp
