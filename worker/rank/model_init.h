// The model a training rank starts from, per the job spec: Hugging Face's initialisation with
// training.seed (param_init.h: layout-independent, computed per slice), or the strict load of
// model.weights_path when set.
//   CreateModelSource   for the distributed ranks (shard-first): a TensorSource from which each
//                       rank reads only its slices (DistTrainer::Create);
//   CreateModelForSpec  the single-rank model (dhp-train, parity references): the whole model
//                       from the same values, on the device, activation checkpointing per stage.
// Rank r's shard of the first equals the slice of the second, for every layout.
//
// Thread-safety: thread-safe (no shared state).
#ifndef DHP_WORKER_RANK_MODEL_INIT_H_
#define DHP_WORKER_RANK_MODEL_INIT_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "common/spec_validate.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/tensor_source.h"

namespace dhp {

// "cpu", "cuda", "cuda:1". InvalidArgument for other names, FailedPrecondition for CUDA without
// a GPU or a CUDA build.
absl::StatusOr<at::Device> ParseTrainingDevice(const std::string& name);

// Spec options of a process that reads model directories (a rank, dhp-train): model.weights_path
// relative to `data_root` (DataPipeline's rule), its config.json read by LoadHfConfig. With
// them, ResolveSpecModel gives the architecture to build and NormalizeAndValidateSpec checks the
// stage degrees against it (the controller, which cannot read the directory, could not).
SpecOptions RankSpecOptions(const std::string& data_root);

// model.weights_path is taken relative to `data_root` (DataPipeline's rule); the checkpoint must
// hold exactly the model's tensors with their shapes (checked before anything is read). Slices
// come in `options` (dtype, device). Appends what it will read to `notes`. Errors name the
// checkpoint directory and the mismatching tensors.
absl::StatusOr<std::unique_ptr<TensorSource>> CreateModelSource(const v1::JobSpec& spec,
                                                               const ModelPreset& preset,
                                                               const std::string& data_root,
                                                               at::TensorOptions options,
                                                               std::vector<std::string>* notes);

// The whole single-rank model, as above.
absl::StatusOr<Qwen2_5_VL> CreateModelForSpec(const v1::JobSpec& spec, const ModelPreset& preset,
                                              const std::string& data_root,
                                              const at::Device& device,
                                              std::vector<std::string>* notes);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_MODEL_INIT_H_
