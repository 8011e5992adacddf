#include "worker/model/text_model.h"

#include "worker/model/checkpoint.h"

namespace dhp {

constexpr int64_t kIgnoreIndex = -100;

TextModelImpl::TextModelImpl(const TextConfig& config) : config_(config) {
  embed_tokens =
      register_module("embed_tokens", torch::nn::Embedding(config.vocab_size, config.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < config.num_layers; ++i) layers->push_back(DecoderLayer(config));
  norm = register_module("norm", RmsNorm(config.hidden_size, config.rms_norm_eps));
}

at::Tensor TextModelImpl::Embed(const at::Tensor& input_ids) { return embed_tokens(input_ids); }

at::Tensor TextModelImpl::forward(const at::Tensor& inputs_embeds, const at::Tensor& position_ids,
                                  const std::vector<int64_t>& cu_seqlens) {
  TORCH_CHECK_VALUE(inputs_embeds.dim() == 2 && position_ids.size(-1) == inputs_embeds.size(0),
                    "text: inputs_embeds ", inputs_embeds.sizes(), " and position_ids ",
                    position_ids.sizes(), " must be [S, hidden] and [3, S]");
  auto [cos, sin] = MropeCosSin(config_, position_ids, inputs_embeds.scalar_type());  // [S, D]
  at::Tensor h = inputs_embeds;
  for (int i = 0; i < config_.num_layers; ++i) {
    DecoderLayer lyr = layer(i);
    if (checkpointing_ && is_training()) {
      h = CheckpointedCall(
          [lyr, cos = cos, sin = sin, cu_seqlens](const at::Tensor& in) mutable {
            return lyr->forward(in, cos, sin, cu_seqlens);
          },
          h);
    } else {
      h = lyr->forward(h, cos, sin, cu_seqlens);
    }
  }
  return norm(h);
}

TextForCausalLMImpl::TextForCausalLMImpl(const TextConfig& config) : config_(config) {
  model = register_module("model", TextModel(config));
  if (!config.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head",
        torch::nn::Linear(
            torch::nn::LinearOptions(config.hidden_size, config.vocab_size).bias(false)));
  }
}

at::Tensor TextForCausalLMImpl::forward(const at::Tensor& inputs_embeds,
                                        const at::Tensor& position_ids,
                                        const std::vector<int64_t>& cu_seqlens) {
  return model(inputs_embeds, position_ids, cu_seqlens);
}

at::Tensor TextForCausalLMImpl::Logits(const at::Tensor& hidden) {
  if (lm_head) return lm_head(hidden);
  return at::matmul(hidden, model->embed_tokens->weight.t());  // tied
}

std::pair<at::Tensor, at::Tensor> CausalLmLossSum(const at::Tensor& logits,
                                                  const at::Tensor& labels,
                                                  const std::vector<int64_t>& cu_seqlens) {
  const int64_t s_len = labels.size(0);
  TORCH_CHECK_VALUE(logits.dim() == 2 && logits.size(0) == s_len, "loss: logits ", logits.sizes(),
                    " and labels ", labels.sizes(), " must be [S, vocab] and [S]");
  // targets[i] = labels[i + 1], except at the last token of every sample.
  at::Tensor targets = at::full({s_len}, kIgnoreIndex, labels.options());
  if (s_len > 1) targets.narrow(0, 0, s_len - 1).copy_(labels.narrow(0, 1, s_len - 1));
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    const int64_t last = cu_seqlens[i] - 1;
    if (last >= 0 && last < s_len) targets[last] = kIgnoreIndex;
  }
  at::Tensor per_token = at::cross_entropy_loss(logits.to(at::kFloat), targets, /*weight=*/{},
                                                at::Reduction::None, kIgnoreIndex);  // [S]
  at::Tensor count = (targets != kIgnoreIndex).sum();
  return {per_token.sum(), count};
}

at::Tensor CausalLmLoss(const at::Tensor& logits, const at::Tensor& labels,
                        const std::vector<int64_t>& cu_seqlens) {
  auto [sum, count] = CausalLmLossSum(logits, labels, cu_seqlens);
  return sum / count.clamp_min(1).to(sum.scalar_type());
}

}  // namespace dhp
