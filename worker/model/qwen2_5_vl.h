// Qwen2.5-VL for training on one rank: the vision tower and the text stage as two separate
// modules joined by a tensor interface (vision embeddings -> scattered into the text input).
//
// Qwen2_5_VL registers `visual` (the VisionTransformer), and the text stage's `model` and
// `lm_head` directly, so named_parameters() yields exactly the Hugging Face checkpoint names
// (visual.blocks.0.attn.qkv.weight, model.layers.0.self_attn.q_proj.weight, lm_head.weight).
// Parallel code uses the two halves on their own: vision ranks run visual(), hand
// [image tokens, hidden] over, text ranks run ScatterImageEmbeddings + text(). Not thread-safe.
#ifndef DHP_WORKER_MODEL_QWEN2_5_VL_H_
#define DHP_WORKER_MODEL_QWEN2_5_VL_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "worker/model/text_model.h"
#include "worker/model/vision_model.h"
#include "worker/model/vision_window.h"

namespace dhp {

// One packed training sequence (several samples back to back, no batch dimension).
struct PackedBatch {
  at::Tensor input_ids;              // [S] int64
  at::Tensor labels;                 // [S] int64, -100 where no loss is taken
  std::vector<int64_t> cu_seqlens;   // sample bounds 0 = c0 < c1 < ... = S (empty: one sample)
  at::Tensor pixel_values;           // [N, 1176] patches of all images; undefined if none
  std::vector<GridThw> image_grids;  // per image, in the order of their <|image_pad|> runs
  at::Tensor position_ids;           // [3, S] int64; computed by ComputePositionIds if undefined
};

// Replaces the rows of `inputs_embeds` [S, H] at the <|image_pad|> positions of `input_ids` [S],
// in order, by `image_embeds` [M, H] -> [S, H] (differentiable in both). Throws c10::Error when
// the number of <|image_pad|> tokens is not M.
at::Tensor ScatterImageEmbeddings(const at::Tensor& inputs_embeds, const at::Tensor& input_ids,
                                  int64_t image_pad_id, const at::Tensor& image_embeds);

// M-RoPE positions of a batch as a [3, S] int64 tensor (see rope_index.h).
absl::StatusOr<at::Tensor> ComputePositionIds(const PackedBatch& batch, const ModelPreset& config);

class Qwen2_5_VLImpl : public torch::nn::Module {
 public:
  explicit Qwen2_5_VLImpl(const ModelPreset& config);

  // Final hidden states [S, hidden] of the text model (vision run when there are images).
  at::Tensor Hidden(const PackedBatch& batch);
  // Mean next-token loss over labelled positions (scalar fp32).
  at::Tensor Loss(const PackedBatch& batch);
  // [S, vocab].
  at::Tensor Logits(const PackedBatch& batch) { return text->Logits(Hidden(batch)); }

  void set_gradient_checkpointing(bool on);
  const ModelPreset& config() const { return config_; }

  VisionTransformer visual{nullptr};  // registered as `visual`
  TextForCausalLM text{nullptr};      // its children registered as `model` and `lm_head`

 private:
  ModelPreset config_;
};
TORCH_MODULE(Qwen2_5_VL);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_QWEN2_5_VL_H_
