#include "worker/model/qwen2_5_vl.h"

#include "worker/model/rope_index.h"

namespace dhp {

at::Tensor ScatterImageEmbeddings(const at::Tensor& inputs_embeds, const at::Tensor& input_ids,
                                  int64_t image_pad_id, const at::Tensor& image_embeds) {
  at::Tensor positions = (input_ids == image_pad_id).nonzero().view({-1});  // [M]
  TORCH_CHECK_VALUE(positions.size(0) == image_embeds.size(0), "the text has ", positions.size(0),
                    " <|image_pad|> tokens but the vision tower produced ", image_embeds.size(0),
                    " image embeddings");
  if (positions.size(0) == 0) return inputs_embeds;
  return inputs_embeds.index_copy(0, positions, image_embeds.to(inputs_embeds.scalar_type()));
}

absl::StatusOr<at::Tensor> ComputePositionIds(const PackedBatch& batch, const ModelPreset& config) {
  at::Tensor ids = batch.input_ids.to(at::kCPU).to(at::kLong).contiguous();
  std::vector<int64_t> host(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  absl::StatusOr<std::vector<int64_t>> pos = ComputeMropePositions(
      host, batch.cu_seqlens, batch.image_grids, config.vision, config.tokens);
  if (!pos.ok()) return pos.status();
  return at::tensor(*pos, at::TensorOptions().dtype(at::kLong))
      .view({3, ids.numel()})
      .to(batch.input_ids.device());
}

Qwen2_5_VLImpl::Qwen2_5_VLImpl(const ModelPreset& config) : config_(config) {
  visual = register_module("visual", VisionTransformer(config.vision));
  text = TextForCausalLM(config.text);
  register_module("model", text->model);
  if (text->lm_head) register_module("lm_head", text->lm_head);
}

at::Tensor Qwen2_5_VLImpl::Hidden(const PackedBatch& batch) {
  at::Tensor embeds = text->Embed(batch.input_ids);  // [S, hidden]
  if (!batch.image_grids.empty()) {
    at::Tensor image_embeds = visual(batch.pixel_values, batch.image_grids);  // [M, hidden]
    embeds =
        ScatterImageEmbeddings(embeds, batch.input_ids, config_.tokens.image_pad, image_embeds);
  }
  at::Tensor position_ids = batch.position_ids;
  if (!position_ids.defined()) {
    absl::StatusOr<at::Tensor> pos = ComputePositionIds(batch, config_);
    TORCH_CHECK_VALUE(pos.ok(), "position ids: ", std::string(pos.status().message()));
    position_ids = *pos;
  }
  return text(embeds, position_ids, batch.cu_seqlens);
}

at::Tensor Qwen2_5_VLImpl::Loss(const PackedBatch& batch) {
  return CausalLmLoss(text->Logits(Hidden(batch)), batch.labels, batch.cu_seqlens);
}

void Qwen2_5_VLImpl::set_gradient_checkpointing(bool on) {
  visual->set_gradient_checkpointing(on);
  text->set_gradient_checkpointing(on);
}

}  // namespace dhp
