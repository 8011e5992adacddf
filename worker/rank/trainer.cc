#include "worker/rank/trainer.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/data/packing.h"
#include "worker/model/layers.h"
#include "worker/model/safetensors.h"
#include "worker/model/torch_compat.h"
#include "worker/model/torch_status.h"
#include "worker/rank/batch.h"

namespace dhp {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string Resolve(const std::string& root, const std::string& path) {
  if (path.empty() || path[0] == '/' || root.empty() || root == ".") return path;
  return root + "/" + path;
}

LrScheduleKind ScheduleKind(v1::LrSchedule s) {
  switch (s) {
    case v1::LR_SCHEDULE_CONSTANT:
      return LrScheduleKind::kConstant;
    case v1::LR_SCHEDULE_LINEAR:
      return LrScheduleKind::kLinear;
    default:
      return LrScheduleKind::kCosine;
  }
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
  const ModelPreset* preset = FindModelPreset(spec.model().preset());
  if (preset == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.preset: unknown preset \"", spec.model().preset(), "\"; known: ",
                     absl::StrJoin(ModelPresetNames(), ", ")));
  }
  if (spec.training().batch_size() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.batch_size: ", spec.training().batch_size(), " (is the spec normalised?)"));
  }
  absl::StatusOr<at::Device> device =
      CatchTorch("device", [&] { return at::Device(options.device); });
  if (!device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device \"", options.device, "\": ", device.status().message(), " (use cpu or cuda:N)"));
  }
  if (device->is_cuda() && !at::hasCUDA()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", options.device, ": this LibTorch has no CUDA or no GPU is visible"));
  }
  if (!device->is_cpu() && !device->is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", options.device, ": only cpu and cuda are supported"));
  }
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
    if (device_.is_cpu()) {
      notes_.push_back(absl::StrCat(stage, ".dtype ", v1::DType_Name(dtype),
                                    ": mixed precision is GPU-only; fp32 on the CPU"));
      return absl::OkStatus();
    }
    if (dtype == v1::DTYPE_FP16) {
      return absl::UnimplementedError(absl::StrCat(
          stage, ".dtype: fp16 needs loss scaling, which dhp does not implement; use bf16"));
    }
    *bf16 = true;
    notes_.push_back(absl::StrCat(stage, ": bf16 autocast, fp32 master weights"));
    return absl::OkStatus();
  };
  absl::Status s = stage_precision("vision", spec_.vision().dtype(), &vision_bf16_);
  if (s.ok()) s = stage_precision("text", spec_.text().dtype(), &text_bf16_);
  if (s.ok()) s = InitData(options);
  if (s.ok()) s = InitModel(options);
  if (!s.ok()) return s;

  const v1::TrainingSpec& tr = spec_.training();
  max_steps_ = tr.max_steps();
  if (max_steps_ <= 0) {  // epochs
    const int64_t draws = int64_t{tr.epochs()} * mix_->epoch_size();
    max_steps_ = (draws + tr.batch_size() - 1) / tr.batch_size();
    notes_.push_back(absl::StrCat("training.epochs ", tr.epochs(), " of ", mix_->epoch_size(),
                                  " samples at batch ", tr.batch_size(), ": ", max_steps_,
                                  " steps"));
  }
  schedule_.kind = ScheduleKind(tr.schedule());
  schedule_.peak = tr.learning_rate();
  schedule_.floor = tr.min_learning_rate();
  schedule_.warmup_steps = tr.warmup_steps();
  schedule_.max_steps = std::max<int64_t>(max_steps_, 1);
  return ValidateLrSchedule(schedule_);
}

absl::Status SingleRankTrainer::InitData(const TrainerOptions& options) {
  std::string tokenizer_path = options.tokenizer_path;
  if (tokenizer_path.empty()) {
    if (!spec_.model().weights_path().empty()) {
      tokenizer_path = Resolve(options.data_root, spec_.model().weights_path()) + "/tokenizer.json";
    } else if (preset_.name == "tiny") {
      tokenizer_path = "configs/tiny-tokenizer.json";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.preset ", preset_.name, " has no built-in tokenizer: set model.weights_path to a "
          "Hugging Face checkpoint directory (its tokenizer.json is used) or pass a tokenizer"));
    }
  }
  absl::StatusOr<std::unique_ptr<data::BpeTokenizer>> tok =
      data::BpeTokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) return tok.status();
  tokenizer_ = std::move(*tok);
  if (tokenizer_->vocab_size() > preset_.text.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        tokenizer_path, ": ", tokenizer_->vocab_size(), " token ids do not fit the ",
        preset_.text.vocab_size, "-entry embedding of preset ", preset_.name));
  }
  absl::StatusOr<data::ChatTemplate> chat = data::ChatTemplate::Create(*tokenizer_);
  if (!chat.ok()) return chat.status();
  chat_template_ = std::make_unique<data::ChatTemplate>(std::move(*chat));
  const data::ChatSpecialIds& ids = chat_template_->special_ids();
  const SpecialTokens& want = preset_.tokens;
  if (ids.image_pad != want.image_pad || ids.vision_start != want.vision_start ||
      ids.vision_end != want.vision_end || ids.im_start != want.im_start ||
      ids.im_end != want.im_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        tokenizer_path, ": special token ids (<|image_pad|> ", ids.image_pad, ", <|im_start|> ",
        ids.im_start, ") differ from preset ", preset_.name, "'s (", want.image_pad, ", ",
        want.im_start, "): the tokenizer does not belong to this model"));
  }

  const v1::DataSpec& d = spec_.data();
  data::DatasetRegistry registry;
  for (const auto& [name, src] : d.registry()) {
    absl::Status s = registry.Register(
        name, {Resolve(options.data_root, src.annotation_path()),
               Resolve(options.data_root, src.image_root()), src.has_weight() ? src.weight() : 1.0});
    if (!s.ok()) return s;
  }
  std::vector<std::string> names(d.datasets().begin(), d.datasets().end());
  std::vector<absl::Status> bad_records;
  absl::StatusOr<data::DatasetMix> mix = data::DatasetMix::Load(
      registry, names, options.skip_invalid_samples ? &bad_records : nullptr);
  if (!mix.ok()) return mix.status();
  mix_ = std::make_unique<data::DatasetMix>(std::move(*mix));
  std::string data_note = absl::StrCat("data: ", absl::StrJoin(names, ", "), ": ",
                                       mix_->epoch_size(), " samples per epoch");
  if (!bad_records.empty()) {
    absl::StrAppend(&data_note, "; ", bad_records.size(), " invalid records skipped (first: ",
                    bad_records[0].message(), ")");
  }
  notes_.push_back(std::move(data_note));

  data::SampleBuilderOptions b;
  b.preprocess.patch_size = preset_.vision.patch_size;
  b.preprocess.merge_size = preset_.vision.spatial_merge_size;
  b.preprocess.temporal_patch_size = preset_.vision.temporal_patch_size;
  b.preprocess.min_pixels = d.min_pixels();
  b.preprocess.max_pixels = d.max_pixels();
  b.max_seq_len = d.max_seq_len();
  builder_ = std::make_unique<data::SampleBuilder>(*chat_template_, b);
  data::DataLoaderOptions lo;
  lo.seed = spec_.training().seed();
  lo.skip_invalid = options.skip_invalid_samples;
  loader_ = std::make_unique<data::DataLoader>(*mix_, *builder_, lo);
  return absl::OkStatus();
}

absl::Status SingleRankTrainer::InitModel(const TrainerOptions& options) {
  absl::Status s = CatchTorch("model", [&] {
    at::manual_seed(spec_.training().seed());
    model_ = Qwen2_5_VL(preset_);
    InitQwenWeights(*model_);
  });
  if (!s.ok()) return s;
  if (!spec_.model().weights_path().empty()) {
    const std::string dir = Resolve(options.data_root, spec_.model().weights_path());
    absl::StatusOr<std::unique_ptr<CheckpointDir>> ckpt = CheckpointDir::Open(dir);
    if (!ckpt.ok()) return ckpt.status();
    absl::StatusOr<LoadReport> report = LoadWeights(**ckpt, NamedParameters(), /*strict=*/true);
    if (!report.ok()) {
      return absl::Status(report.status().code(),
                          absl::StrCat("model.weights_path ", dir, ": ", report.status().message()));
    }
    notes_.push_back(absl::StrCat("weights: ", report->loaded, " tensors from ", dir));
  }
  s = CatchTorch("model", [&] {
    model_->to(device_);
    model_->visual->set_gradient_checkpointing(spec_.vision().activation_checkpointing());
    model_->text->set_gradient_checkpointing(spec_.text().activation_checkpointing());
    model_->train();
  });
  if (!s.ok()) return s;
  OptimizerConfig oc;
  oc.learning_rate = spec_.training().learning_rate();
  oc.weight_decay = spec_.training().weight_decay();
  oc.grad_clip_norm = spec_.training().grad_clip_norm();
  optimizer_ = std::make_unique<TrainingOptimizer>(NamedParameters(), oc);
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
      std::optional<compat::CudaAutocastGuard> autocast;
      if (vision_bf16_) autocast.emplace(at::kBFloat16);
      image_embeds = model_->visual(batch.pixel_values, batch.image_grids);
    }
    embeds = ScatterImageEmbeddings(embeds, batch.input_ids, preset_.tokens.image_pad,
                                    image_embeds);
  }
  std::optional<compat::CudaAutocastGuard> autocast;
  if (text_bf16_) autocast.emplace(at::kBFloat16);
  at::Tensor hidden = model_->text(embeds, batch.position_ids, batch.cu_seqlens);  // [S, hidden]
  at::Tensor logits = model_->text->Logits(hidden);                                 // [S, vocab]
  return CausalLmLossSum(logits, batch.labels, batch.cu_seqlens);
}

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
  data::PackingOptions po;
  po.max_tokens = spec_.data().max_seq_len();
  po.image_pad_id = preset_.tokens.image_pad;
  po.spatial_merge_size = preset_.vision.spatial_merge_size;
  absl::StatusOr<std::vector<data::PackedSequence>> packs =
      data::PackSamples(std::move(*samples), po);
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
  absl::Status s = CatchTorch(where, [&] {
    optimizer_->ZeroGrad();
    double loss_sum = 0;
    for (const data::PackedSequence& p : *packs) {
      PackedBatch batch = ToPackedBatch(p, device_);
      auto [sum, count] = ForwardLossSum(batch);
      if (st.loss_tokens > 0) (sum / static_cast<double>(st.loss_tokens)).backward();
      loss_sum += sum.item<double>();
    }
    st.loss = st.loss_tokens > 0 ? loss_sum / static_cast<double>(st.loss_tokens) : 0.0;
    st.grad_norm = optimizer_->ClipGradNorm();
  });
  if (!s.ok()) return s;
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
