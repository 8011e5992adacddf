#include "worker/rank/trainer.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "worker/data/packing.h"
#include "worker/model/layers.h"
#include "worker/model/torch_compat.h"
#include "worker/model/torch_status.h"
#include "worker/rank/batch.h"
#include "worker/rank/model_init.h"
#include "worker/rank/training_config.h"

namespace dhp {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string Layout(const v1::JobSpec& s) {
  return absl::StrCat("vision ", v1::Parallelism_Name(s.vision().parallelism()), " x",
                      s.vision().degree(), " (zero_stage ", s.vision().zero_stage(), "), text ",
                      v1::Parallelism_Name(s.text().parallelism()), " x", s.text().degree(),
                      ", data_parallel_size ", s.data_parallel_size(), ", placement ",
                      v1::Placement_Name(s.placement()));
}

}  // namespace

SingleRankTrainer::SingleRankTrainer(const v1::JobSpec& spec, const ModelPreset& preset,
                                     const at::Device& device)
    : spec_(spec), preset_(preset), device_(device) {}

SingleRankTrainer::~SingleRankTrainer() = default;

absl::StatusOr<std::unique_ptr<SingleRankTrainer>> SingleRankTrainer::Create(
    const v1::JobSpec& spec, const TrainerOptions& options) {
  absl::StatusOr<ModelPreset> preset = ResolveSpecModel(spec, RankSpecOptions(options.data_root));
  if (!preset.ok()) return preset.status();
  if (spec.training().batch_size() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.batch_size: ", spec.training().batch_size(), " (is the spec normalised?)"));
  }
  absl::StatusOr<at::Device> device = ParseTrainingDevice(options.device);
  if (!device.ok()) return device.status();
  std::unique_ptr<SingleRankTrainer> t(new SingleRankTrainer(spec, *preset, *device));
  absl::Status s = t->Init(options);
  if (!s.ok()) return s;
  return t;
}

absl::Status SingleRankTrainer::Init(const TrainerOptions& options) {
  notes_.push_back(absl::StrCat("one rank: the spec's layout (", Layout(spec_),
                                ") is ignored; the whole model trains on ", device_.str()));
  // Precision per stage.
  const auto stage_precision = [&](const char* stage, v1::DType dtype, bool* bf16) {
    *bf16 = false;
    if (dtype == v1::DTYPE_FP32 || dtype == v1::DTYPE_UNSPECIFIED) return absl::OkStatus();
    if (dtype == v1::DTYPE_FP16) {
      return absl::UnimplementedError(absl::StrCat(
          stage, ".dtype: fp16 needs loss scaling, which dhp does not implement; use bf16"));
    }
    *bf16 = true;
    notes_.push_back(
        absl::StrCat(stage, ": bf16 autocast on ", device_.str(), ", fp32 master weights"));
    return absl::OkStatus();
  };
  absl::Status s = stage_precision("vision", spec_.vision().dtype(), &vision_bf16_);
  if (s.ok()) s = stage_precision("text", spec_.text().dtype(), &text_bf16_);
  if (!s.ok()) return s;
  DataPipelineOptions data_options;
  data_options.data_root = options.data_root;
  data_options.tokenizer_path = options.tokenizer_path;
  data_options.skip_invalid_samples = options.skip_invalid_samples;
  dump_first_batch_ = options.dump_first_batch;
  save_first_grads_ = options.save_first_grads;
  absl::StatusOr<std::unique_ptr<DataPipeline>> data =
      DataPipeline::Create(spec_, preset_, data_options);
  if (!data.ok()) return data.status();
  data_ = std::move(*data);
  for (const std::string& note : data_->notes()) notes_.push_back(note);
  loader_ = data_->MakeLoader();
  absl::StatusOr<TrainingConfig> config = TrainingConfigForSpec(spec_, data_->mix().epoch_size());
  if (!config.ok()) return config.status();
  for (const std::string& note : config->notes) notes_.push_back(note);
  max_steps_ = config->max_steps;
  schedule_ = config->schedule;
  return InitModel(options, config->optimizer);
}

absl::Status SingleRankTrainer::InitModel(const TrainerOptions& options,
                                          const OptimizerConfig& optimizer) {
  absl::StatusOr<Qwen2_5_VL> model =
      CreateModelForSpec(spec_, preset_, options.data_root, device_, &notes_);
  if (!model.ok()) return model.status();
  model_ = *model;
  optimizer_ = std::make_unique<TrainingOptimizer>(NamedParameters(), optimizer);
  return absl::OkStatus();
}

NamedTensors SingleRankTrainer::NamedParameters() const {
  NamedTensors out;
  for (const auto& item : model_->named_parameters(/*recurse=*/true)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::pair<at::Tensor, at::Tensor> SingleRankTrainer::ForwardLossSum(const PackedBatch& batch) {
  // The two stages through their tensor interface (as parallel ranks run them), each under its
  // own precision.
  at::Tensor embeds = model_->text->Embed(batch.input_ids);  // [S, hidden]
  if (!batch.image_grids.empty()) {
    at::Tensor image_embeds;  // [M, hidden]
    {
      std::optional<compat::AutocastGuard> autocast;
      if (vision_bf16_) autocast.emplace(device_.type(), at::kBFloat16);
      image_embeds = model_->visual(batch.pixel_values, batch.image_grids);
    }
    embeds = ScatterImageEmbeddings(embeds, batch.input_ids, preset_.tokens.image_pad,
                                    image_embeds);
  }
  std::optional<compat::AutocastGuard> autocast;
  if (text_bf16_) autocast.emplace(device_.type(), at::kBFloat16);
  at::Tensor hidden = model_->text(embeds, batch.position_ids, batch.cu_seqlens);  // [S, hidden]
  at::Tensor logits = model_->text->Logits(hidden);                                 // [S, vocab]
  return CausalLmLossSum(logits, batch.labels, batch.cu_seqlens);
}

namespace {

// The packed sequences of a step as one sequence of all their samples (tensors on the CPU).
absl::Status DumpBatches(const std::string& path, const std::vector<PackedBatch>& batches,
                         const StepStats& st) {
  std::vector<at::Tensor> ids, labels, pixels;
  std::vector<int64_t> cu = {0}, grids;
  for (const PackedBatch& b : batches) {
    const int64_t offset = cu.back();
    std::vector<int64_t> bounds = b.cu_seqlens;
    if (bounds.empty()) bounds = {0, b.input_ids.numel()};
    for (size_t k = 1; k < bounds.size(); ++k) cu.push_back(offset + bounds[k]);
    ids.push_back(b.input_ids.cpu());
    labels.push_back(b.labels.cpu());
    if (b.pixel_values.defined()) pixels.push_back(b.pixel_values.cpu().to(at::kFloat));
    for (const GridThw& g : b.image_grids) grids.insert(grids.end(), {g.t, g.h, g.w});
  }
  NamedTensors out = {
      {"input_ids", at::cat(ids)},
      {"labels", at::cat(labels)},
      {"cu_seqlens", at::tensor(cu, at::kLong)},
      {"image_grid_thw", at::tensor(grids, at::kLong).view({-1, 3})},
  };
  if (!pixels.empty()) out.emplace_back("pixel_values", at::cat(pixels));
  absl::Status s = SaveWeights(path, out,
                               {{"loss", absl::StrFormat("%.17g", st.loss)},
                                {"loss_tokens", absl::StrCat(st.loss_tokens)}});
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("dumping the batch: ", s.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepStats> SingleRankTrainer::Step() {
  if (step_ >= max_steps_) {
    return absl::OutOfRangeError(absl::StrCat("training is done: ", step_, " of ", max_steps_,
                                              " steps"));
  }
  const Clock::time_point t0 = Clock::now();
  StepStats st;
  st.step = step_ + 1;
  const std::string where = absl::StrCat("step ", st.step);

  absl::StatusOr<std::vector<data::TrainingSample>> samples =
      loader_->NextBatch(spec_.training().batch_size());
  if (!samples.ok()) {
    return absl::Status(samples.status().code(),
                        absl::StrCat(where, ": data: ", samples.status().message()));
  }
  if (samples->empty()) {
    const auto& errs = loader_->skipped_errors();
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": every sample of the batch failed to build",
                     errs.empty() ? "" : absl::StrCat(" (last: ", errs.back(), ")")));
  }
  st.samples = static_cast<int64_t>(samples->size());
  absl::StatusOr<std::vector<data::PackedSequence>> packs =
      data::PackSamples(std::move(*samples), data_->packing());
  if (!packs.ok()) {
    return absl::Status(packs.status().code(),
                        absl::StrCat(where, ": packing: ", packs.status().message()));
  }
  st.sequences = static_cast<int64_t>(packs->size());
  for (const data::PackedSequence& p : *packs) {
    st.tokens += p.num_tokens();
    st.image_tokens += CountImageTokens(p, preset_.vision.spatial_merge_size);
    st.loss_tokens += CountLossTargets(p);
    st.patches += p.num_patches;
  }
  st.data_seconds = SecondsSince(t0);

  st.lr = LearningRateAt(schedule_, step_);
  optimizer_->SetLearningRate(st.lr);
  std::vector<PackedBatch> dumped;
  NamedTensors first_grads;
  absl::Status s = CatchTorch(where, [&] {
    optimizer_->ZeroGrad();
    double loss_sum = 0;
    for (const data::PackedSequence& p : *packs) {
      PackedBatch batch = ToPackedBatch(p, device_);
      if (step_ == 0 && !dump_first_batch_.empty()) dumped.push_back(batch);
      auto [sum, count] = ForwardLossSum(batch);
      if (st.loss_tokens > 0) (sum / static_cast<double>(st.loss_tokens)).backward();
      loss_sum += sum.item<double>();
    }
    st.loss = st.loss_tokens > 0 ? loss_sum / static_cast<double>(st.loss_tokens) : 0.0;
    if (step_ == 0 && !save_first_grads_.empty()) {
      for (const auto& [name, p] : NamedParameters()) {
        first_grads.emplace_back(
            name, p.grad().defined() ? p.grad().detach().clone() : at::zeros_like(p.detach()));
      }
    }
    st.grad_norm = optimizer_->ClipGradNorm();
  });
  if (!s.ok()) return s;
  if (!dumped.empty()) {
    if (absl::Status d = DumpBatches(dump_first_batch_, dumped, st); !d.ok()) return d;
  }
  if (!first_grads.empty()) {
    absl::Status g =
        SaveWeights(save_first_grads_, first_grads,
                    {{"step", "1"}, {"grad_norm", absl::StrFormat("%.17g", st.grad_norm)}});
    if (!g.ok()) {
      return absl::Status(g.code(),
                          absl::StrCat("saving the first step's gradients: ", g.message()));
    }
  }
  if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm)) {
    std::vector<std::string> where_data;
    for (const data::PackedSequence& p : *packs) {
      for (const std::string& l : p.sample_locations) where_data.push_back(l);
    }
    return absl::InternalError(absl::StrCat(
        where, ": loss ", st.loss, ", gradient norm ", st.grad_norm,
        " is not finite; no update was applied. Lower training.learning_rate or check the "
        "samples ", absl::StrJoin(where_data, ", ")));
  }
  s = CatchTorch(where, [&] { optimizer_->Step(); });
  if (!s.ok()) return s;
  ++step_;
  st.seconds = SecondsSince(t0);
  return st;
}

}  // namespace dhp
