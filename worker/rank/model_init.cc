#include "worker/model/param_init.h"
#include "worker/rank/model_init.h"


#include "absl/strings/str_cat.h"
#include "worker/model/checkpoint_source.h"
#include "worker/model/hf_config.h"
#include "worker/model/layers.h"
#include "worker/model/param_init.h"
#include "worker/model/param_shapes.h"
#include "worker/model/safetensors.h"
#include "worker/model/torch_status.h"
#include "worker/model/weights.h"
#include "worker/rank/data_pipeline.h"

namespace dhp {
namespace {

constexpr double kInitStd = 0.02;  // Qwen2.5-VL's initializer_range

}  // namespace

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

absl::StatusOr<std::unique_ptr<TensorSource>> CreateModelSource(const v1::JobSpec& spec,
                                                               const ModelPreset& preset,
                                                               const std::string& data_root,
                                                               at::TensorOptions options,
                                                               std::vector<std::string>* notes) {
  const std::vector<ParamShape> shapes = QwenParamShapes(preset);
  if (spec.model().weights_path().empty()) {
    return std::unique_ptr<TensorSource>(
        new InitTensorSource(shapes, spec.training().seed(), kInitStd, options));
  }
  const std::string dir = ResolveDataPath(data_root, spec.model().weights_path());
  absl::StatusOr<std::unique_ptr<CheckpointDir>> ckpt = CheckpointDir::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  if (absl::Status s = CheckCheckpointCovers(**ckpt, shapes); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("model.weights_path ", dir, ": ", s.message()));
  }
  if (notes != nullptr) {
    notes->push_back(absl::StrCat("weights: this rank's slices of ", shapes.size(),
                                  " tensors from ", dir));
  }
  return std::unique_ptr<TensorSource>(new CheckpointTensorSource(*std::move(ckpt), options));
}

absl::StatusOr<Qwen2_5_VL> CreateModelForSpec(const v1::JobSpec& spec, const ModelPreset& preset,
                                              const std::string& data_root,
                                              const at::Device& device,
                                              std::vector<std::string>* notes) {
  Qwen2_5_VL model{nullptr};
  {
    absl::Status s = CatchTorch("model", [&] {
      model = Qwen2_5_VL(preset);
      InitQwenWeights(*model, kInitStd, spec.training().seed());
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
