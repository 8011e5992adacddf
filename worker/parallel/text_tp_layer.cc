#include "worker/parallel/text_tp_layer.h"

#include <c10/util/Exception.h>

#include "worker/comm/autograd_collectives.h"

namespace dhp::tp {

RmsNorm MakeReplicatedRmsNorm(const TextConfig& config, const TensorSource& src,
                              const std::string& prefix) {
  const std::vector<int64_t> shape = src.Shape(prefix + "weight");
  TORCH_CHECK_VALUE(shape.size() == 1 && shape[0] == config.hidden_size, prefix,
                    "weight must be [", config.hidden_size, "], got ", at::IntArrayRef(shape));
  return RmsNorm(src.Whole(prefix + "weight"), config.rms_norm_eps);
}

TpTextAttentionImpl::TpTextAttentionImpl(const TextTpPlan& plan, const TensorSource& src,
                                         const std::string& prefix, comm::Communicator& comm)
    : head_dim_(plan.head_dim), comm_(&comm) {
  const int r = plan.tp_rank;
  q_proj = register_module(
      "q_proj", ColumnParallelLinear(src, prefix + "q_proj.", true, plan.QRows(), r));
  k_proj = register_module(
      "k_proj", ColumnParallelLinear(src, prefix + "k_proj.", true, plan.KvRows(), r));
  v_proj = register_module(
      "v_proj", ColumnParallelLinear(src, prefix + "v_proj.", true, plan.KvRows(), r));
  o_proj = register_module("o_proj", RowParallelLinear(src, prefix + "o_proj.", false,
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

TpGatedMlpImpl::TpGatedMlpImpl(const TextTpPlan& plan, const TensorSource& src,
                               const std::string& prefix, comm::Communicator& comm)
    : comm_(&comm) {
  const int r = plan.tp_rank;
  gate_proj = register_module(
      "gate_proj",
      ColumnParallelLinear(src, prefix + "gate_proj.", false, plan.intermediate, r));
  up_proj = register_module("up_proj", ColumnParallelLinear(src, prefix + "up_proj.", false,
                                                            plan.intermediate, r));
  down_proj = register_module(
      "down_proj",
      RowParallelLinear(src, prefix + "down_proj.", false, plan.intermediate, comm));
}

at::Tensor TpGatedMlpImpl::forward(const at::Tensor& x) {
  at::Tensor xp = comm::CopyToParallelRegion(x, *comm_);    // [S, H]
  return down_proj(at::silu(gate_proj(xp)) * up_proj(xp));  // [S, I_r] -> [S, H]
}

TpDecoderLayerImpl::TpDecoderLayerImpl(const TextConfig& config, const TextTpPlan& plan,
                                       const TensorSource& src, const std::string& prefix,
                                       comm::Communicator& comm) {
  input_layernorm = register_module(
      "input_layernorm", MakeReplicatedRmsNorm(config, src, prefix + "input_layernorm."));
  self_attn =
      register_module("self_attn", TpTextAttention(plan, src, prefix + "self_attn.", comm));
  post_attention_layernorm =
      register_module("post_attention_layernorm",
                      MakeReplicatedRmsNorm(config, src, prefix + "post_attention_layernorm."));
  mlp = register_module("mlp", TpGatedMlp(plan, src, prefix + "mlp.", comm));
}

at::Tensor TpDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                       const at::Tensor& sin,
                                       const std::vector<int64_t>& cu_seqlens) {
  at::Tensor h = x + self_attn(input_layernorm(x), cos, sin, cu_seqlens);  // [S, H]
  return h + mlp(post_attention_layernorm(h));
}

}  // namespace dhp::tp
