// The global batch of every distributed training step, from a job's real data (the spec's
// dataset mix, through DataPipeline): training.batch_size samples per step, split over the
// data-parallel replicas as DataLoader shards them (replica d builds draws d, d + dp, ...), each
// replica's share split in order into micro-batches of training.micro_batch_size samples
// (gradient accumulation; default: the whole share), each micro-batch packed into ONE sequence
// of at most data.max_seq_len tokens (the DistTrainer::Step input: micro-batches per replica).
//
// Every rank of a job builds the same batches for every replica (deterministic: same spec, same
// seed, same data), because the hand-off needs every replica's image sizes; position() after a
// step, stored in a checkpoint, given to Seek() reproduces the rest of the stream exactly.
//
// A micro-batch that does not fit one packed sequence is an error that says what to change.
// Samples that fail to build are skipped (as in SingleRankTrainer): a replica's remaining samples
// are then spread over its micro-batches as evenly as possible (every replica keeps the same
// number of micro-batches); a replica left with fewer samples than micro-batches is an error.
//
// Thread-safety: not thread-safe (the rank's training thread).
#ifndef DHP_WORKER_RANK_DIST_DATA_H_
#define DHP_WORKER_RANK_DIST_DATA_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/data/data_loader.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/rank/data_pipeline.h"

namespace dhp {

struct DistBatch {
  // [replica][micro-batch], one packed sequence each, on the device; every replica has the
  // same number of micro-batches.
  std::vector<std::vector<PackedBatch>> batches;
  // Over all replicas and micro-batches (the global batch):
  int64_t samples = 0;
  int64_t tokens = 0;        // image tokens included
  int64_t image_tokens = 0;
  int64_t loss_tokens = 0;   // positions whose next-token loss is taken
  int64_t patches = 0;
  double seconds = 0;        // loading, preprocessing, packing and the copy to the device
};

class DistData {
 public:
  // `spec` must be normalised; data_parallel_size gives the number of replicas.
  static absl::StatusOr<std::unique_ptr<DistData>> Create(const v1::JobSpec& spec,
                                                          const ModelPreset& preset,
                                                          const DataPipelineOptions& options,
                                                          const at::Device& device);

  // The next global batch; `step` (1-based) only names the step in errors.
  absl::StatusOr<DistBatch> Next(int64_t step);

  data::DataPosition position() const;
  void Seek(const data::DataPosition& position);

  int replicas() const { return static_cast<int>(loaders_.size()); }
  // Samples per micro-batch per replica (training.micro_batch_size; unset: the whole share).
  int64_t micro_batch_size() const;
  const DataPipeline& pipeline() const { return *pipeline_; }

 private:
  DistData() = default;

  // `samples` as one packed sequence on the device, counted into `out`; `what` names the
  // micro-batch in errors.
  absl::StatusOr<PackedBatch> PackMicroBatch(std::vector<data::TrainingSample> samples,
                                             const std::string& where, const std::string& what,
                                             DistBatch* out);

  v1::JobSpec spec_;
  at::Device device_ = at::kCPU;
  std::unique_ptr<DataPipeline> pipeline_;
  std::vector<std::unique_ptr<data::DataLoader>> loaders_;  // one per replica, in lockstep
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_DIST_DATA_H_
