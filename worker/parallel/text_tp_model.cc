#include "worker/parallel/text_tp_model.h"

#include <c10/util/Exception.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/comm/autograd_collectives.h"
#include "worker/model/checkpoint.h"
#include "worker/model/text_layer.h"
#include "worker/model/torch_status.h"

namespace dhp::tp {
namespace {

TextTpPlan PlanOrThrow(const TextConfig& config, const comm::Communicator& comm) {
  absl::StatusOr<TextTpPlan> plan = MakeTextTpPlan(config, comm.size(), comm.rank());
  TORCH_CHECK_VALUE(plan.ok(), "text TP on group ", comm.name(), ": ", plan.status().message());
  return *std::move(plan);
}

}  // namespace

TextTpDecoderImpl::TextTpDecoderImpl(const TextConfig& config, const TextTpPlan& plan,
                                     const TensorSource& src, comm::Communicator& comm)
    : config_(config) {
  embed_tokens = register_module(
      "embed_tokens", VocabParallelEmbedding(src, "model.embed_tokens.weight", plan.vocab, comm));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < config.num_layers; ++i) {
    layers->push_back(
        TpDecoderLayer(config, plan, src, absl::StrCat("model.layers.", i, "."), comm));
  }
  norm = register_module("norm", MakeReplicatedRmsNorm(config, src, "model.norm."));
}

at::Tensor TextTpDecoderImpl::Embed(const at::Tensor& input_ids) { return embed_tokens(input_ids); }

at::Tensor TextTpDecoderImpl::forward(const at::Tensor& inputs_embeds,
                                      const at::Tensor& position_ids,
                                      const std::vector<int64_t>& cu_seqlens) {
  TORCH_CHECK_VALUE(inputs_embeds.dim() == 2 && position_ids.size(-1) == inputs_embeds.size(0),
                    "text TP: inputs_embeds ", inputs_embeds.sizes(), " and position_ids ",
                    position_ids.sizes(), " must be [S, hidden] and [3, S]");
  auto [cos, sin] = MropeCosSin(config_, position_ids, inputs_embeds.scalar_type());  // [S, D]
  at::Tensor h = inputs_embeds;                                                       // [S, H]
  for (int i = 0; i < config_.num_layers; ++i) {
    TpDecoderLayer lyr = layer(i);
    if (checkpointing_ && is_training()) {
      // The recomputation in backward repeats the layer's two forward all-reduces, in the same
      // order on every rank.
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

TextTpModelImpl::TextTpModelImpl(const TextConfig& config, const TensorSource& src,
                                 comm::Communicator& comm)
    : config_(config), plan_(PlanOrThrow(config, comm)), comm_(&comm) {
  model = register_module("model", TextTpDecoder(config, plan_, src, comm));
  if (!config.tie_word_embeddings) {
    lm_head = register_module("lm_head", ColumnParallelLinear(src, "lm_head.", false,
                                                              plan_.vocab, plan_.tp_rank));
  }
  layout_ = CollectShardLayout(*this);
}

at::Tensor TextTpModelImpl::LocalLogits(const at::Tensor& hidden) {
  // Entering the parallel region makes the gradient into the final norm (and on into the
  // residual stream) the sum over every rank's vocabulary slice.
  at::Tensor hp = comm::CopyToParallelRegion(hidden, *comm_);  // [S, H]
  if (lm_head) return lm_head(hp);                             // [S, vocab_r]
  return at::matmul(hp, model->embed_tokens->weight.t());      // tied: [S, vocab_r]
}

std::pair<at::Tensor, at::Tensor> TextTpModelImpl::forward(const at::Tensor& inputs_embeds,
                                                           const at::Tensor& position_ids,
                                                           const at::Tensor& labels,
                                                           const std::vector<int64_t>& cu_seqlens) {
  at::Tensor logits = LocalLogits(Hidden(inputs_embeds, position_ids, cu_seqlens));  // [S, V_r]
  return VocabParallelCausalLmLossSum(logits, labels, cu_seqlens, plan_.my_vocab().start, *comm_);
}

absl::StatusOr<TextTpModel> CreateTextTpModel(const TextConfig& config, const TensorSource& src,
                                              comm::Communicator& comm) {
  if (absl::Status s = ValidateTextTp(config, comm.size()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", comm.name(), ": ", s.message()));
  }
  return CatchTorch(absl::StrCat("building the text TP model on group ", comm.name()),
                    [&] { return TextTpModel(config, src, comm); });
}

}  // namespace dhp::tp
