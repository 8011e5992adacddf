#include "worker/rank/vision_stage_zero1.h"

#include <torch/autograd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dhp {
namespace {

constexpr char kPrefix[] = "visual.";
constexpr char kZeroPrefix[] = "optim.vision.";

std::string ZeroName(const char* what) { return absl::StrCat(kZeroPrefix, what); }

}  // namespace

Zero1VisionStage::Zero1VisionStage(const VisionConfig& config, VisionTransformer tower,
                                   comm::Communicator& zero_group,
                                   const std::vector<double>& norm_weights,
                                   const StageOptions& options)
    : config_(config), options_(options), tower_(std::move(tower)) {
  tower_->set_gradient_checkpointing(options.activation_checkpointing);
  for (const auto& item : tower_->parameters()) {
    device_ = item.device();
    break;
  }
  Zero1AdamW::NamedParams params;
  for (const auto& item : tower_->named_parameters()) {
    if (item.value().requires_grad()) params.emplace_back(kPrefix + item.key(), item.value());
  }
  zero1_ = std::make_unique<Zero1AdamW>(params, options.optimizer, zero_group, norm_weights,
                                        options.grad_reduce_dtype);
}

void Zero1VisionStage::BeginStep(int64_t micro_batches) {
  BeginGradAccumulation(options_, micro_batches, Parameters());
}

absl::StatusOr<at::Tensor> Zero1VisionStage::Forward(const PackedBatch& batch) {
  output_ = at::Tensor();
  if (batch.image_grids.empty()) return at::Tensor();
  DHP_ASSIGN_OR_RETURN(VisionWindowPlan plan, MakeVisionWindowPlan(batch.image_grids, config_));
  DHP_ASSIGN_OR_RETURN(at::Tensor out, Embed(batch.pixel_values, plan));
  output_ = out.contiguous();
  return output_.detach();
}

absl::Status Zero1VisionStage::Backward(const at::Tensor& grad) {
  if (!output_.defined()) return absl::OkStatus();
  at::Tensor out = std::move(output_);
  output_ = at::Tensor();
  out.backward(grad);
  return absl::OkStatus();
}

absl::Status Zero1VisionStage::ReduceGradients() { return zero1_->ReduceScatterGradients(); }

absl::StatusOr<double> Zero1VisionStage::GradSquaredNormShare() {
  return zero1_->PartialGradSquaredNorm();
}

absl::Status Zero1VisionStage::Step(double lr, double clip_coef) {
  DHP_RETURN_IF_ERROR(zero1_->Step(lr, clip_coef));
  zero1_->ZeroGrad();
  return absl::OkStatus();
}

TrainingStage::NamedTensors Zero1VisionStage::Parameters() const {
  NamedTensors out;
  for (const auto& item : tower_->named_parameters()) {
    out.emplace_back(kPrefix + item.key(), item.value());
  }
  return out;
}

void Zero1VisionStage::AppendLiveState(NamedTensors* out) {
  for (const auto& [name, p] : Parameters()) out->emplace_back(name, p.detach());
  Zero1AdamW::PartitionState z = zero1_->StateView();
  out->emplace_back(ZeroName("master"), z.master);
  out->emplace_back(ZeroName("exp_avg"), z.exp_avg);
  out->emplace_back(ZeroName("exp_avg_sq"), z.exp_avg_sq);
  out->emplace_back(ZeroName("step"), at::tensor({z.step}, at::kLong));
}

TrainingStage::StateLoad Zero1VisionStage::TakeState(StateReader& reader) {
  const int64_t n = zero1_->partition_numel();
  Zero1AdamW::PartitionState zero;
  zero.master = reader.Take(ZeroName("master"), {n});
  zero.exp_avg = reader.Take(ZeroName("exp_avg"), {n});
  zero.exp_avg_sq = reader.Take(ZeroName("exp_avg_sq"), {n});
  const at::Tensor z = reader.Take(ZeroName("step"), {1});
  if (z.defined()) zero.step = z.to(at::kLong).item<int64_t>();
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (parameter, stored)
  for (const auto& [name, p] : Parameters()) copies.emplace_back(p, reader.Take(name, p.sizes()));
  return [this, zero, copies]() -> absl::Status {
    DHP_RETURN_IF_ERROR(zero1_->LoadState(zero));
    at::NoGradGuard no_grad;
    for (const auto& [p, stored] : copies) p.detach().copy_(stored);
    return absl::OkStatus();
  };
}

absl::StatusOr<TrainingStage::NamedTensors> Zero1VisionStage::FullGradients() {
  comm::Communicator& group = zero1_->group();
  at::Tensor full = zero1_->grad_partition();
  if (group.size() > 1) {
    DHP_ASSIGN_OR_RETURN(full, group.AllGather(zero1_->grad_partition()));
  }
  NamedTensors out;
  int64_t offset = 0;
  for (const auto& item : tower_->named_parameters()) {
    const at::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    at::Tensor grad = full.narrow(0, offset, p.numel()).view(p.sizes()).clone();
    offset += p.numel();
    DHP_ASSIGN_OR_RETURN(grad, FullGradient(item.key(), std::move(grad)));
    out.emplace_back(kPrefix + item.key(), std::move(grad));
  }
  return out;
}

}  // namespace dhp
