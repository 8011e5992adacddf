// TextTpModel: the Qwen2.5-VL text stage under Megatron tensor parallelism over one TP group
// (the TP twin of TextForCausalLM in worker/model/text_model.h): vocab-parallel embedding, TP
// decoder layers (text_tp_layer.h), replicated final norm, vocab-parallel LM head (column-
// parallel over the vocabulary, or the tied embedding shard) and vocab-parallel cross entropy.
// No rank materialises [S, vocab] logits: LocalLogits is [S, vocab_r].
//
// Use in a step (every TP rank of the group calls the same functions in the same order):
//   at::Tensor embeds = m->Embed(input_ids);            // [S, H], complete on every rank
//   embeds = <scatter the vision embeddings into the <|image_pad|> rows>;
//   auto [sum, count] = m->forward(embeds, position_ids, labels, cu_seqlens);
//   (sum / global_count).backward();                    // global_count: over DP and micro-batches
//   FinishTpGradients(*m, m->shard_layout(), tp);       // then DP reduction, norm: tp_state.h
// The gradient reaching `embeds` (hence the image rows) is complete and identical on every TP
// rank: that is what flows back to the vision stage.
//
// Parameter names are the checkpoint's (model.embed_tokens.weight, model.layers.N...,
// model.norm.weight, lm_head.weight when untied), each holding this rank's shard;
// shard_layout() says how each sharded one re-assembles (tp_shard.h, tp_state.h).
//
// TP collectives per step (group size T > 1, L layers, S tokens, H hidden; all all-reduces,
// counted by CommStats as 2*N*(T-1)/T bytes sent per call of N bytes):
//   forward:  1 x [S, H] (embedding) + 2L x [S, H] (o_proj, down_proj)
//             + 1 x [S] fp32 (CE max) + 1 x [S, 2] fp32 (CE sum-exp and target logit)
//   backward: 2L x [S, H] (attention and MLP inputs) + 1 x [S, H] (LM-head input)
//   with gradient checkpointing: + 2L x [S, H] (forward recomputed in backward)
//   after backward, when KV heads are replicated (T > Hkv): 1 x [L * 2 * Hkv*D * (H + 1)] (the
//             k/v weight and bias gradients summed over their holders; FinishTpGradients)
// i.e. (4L + 2) * S * H activation elements + 3 * S fp32 per step.
//
// Thread-safety: not thread-safe (one rank's training thread). The Communicator is borrowed and
// must outlive the model and every backward pass through it.
#ifndef DHP_WORKER_PARALLEL_TEXT_TP_MODEL_H_
#define DHP_WORKER_PARALLEL_TEXT_TP_MODEL_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "worker/comm/communicator.h"
#include "worker/model/layers.h"
#include "worker/parallel/text_tp_layer.h"
#include "worker/parallel/tp_layers.h"
#include "worker/parallel/tp_shard.h"
#include "worker/parallel/vocab_parallel.h"

namespace dhp::tp {

// The decoder, registered as `model` (HF's Qwen2_5_VLTextModel under TP).
class TextTpDecoderImpl : public torch::nn::Module {
 public:
  TextTpDecoderImpl(const TextConfig& config, const TextTpPlan& plan, const TensorSource& src,
                    comm::Communicator& comm);

  at::Tensor Embed(const at::Tensor& input_ids);  // [S] int64 -> [S, H]
  // inputs_embeds [S, H], position_ids [3, S], cu_seqlens -> final-normed [S, H] (replicated).
  at::Tensor forward(const at::Tensor& inputs_embeds, const at::Tensor& position_ids,
                     const std::vector<int64_t>& cu_seqlens);

  TpDecoderLayer layer(int index) const {
    return TpDecoderLayer(layers->ptr<TpDecoderLayerImpl>(index));
  }
  void set_gradient_checkpointing(bool on) { checkpointing_ = on; }

  VocabParallelEmbedding embed_tokens{nullptr};  // [vocab_r, H]
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};

 private:
  TextConfig config_;
  bool checkpointing_ = false;
};
TORCH_MODULE(TextTpDecoder);

class TextTpModelImpl : public torch::nn::Module {
 public:
  // `src` yields this rank's slices of the full HF-shaped tensors by name (shard-first: only
  // those are read; ModuleTensorSource(model) for a single-rank TextForCausalLM); `comm` is the
  // TP group ("text.tp<d>"). Throws c10::Error (ValueError) for a degree the config does not
  // support or a tensor the source lacks; CreateTextTpModel returns a Status.
  TextTpModelImpl(const TextConfig& config, const TensorSource& src, comm::Communicator& comm);

  at::Tensor Embed(const at::Tensor& input_ids) { return model->Embed(input_ids); }
  // [S, H], [3, S], bounds -> final hidden states [S, H].
  at::Tensor Hidden(const at::Tensor& inputs_embeds, const at::Tensor& position_ids,
                    const std::vector<int64_t>& cu_seqlens) {
    return model(inputs_embeds, position_ids, cu_seqlens);
  }
  // hidden [S, H] -> this rank's logits [S, vocab_r] (columns plan().my_vocab()).
  at::Tensor LocalLogits(const at::Tensor& hidden);
  // Loss over the packed sequence, as CausalLmLossSum: (sum [] fp32, count [] int64), the same
  // on every TP rank. inputs_embeds [S, H], position_ids [3, S], labels [S] int64 (-100 =
  // ignored), cu_seqlens: sample bounds on the host (empty = one sample).
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& inputs_embeds,
                                            const at::Tensor& position_ids,
                                            const at::Tensor& labels,
                                            const std::vector<int64_t>& cu_seqlens);

  const TextConfig& config() const { return config_; }
  const TextTpPlan& plan() const { return plan_; }
  comm::Communicator& comm() const { return *comm_; }
  // Full parameter name -> shard, for the sharded parameters (the rest are replicated).
  const ShardLayout& shard_layout() const { return layout_; }
  void set_gradient_checkpointing(bool on) { model->set_gradient_checkpointing(on); }

  TextTpDecoder model{nullptr};
  ColumnParallelLinear lm_head{nullptr};  // [vocab_r, H], no bias; null when tied

 private:
  TextConfig config_;
  TextTpPlan plan_;
  comm::Communicator* comm_;
  ShardLayout layout_;
};
TORCH_MODULE(TextTpModel);

// Validates the degree (ValidateTextTp) and builds the model; c10::Errors become Statuses.
absl::StatusOr<TextTpModel> CreateTextTpModel(const TextConfig& config, const TensorSource& src,
                                              comm::Communicator& comm);

}  // namespace dhp::tp

#endif  // DHP_WORKER_PARALLEL_TEXT_TP_MODEL_H_
