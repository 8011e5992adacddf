#include "worker/rank/text_stage.h"

#include <torch/autograd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "worker/optim/optimizer.h"
#include "worker/optim/optimizer_state.h"
#include "worker/parallel/text_tp_model.h"
#include "worker/parallel/tp_state.h"
#include "worker/parallel/vocab_parallel.h"

namespace dhp {
namespace {

constexpr char kOptPrefix[] = "optim.text.";
constexpr int64_t kIgnoreIndex = -100;  // CausalLmTargets' "no loss here"

class TpTextStage : public TextStage {
 public:
  TpTextStage(const ModelPreset& preset, tp::TextTpModel model, comm::ProcessGroups& groups,
              const StageOptions& options)
      : preset_(preset),
        model_(std::move(model)),
        tp_(*groups.text_tp()),
        dp_(*groups.text_dp()),
        text_size_(groups.layout().TextSize()),
        options_(options) {
    model_->set_gradient_checkpointing(options.activation_checkpointing);
    for (const auto& item : model_->parameters()) {
      device_ = item.device();
      break;
    }
    opt_ = std::make_unique<TrainingOptimizer>(Parameters(), options.optimizer);
  }

  at::Tensor LabelledTokens(const PackedBatch& b) const override {
    return (tp::CausalLmTargets(b.labels, b.cu_seqlens) != kIgnoreIndex).sum();
  }

  void BeginStep(int64_t micro_batches) override {
    BeginGradAccumulation(options_, micro_batches, Parameters());
  }

  absl::StatusOr<at::Tensor> Forward(const PackedBatch& b, const at::Tensor& image) override {
    image_ = image;
    at::Tensor embeds = model_->Embed(b.input_ids);
    if (image_.defined()) {
      // The leaf is in the vision stage's dtype (ScatterImageEmbeddings converts), so its
      // gradient goes back in that dtype.
      image_.requires_grad_(true);
      embeds = ScatterImageEmbeddings(embeds, b.input_ids, preset_.tokens.image_pad, image_);
    }
    at::Tensor pos = b.position_ids;
    if (!pos.defined()) {
      DHP_ASSIGN_OR_RETURN(pos, ComputePositionIds(b, preset_));
    }
    sum_ = model_->forward(embeds, pos, b.labels, b.cu_seqlens).first;
    return sum_.detach();
  }

  absl::StatusOr<at::Tensor> Backward(double global_count) override {
    at::Tensor sum = std::move(sum_);
    sum_ = at::Tensor();
    (sum / global_count).backward();
    at::Tensor image = std::move(image_);
    image_ = at::Tensor();
    if (!image.defined()) return at::Tensor();
    const at::Tensor grad = image.grad().defined() ? image.grad() : at::zeros_like(image);
    return grad.contiguous();
  }

  absl::Status ReduceGradients() override {
    DHP_RETURN_IF_ERROR(
        tp::FinishTpGradients(*model_, model_->shard_layout(), tp_, options_.grad_reduce_dtype));
    return tp::AllReduceDataParallelGrads(*model_, dp_, tp::DpGradReduce::kSum,
                                          tp::kDefaultBucketBytes, options_.grad_reduce_dtype);
  }

  absl::StatusOr<double> GradSquaredNormShare() override {
    DHP_ASSIGN_OR_RETURN(double sq, tp::GradSquaredNorm(*model_, model_->shard_layout(), tp_));
    return sq / text_size_;  // the same on every text rank
  }

  absl::Status Step(double lr, double clip_coef) override {
    {
      at::NoGradGuard no_grad;
      for (const auto& item : model_->named_parameters()) {
        if (item.value().grad().defined() && clip_coef != 1.0) {
          item.value().mutable_grad().mul_(clip_coef);
        }
      }
    }
    opt_->SetLearningRate(lr);
    opt_->Step();
    opt_->ZeroGrad();
    return absl::OkStatus();
  }

  NamedTensors Parameters() const override {
    NamedTensors out;
    for (const auto& item : model_->named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  }

  void AppendLiveState(NamedTensors* out) override {
    const NamedTensors params = Parameters();
    for (const auto& [name, p] : params) out->emplace_back(name, p.detach());
    for (auto& nt : AdamWStateTensors(*opt_, params, kOptPrefix, /*copy=*/false)) {
      out->push_back(std::move(nt));
    }
  }

  StateLoad TakeState(StateReader& reader) override {
    const NamedTensors params = Parameters();
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (parameter, stored)
    for (const auto& [name, p] : params) copies.emplace_back(p, reader.Take(name, p.sizes()));
    absl::StatusOr<AdamWTakenState> adam = TakeAdamWState(params, kOptPrefix, reader.rest());
    if (!adam.ok()) reader.AddProblem(std::string(adam.status().message()));
    return [this, params, copies, adam]() -> absl::Status {
      at::NoGradGuard no_grad;
      for (const auto& [p, stored] : copies) p.detach().copy_(stored);
      SetAdamWState(*opt_, params, *adam);
      return absl::OkStatus();
    };
  }

  absl::StatusOr<NamedTensors> FullParameters() override {
    return tp::GatherFullTensors(*model_, model_->shard_layout(), tp_,
                                 tp::TensorKind::kParameters);
  }

  absl::StatusOr<NamedTensors> FullGradients() override {
    return tp::GatherFullTensors(*model_, model_->shard_layout(), tp_, tp::TensorKind::kGradients);
  }

  at::Device device() const override { return device_; }

 private:
  ModelPreset preset_;
  tp::TextTpModel model_;
  comm::Communicator& tp_;
  comm::Communicator& dp_;
  int text_size_;
  StageOptions options_;
  at::Device device_ = at::kCPU;
  std::unique_ptr<TrainingOptimizer> opt_;
  at::Tensor image_;  // the last Forward's image rows (leaf requiring grad) until Backward
  at::Tensor sum_;    // the last Forward's loss sum, with its graph, until Backward
};

}  // namespace

absl::StatusOr<std::unique_ptr<TextStage>> CreateTextStage(const ModelPreset& preset,
                                                           const TensorSource& source,
                                                           comm::ProcessGroups& groups,
                                                           const StageOptions& options) {
  const CastTensorSource cast(source, options.dtype);  // the stage's dtype, slice by slice
  DHP_ASSIGN_OR_RETURN(tp::TextTpModel model,
                       tp::CreateTextTpModel(preset.text, cast, *groups.text_tp()));
  return std::unique_ptr<TextStage>(new TpTextStage(preset, std::move(model), groups, options));
}

}  // namespace dhp
