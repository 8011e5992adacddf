#include "worker/rank/dist_step.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/layout.h"
#include "common/status_macros.h"
#include "worker/model/torch_status.h"

namespace dhp {
namespace {

constexpr char kStepName[] = "trainer.step";

// [dp][n]: the same n >= 1 micro-batches for every replica.
absl::Status CheckMicroBatches(const std::vector<std::vector<PackedBatch>>& micro_batches,
                               int dp) {
  if (static_cast<int>(micro_batches.size()) != dp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistTrainer::Step: got micro-batches for ", micro_batches.size(),
        " data-parallel replicas, but dp = ", dp, "; pass one list per replica"));
  }
  for (size_t d = 0; d < micro_batches.size(); ++d) {
    if (micro_batches[d].empty() || micro_batches[d].size() != micro_batches[0].size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DistTrainer::Step: replica ", d, " has ", micro_batches[d].size(),
          " micro-batches and replica 0 has ", micro_batches[0].size(),
          "; every replica needs the same number, at least 1"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Wall time per phase: each Lap adds the time since the previous one to a phase. Collectives
// issued inside a forward or backward pass (Ulysses all-to-all, TP all-reduce) count to that
// pass, the hand-offs and reductions to comm.
class DistTrainer::PhaseClock {
 public:
  void Lap(double* phase) {
    const auto now = std::chrono::steady_clock::now();
    *phase += std::chrono::duration<double>(now - mark_).count();
    mark_ = now;
  }

 private:
  std::chrono::steady_clock::time_point mark_ = std::chrono::steady_clock::now();
};

DistTrainer::DistTrainer(const ModelPreset& preset, comm::ProcessGroups& groups,
                         comm::Communicator* handoff, const DistTrainerOptions& options)
    : preset_(preset), groups_(groups), handoff_(handoff), options_(options) {}

absl::StatusOr<std::unique_ptr<DistTrainer>> DistTrainer::Create(
    const ModelPreset& preset, Qwen2_5_VL model, comm::ProcessGroups& groups,
    comm::Communicator* handoff, const DistTrainerOptions& options) {
  return Create(preset, ModuleTensorSource(*model), groups, handoff, options);
}

absl::StatusOr<std::unique_ptr<DistTrainer>> DistTrainer::Create(
    const ModelPreset& preset, const TensorSource& source, comm::ProcessGroups& groups,
    comm::Communicator* handoff, const DistTrainerOptions& options) {
  const comm::Layout& layout = groups.layout();
  if (!layout.HandOffInMemory() && handoff == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistTrainer: layout ", layout.DebugString(),
        " moves the hand-off over the wire; pass a \"handoff\" communicator over the world"));
  }
  std::unique_ptr<DistTrainer> t(new DistTrainer(preset, groups, handoff, options));
  if (groups.vision_coord().has_value()) {
    const StageOptions vision{options.optimizer, options.vision_activation_checkpointing,
                              options.vision_dtype, options.grad_reduce_dtype,
                              options.fp32_grad_accumulation};
    DHP_ASSIGN_OR_RETURN(t->vision_, CreateVisionStage(preset.vision, source, groups, vision));
    t->device_ = t->vision_->device();
  }
  if (groups.text_coord().has_value()) {
    const StageOptions text{options.optimizer, options.text_activation_checkpointing,
                            options.text_dtype, options.grad_reduce_dtype,
                            options.fp32_grad_accumulation};
    DHP_ASSIGN_OR_RETURN(t->text_, CreateTextStage(preset, source, groups, text));
    t->device_ = t->text_->device();
  }
  return t;
}

std::vector<TrainingStage*> DistTrainer::Stages() const {
  std::vector<TrainingStage*> stages;
  if (vision_ != nullptr) stages.push_back(vision_.get());
  if (text_ != nullptr) stages.push_back(text_.get());
  return stages;
}

HandOffRoute DistTrainer::Route() const {
  return HandOffRoute{groups_.layout(), groups_.world_rank(), handoff_, device_,
                      preset_.vision.out_hidden_size, options_.vision_dtype};
}

absl::StatusOr<DistStepResult> DistTrainer::Step(const std::vector<PackedBatch>& batches,
                                                 bool gather_grads) {
  MicroBatches micro_batches;
  for (const PackedBatch& b : batches) micro_batches.push_back({b});
  return Step(micro_batches, gather_grads);
}

absl::StatusOr<DistStepResult> DistTrainer::Step(const MicroBatches& micro_batches,
                                                 bool gather_grads) {
  absl::StatusOr<DistStepResult> result;
  absl::Status caught = CatchTorch("distributed step", [&] {
    result = StepImpl(micro_batches, gather_grads);
  });
  if (!caught.ok()) return caught;
  return result;
}

absl::StatusOr<DistStepResult> DistTrainer::StepImpl(const MicroBatches& micro_batches,
                                                     bool gather_grads) {
  const comm::Layout& layout = groups_.layout();
  DHP_RETURN_IF_ERROR(CheckMicroBatches(micro_batches, layout.dp));
  DistStepResult result;
  result.lr = LearningRateAt(options_.schedule, step_);
  PhaseClock clock;

  // 0. The global count of labelled tokens.
  double global_count = 0;
  at::Tensor loss_sum;  // [] fp64, this text rank's replica, over its micro-batches
  if (text_ != nullptr) {
    const std::vector<PackedBatch>& mine = micro_batches[groups_.text_coord()->replica];
    DHP_ASSIGN_OR_RETURN(global_count, GlobalLabelledTokens(mine));
    loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  }
  clock.Lap(&result.comm_s);

  // 1-5. Forward and backward of every micro-batch, gradients accumulating (in fp32 for a
  // reduced-precision stage when n > 1: StageOptions::fp32_grad_accumulation).
  const size_t n = micro_batches.front().size();
  for (TrainingStage* stage : Stages()) stage->BeginStep(static_cast<int64_t>(n));
  for (size_t k = 0; k < n; ++k) {
    std::vector<PackedBatch> batches;  // micro-batch k of every replica
    for (const std::vector<PackedBatch>& replica : micro_batches) batches.push_back(replica[k]);
    DHP_RETURN_IF_ERROR(MicroStep(batches, global_count, clock, &result, &loss_sum));
  }

  // 6-7. The loss; reductions and the global norm; full gradients for tests.
  if (text_ != nullptr) {
    DHP_RETURN_IF_ERROR(groups_.text_dp()->AllReduce(loss_sum, comm::ReduceOp::kSum));
    result.loss = loss_sum.item<double>() / global_count;
  }
  DHP_ASSIGN_OR_RETURN(result.grad_norm, ReduceGradients());
  const double coef = ClipCoefficient(result.grad_norm, options_.optimizer.grad_clip_norm);
  if (gather_grads) {
    for (TrainingStage* stage : Stages()) {
      DHP_ASSIGN_OR_RETURN(NamedTensors grads, stage->FullGradients());
      for (auto& nt : grads) result.grads.push_back(std::move(nt));
    }
  }
  clock.Lap(&result.comm_s);

  // 8. Optimizer steps.
  for (TrainingStage* stage : Stages()) DHP_RETURN_IF_ERROR(stage->Step(result.lr, coef));
  clock.Lap(&result.optimizer_s);
  ++step_;
  return result;
}

absl::StatusOr<double> DistTrainer::GlobalLabelledTokens(const std::vector<PackedBatch>& mine) {
  at::Tensor count = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (const PackedBatch& b : mine) count += text_->LabelledTokens(b).to(at::kDouble);
  DHP_RETURN_IF_ERROR(groups_.text_dp()->AllReduce(count, comm::ReduceOp::kSum));
  return count.item<double>();
}

absl::Status DistTrainer::MicroStep(const std::vector<PackedBatch>& batches, double global_count,
                                    PhaseClock& clock, DistStepResult* result,
                                    at::Tensor* loss_sum) {
  const std::vector<int64_t> rows = ImageRows(batches, preset_.vision);
  const HandOffRoute route = Route();

  // 1-2. Vision forward; the embeddings to the text ranks ([M_dk, H] on either).
  at::Tensor vision_out;
  if (vision_ != nullptr) {
    DHP_ASSIGN_OR_RETURN(vision_out, vision_->Forward(batches[groups_.vision_coord()->replica]));
  }
  clock.Lap(&result->forward_s);
  DHP_ASSIGN_OR_RETURN(const at::Tensor text_image,
                       HandOff(route, HandOffDirection::kEmbeddings, rows, vision_out));
  clock.Lap(&result->comm_s);

  // 3-5. Text forward and backward; the gradients to the vision ranks; vision backward.
  at::Tensor image_grad;
  if (text_ != nullptr) {
    const PackedBatch& b = batches[groups_.text_coord()->replica];
    DHP_ASSIGN_OR_RETURN(const at::Tensor sum, text_->Forward(b, text_image));
    *loss_sum += sum.to(at::kDouble);
    clock.Lap(&result->forward_s);
    DHP_ASSIGN_OR_RETURN(image_grad, text_->Backward(global_count));
  }
  clock.Lap(&result->backward_s);
  DHP_ASSIGN_OR_RETURN(const at::Tensor vision_grad,
                       HandOff(route, HandOffDirection::kGradients, rows, image_grad));
  clock.Lap(&result->comm_s);
  if (vision_ != nullptr) DHP_RETURN_IF_ERROR(vision_->Backward(vision_grad));
  clock.Lap(&result->backward_s);
  return absl::OkStatus();
}

absl::StatusOr<double> DistTrainer::ReduceGradients() {
  double local_sq = 0;
  for (TrainingStage* stage : Stages()) {
    DHP_RETURN_IF_ERROR(stage->ReduceGradients());
    DHP_ASSIGN_OR_RETURN(double sq, stage->GradSquaredNormShare());
    local_sq += sq;
  }
  at::Tensor total = at::tensor({local_sq}, at::kDouble);  // one all-reduce over the world
  DHP_RETURN_IF_ERROR(groups_.world().AllReduce(total, comm::ReduceOp::kSum));
  return std::sqrt(total.item<double>());
}

absl::StatusOr<DistTrainer::NamedTensors> DistTrainer::FullParameters() {
  NamedTensors out;
  for (TrainingStage* stage : Stages()) {
    DHP_ASSIGN_OR_RETURN(NamedTensors params, stage->FullParameters());
    for (auto& nt : params) out.push_back(std::move(nt));
  }
  return out;
}

absl::StatusOr<DistTrainer::NamedTensors> DistTrainer::State() {
  absl::StatusOr<NamedTensors> live = LiveState();
  if (!live.ok()) return live.status();
  absl::Status s = CatchTorch("trainer state", [&] {
    for (auto& [name, t] : *live) t = t.clone();
  });
  if (!s.ok()) return s;
  return live;
}

absl::StatusOr<DistTrainer::NamedTensors> DistTrainer::LiveState() {
  NamedTensors out;
  absl::Status s = CatchTorch("trainer state", [&] {
    at::NoGradGuard no_grad;
    out.emplace_back(kStepName, at::tensor({step_}, at::kLong));
    for (TrainingStage* stage : Stages()) stage->AppendLiveState(&out);
  });
  if (!s.ok()) return s;
  return out;
}

absl::Status DistTrainer::LoadState(const NamedTensors& state) {
  absl::Status result;
  absl::Status caught = CatchTorch("loading trainer state", [&] { result = LoadStateImpl(state); });
  return caught.ok() ? result : caught;
}

absl::Status DistTrainer::LoadStateImpl(const NamedTensors& state) {
  StateReader reader(state);
  const at::Tensor step = reader.Take(kStepName, {1});
  std::vector<TrainingStage::StateLoad> loads;
  for (TrainingStage* stage : Stages()) loads.push_back(stage->TakeState(reader));
  DHP_RETURN_IF_ERROR(reader.Finish(absl::StrCat("world rank ", groups_.world_rank(),
                                                 " of layout ", groups_.layout().DebugString())));
  if (step.scalar_type() != at::kLong || step.item<int64_t>() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kStepName, ": expected a non-negative int64 step count"));
  }
  for (const TrainingStage::StateLoad& load : loads) DHP_RETURN_IF_ERROR(load());
  step_ = step.item<int64_t>();
  return absl::OkStatus();
}

}  // namespace dhp
