#include "worker/rank/model_init.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "worker/model/hf_config.h"
#include "worker/model/layers.h"
#include "worker/model/safetensors.h"
#include "worker/model/torch_status.h"
#include "worker/model/weights.h"
#include "worker/rank/data_pipeline.h"

namespace dhp {

absl::StatusOr<at::Device> ParseTrainingDevice(const std::string& name) {
  absl::StatusOr<at::Device> device = CatchTorch("device", [&] { return at::Device(name); });
  if (!device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device \"", name, "\": ", device.status().message(), " (use cpu or cuda:N)"));
  }
  if (device->is_cuda() && !at::hasCUDA()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", name, ": this LibTorch has no CUDA or no GPU is visible"));
  }
  if (!device->is_cpu() && !device->is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", name, ": only cpu and cuda are supported"));
  }
  return *device;
}

SpecOptions RankSpecOptions(const std::string& data_root) {
  SpecOptions options;
  options.read_model_config = [data_root](const std::string& weights_path) {
    return LoadHfConfig(ResolveDataPath(data_root, weights_path));
  };
  return options;
}

absl::StatusOr<Qwen2_5_VL> CreateModelForSpec(const v1::JobSpec& spec, const ModelPreset& preset,
                                              const std::string& data_root,
                                              const at::Device& device,
                                              std::vector<std::string>* notes) {
  Qwen2_5_VL model{nullptr};
  {
    static std::mutex* seed_mu = new std::mutex;  // guards LibTorch's default generator
    std::lock_guard<std::mutex> lock(*seed_mu);
    absl::Status s = CatchTorch("model", [&] {
      at::manual_seed(spec.training().seed());
      model = Qwen2_5_VL(preset);
      InitQwenWeights(*model);
    });
    if (!s.ok()) return s;
  }
  if (!spec.model().weights_path().empty()) {
    const std::string dir = ResolveDataPath(data_root, spec.model().weights_path());
    absl::StatusOr<std::unique_ptr<CheckpointDir>> ckpt = CheckpointDir::Open(dir);
    if (!ckpt.ok()) return ckpt.status();
    NamedTensors params;
    for (const auto& item : model->named_parameters(/*recurse=*/true)) {
      params.emplace_back(item.key(), item.value());
    }
    absl::StatusOr<LoadReport> report = LoadWeights(**ckpt, params, /*strict=*/true);
    if (!report.ok()) {
      return absl::Status(report.status().code(),
                          absl::StrCat("model.weights_path ", dir, ": ", report.status().message()));
    }
    if (notes != nullptr) {
      notes->push_back(absl::StrCat("weights: ", report->loaded, " tensors from ", dir));
    }
  }
  absl::Status s = CatchTorch("model", [&] {
    model->to(device);
    model->visual->set_gradient_checkpointing(spec.vision().activation_checkpointing());
    model->text->set_gradient_checkpointing(spec.text().activation_checkpointing());
    model->train();
  });
  if (!s.ok()) return s;
  return model;
}

}  // namespace dhp
