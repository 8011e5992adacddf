// Export of a dhp training checkpoint to one safetensors file of full parameters, named as the
// Hugging Face checkpoint names them (visual.*, model.*, lm_head.*): what `dhp-ckpt export`
// runs, and what a single-rank model (LoadWeights), dhp-train's model.weights_path or
// transformers loads by name.
//
// Input: a checkpoint directory as dhp-rank writes it (job_rank.h: one rank-<r>.safetensors per
// world rank, holding that rank's DistTrainer::State()) and the controller completes it
// (manifest.json: the v1::Checkpoint record with every shard's size and CRC-32C). The manifest
// is required (a directory without one is not a complete checkpoint), and every shard is
// verified against it before it is read (ckpt::OpenShard).
//
// The layout and the model come from the job spec: the shards' "dhp.spec" metadata (dhp-rank
// writes the normalised spec there), or CheckpointExportOptions::spec for checkpoints written
// before it did. The shards' "dhp.layout" must be the spec's layout.
//
// Re-assembly, from replica 0 (data-parallel replicas hold equal copies):
//   vision, Ulysses SP (or degree 1): the tensors of vision rank 0, which holds the whole tower;
//   vision TP: the shards of vision ranks 0..Sv-1 joined as VisionTpShardOf says (rows, each
//     third of qkv's rows, columns; replicated ones from rank 0);
//   text TP: the shards of text ranks 0..Tt-1 joined along tp::TextTpShardLayout's dim in rank
//     order, keeping one copy of ranges several ranks hold (replicated KV heads); replicated
//     tensors (norms) from rank 0.
// Optimizer state (optim.*) and the step counter are not exported. The number of exported
// elements must equal CountParams of the model (param_count.h).
//
// Memory: tensors are assembled and written one at a time (WriteSafetensorsStreamed): the peak
// is about twice the largest full tensor (its shards' copies and the joined tensor), e.g. 6.2 GB
// for the fp32 embedding of a 32B model (152064 x 5120); shard files are memory-mapped.
//
// AssembledCheckpoint is that re-assembly before anything is written: the tensors as
// StTensorSources that read and join their shards when a writer asks for their bytes. It is what
// ExportCheckpoint writes into one file and ExportHfDirectory (hf_export.h) into a model
// directory's shards.
//
// Thread-safety: no shared state; an AssembledCheckpoint is used by one thread.
#ifndef DHP_WORKER_RANK_CKPT_EXPORT_H_
#define DHP_WORKER_RANK_CKPT_EXPORT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/model/safetensors.h"

namespace dhp {

struct CheckpointExportOptions {
  std::string checkpoint_dir;  // e.g. <root>/tiny-cpu/j-.../attempt-1/step-00000050
  std::string out_path;        // the .safetensors file to write (atomically)
  // The job's spec (normalised or not); unset: the shards' "dhp.spec" metadata.
  std::optional<v1::JobSpec> spec;
  // Relative model.weights_path (whose config.json names the architecture) starts here, as for
  // the ranks' --data-root.
  std::string data_root = ".";
  // Convert floating-point tensors to this dtype (kFloat, kBFloat16, kHalf); unset: as stored.
  std::optional<at::ScalarType> dtype;
};

struct CheckpointExportResult {
  int64_t step = 0;  // the checkpoint's step
  std::string job_id;
  std::string model;   // the preset's name (or the model directory's)
  std::string layout;  // comm::Layout::DebugString()
  int64_t tensors = 0;
  int64_t elements = 0;  // parameters exported
  int64_t bytes = 0;     // size of the written file
};

// A checkpoint opened, verified against its manifest and planned for export. Nothing of the
// tensors is read until a writer calls their produce(); the shards stay memory-mapped while this
// object lives.
class AssembledCheckpoint {
 public:
  // Errors as ExportCheckpoint's, before anything is written. options.out_path is not used.
  static absl::StatusOr<std::unique_ptr<AssembledCheckpoint>> Open(
      const CheckpointExportOptions& options);
  virtual ~AssembledCheckpoint() = default;

  // step, job_id, model, layout, tensors and elements; bytes is 0 (nothing is written yet).
  const CheckpointExportResult& result() const { return result_; }
  // The architecture: the spec's preset, or model.weights_path's config.json.
  const ModelPreset& model() const { return model_; }
  // The job's spec, normalised (from the shards' dhp.spec or CheckpointExportOptions::spec).
  const v1::JobSpec& spec() const { return spec_; }
  // Every parameter with its output dtype and full shape, sorted by name. Each produce() reads
  // and joins that tensor's pieces (about twice its size in memory) and may be called again.
  const std::vector<StTensorSource>& tensors() const { return tensors_; }
  // What every written file carries: "format": "pt" and the shards' job, step, layout, model.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 protected:
  AssembledCheckpoint() = default;

  CheckpointExportResult result_;
  ModelPreset model_;
  v1::JobSpec spec_;
  std::vector<StTensorSource> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Errors name the file and what is wrong: NOT_FOUND (manifest or shard missing), DATA_LOSS
// (size or checksum), INVALID_ARGUMENT / FAILED_PRECONDITION (metadata, layout, shapes, element
// count), and the writer's errors; nothing is left at out_path on error.
absl::StatusOr<CheckpointExportResult> ExportCheckpoint(const CheckpointExportOptions& options);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_CKPT_EXPORT_H_
