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
    const StageOptions vision{options.optimizer, options.vision_activation_checkpointing};
    DHP_ASSIGN_OR_RETURN(t->vision_, CreateVisionStage(preset.vision, source, groups, vision));
    t->device_ = t->vision_->device();
  }
  if (groups.text_coord().has_value()) {
    const StageOptions text{options.optimizer, options.text_activation_checkpointing};
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
                      preset_.vision.out_hidden_size};
}

absl::StatusOr<DistStepResult> DistTrainer::Step(const std::vector<PackedBatch>& batches,
                                                 bool gather_grads) {
  absl::StatusOr<DistStepResult> result;
  absl::Status caught = CatchTorch("distributed step", [&] {
    result = StepImpl(batches, gather_grads);
  });
  if (!caught.ok()) return caught;
  return result;
}

absl::StatusOr<DistStepResult> DistTrainer::StepImpl(const std::vector<PackedBatch>& batches,
                                                     bool gather_grads) {
  const comm::Layout& layout = groups_.layout();
  if (static_cast<int>(batches.size()) != layout.dp) {
    return absl::InvalidArgumentError(absl::StrCat("DistTrainer::Step: got ", batches.size(),
                                                   " packed sequences for dp = ", layout.dp,
                                                   "; pass one per data-parallel replica"));
  }
  DistStepResult result;
  result.lr = LearningRateAt(options_.schedule, step_);
  PhaseClock clock;
  const std::vector<int64_t> rows = ImageRows(batches, preset_.vision);
  const HandOffRoute route = Route();

  // 1-2. Vision forward; the embeddings to the text ranks ([M_d, H] on either).
  at::Tensor vision_out;
  if (vision_ != nullptr) {
    DHP_ASSIGN_OR_RETURN(vision_out, vision_->Forward(batches[groups_.vision_coord()->replica]));
  }
  clock.Lap(&result.forward_s);
  DHP_ASSIGN_OR_RETURN(const at::Tensor text_image,
                       HandOff(route, HandOffDirection::kEmbeddings, rows, vision_out));
  clock.Lap(&result.comm_s);

  // 3-5. Text forward and backward; the gradients to the vision ranks; vision backward.
  at::Tensor image_grad;
  if (text_ != nullptr) {
    DHP_ASSIGN_OR_RETURN(image_grad,
                         TextForwardBackward(batches[groups_.text_coord()->replica], text_image,
                                             clock, &result));
  }
  clock.Lap(&result.backward_s);
  DHP_ASSIGN_OR_RETURN(const at::Tensor vision_grad,
                       HandOff(route, HandOffDirection::kGradients, rows, image_grad));
  clock.Lap(&result.comm_s);
  if (vision_ != nullptr) DHP_RETURN_IF_ERROR(vision_->Backward(vision_grad));
  clock.Lap(&result.backward_s);

  // 6-7. Reductions and the global norm; full gradients for tests.
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

absl::StatusOr<at::Tensor> DistTrainer::TextForwardBackward(const PackedBatch& batch,
                                                            const at::Tensor& image,
                                                            PhaseClock& clock,
                                                            DistStepResult* result) {
  DHP_ASSIGN_OR_RETURN(TextLoss loss, text_->Forward(batch, image));
  at::Tensor stats = at::stack({loss.sum.detach().to(at::kDouble), loss.count.to(at::kDouble)});
  DHP_RETURN_IF_ERROR(groups_.text_dp()->AllReduce(stats, comm::ReduceOp::kSum));
  const double global_count = stats[1].item<double>();
  result->loss = stats[0].item<double>() / global_count;
  clock.Lap(&result->forward_s);
  return text_->Backward(global_count);
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
