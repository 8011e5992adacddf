// The Qwen2.5-VL text decoder: token embedding, decoder layers with M-RoPE, final norm, LM head,
// and the next-token loss over a packed sequence.
//
// TextForCausalLM is a separate module from the vision tower (the two run in different process
// groups); the tensor interface between them is the input embeddings: the text stage embeds
// its tokens (Embed), the image embeddings are scattered into the <|image_pad|> positions
// (ScatterImageEmbeddings in qwen2_5_vl.h), and forward takes the result. Parameter names are
// the checkpoint's: model.embed_tokens.weight, model.layers.N...., model.norm.weight,
// lm_head.weight (absent when the embeddings are tied). Not thread-safe.
#ifndef DHP_WORKER_MODEL_TEXT_MODEL_H_
#define DHP_WORKER_MODEL_TEXT_MODEL_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "common/model_presets.h"
#include "worker/model/layers.h"
#include "worker/model/text_layer.h"

namespace dhp {

// Hugging Face's Qwen2_5_VLTextModel, registered as `model`.
class TextModelImpl : public torch::nn::Module {
 public:
  explicit TextModelImpl(const TextConfig& config);

  at::Tensor Embed(const at::Tensor& input_ids);  // [S] int64 -> [S, hidden]

  // inputs_embeds: [S, hidden], position_ids: [3, S] int64 (per-sample M-RoPE positions),
  // cu_seqlens: packed sample bounds on the host (empty = one sample) -> final-normed [S, hidden].
  at::Tensor forward(const at::Tensor& inputs_embeds, const at::Tensor& position_ids,
                     const std::vector<int64_t>& cu_seqlens);

  DecoderLayer layer(int index) const { return DecoderLayer(layers->ptr<DecoderLayerImpl>(index)); }
  void set_gradient_checkpointing(bool on) { checkpointing_ = on; }

  torch::nn::Embedding embed_tokens{nullptr};  // [vocab, hidden]
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};

 private:
  TextConfig config_;
  bool checkpointing_ = false;
};
TORCH_MODULE(TextModel);

// The text stage: `model` plus `lm_head` (or the tied embedding matrix).
class TextForCausalLMImpl : public torch::nn::Module {
 public:
  explicit TextForCausalLMImpl(const TextConfig& config);

  at::Tensor Embed(const at::Tensor& input_ids) { return model->Embed(input_ids); }
  // See TextModelImpl::forward; returns the final hidden states [S, hidden].
  at::Tensor forward(const at::Tensor& inputs_embeds, const at::Tensor& position_ids,
                     const std::vector<int64_t>& cu_seqlens);
  at::Tensor Logits(const at::Tensor& hidden);  // [S, hidden] -> [S, vocab]

  const TextConfig& config() const { return config_; }
  void set_gradient_checkpointing(bool on) { model->set_gradient_checkpointing(on); }

  TextModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // [vocab, hidden], no bias; null when tied

 private:
  TextConfig config_;
};
TORCH_MODULE(TextForCausalLM);

// Sum and count of the next-token cross entropy over a packed sequence: position i predicts
// labels[i + 1] when i + 1 is in the same sample and labels[i + 1] != -100. logits: [S, vocab]
// (any float dtype; computed in fp32), labels: [S] int64. Returns (sum [] fp32, count [] int64)
// so that data-parallel ranks can combine them exactly.
std::pair<at::Tensor, at::Tensor> CausalLmLossSum(const at::Tensor& logits,
                                                  const at::Tensor& labels,
                                                  const std::vector<int64_t>& cu_seqlens);

// Mean of the above over the counted positions (0 when none is counted).
at::Tensor CausalLmLoss(const at::Tensor& logits, const at::Tensor& labels,
                        const std::vector<int64_t>& cu_seqlens);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_TEXT_MODEL_H_
