// The model a training rank starts from, per the job spec: seeded with at::manual_seed(
// training.seed), Hugging Face's initialisation (InitQwenWeights), then the strict load of
// model.weights_path when set; moved to the device, activation checkpointing per stage, train
// mode. Every rank of a job (and the single-rank trainer) builds identical weights this way.
//
// Thread-safety: thread-safe. LibTorch's default generator is process-wide, so creation holds a
// process-wide lock while it seeds and initialises (ranks run as threads in tests).
#ifndef DHP_WORKER_RANK_MODEL_INIT_H_
#define DHP_WORKER_RANK_MODEL_INIT_H_

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "common/spec_validate.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/model/qwen2_5_vl.h"

namespace dhp {

// "cpu", "cuda", "cuda:1". InvalidArgument for other names, FailedPrecondition for CUDA without
// a GPU or a CUDA build.
absl::StatusOr<at::Device> ParseTrainingDevice(const std::string& name);

// Spec options of a process that reads model directories (a rank, dhp-train): model.weights_path
// relative to `data_root` (DataPipeline's rule), its config.json read by LoadHfConfig. With
// them, ResolveSpecModel gives the architecture to build and NormalizeAndValidateSpec checks the
// stage degrees against it (the controller, which cannot read the directory, could not).
SpecOptions RankSpecOptions(const std::string& data_root);

// model.weights_path is taken relative to `data_root` (DataPipeline's rule). Appends what it
// loaded to `notes`. Errors name the checkpoint directory and the mismatching tensors.
absl::StatusOr<Qwen2_5_VL> CreateModelForSpec(const v1::JobSpec& spec, const ModelPreset& preset,
                                              const std::string& data_root,
                                              const at::Device& device,
                                              std::vector<std::string>* notes);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_MODEL_INIT_H_
