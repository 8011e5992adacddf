// The global batch of every distributed training step, from a job's real data (the spec's
// dataset mix, through DataPipeline): training.batch_size samples per step, split over the
// data-parallel replicas as DataLoader shards them (replica d builds draws d, d + dp, ...), each
// replica's share split in order into micro-batches of training.micro_batch_size samples
// (gradient accumulation; default: the whole share), each micro-batch packed into ONE sequence
// of at most data.max_seq_len tokens (the DistTrainer::Step input: micro-batches per replica).
//
// A rank builds only its own replica's samples (Create's `replica`): its loader walks the same
// global order as every other replica's and keeps its draws (DataLoader sharding), so no rank
// decodes or preprocesses another replica's images. The step needs nothing of other replicas
// (the hand-off and the vision split stay within a replica), so their places in
// DistBatch::batches hold empty placeholders; the counters are this replica's, and the ranks sum
// them (GlobalizeCounts in job_rank.cc). With replica -1 every replica is built (tests, the
// reference for the per-replica batches). position() is the global stream position, the same for
// every replica after a step: stored in a checkpoint and given to Seek() it reproduces the rest of
// the stream exactly.
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
  // same number of micro-batches. Replicas this DistData does not build hold default-constructed
  // PackedBatch placeholders (undefined input_ids).
  std::vector<std::vector<PackedBatch>> batches;
  // Over the replicas built and all their micro-batches:
  int64_t samples = 0;
  int64_t tokens = 0;        // image tokens included
  int64_t image_tokens = 0;
  int64_t loss_tokens = 0;   // positions whose next-token loss is taken
  int64_t patches = 0;
  double seconds = 0;        // loading, preprocessing, packing and the copy to the device
};

class DistData {
 public:
  // `spec` must be normalised; data_parallel_size gives the number of replicas. `replica`: the
  // one replica whose samples are built, or -1 for all of them.
  static absl::StatusOr<std::unique_ptr<DistData>> Create(const v1::JobSpec& spec,
                                                          const ModelPreset& preset,
                                                          const DataPipelineOptions& options,
                                                          const at::Device& device,
                                                          int replica = -1);

  // The next global batch; `step` (1-based) only names the step in errors.
  absl::StatusOr<DistBatch> Next(int64_t step);

  data::DataPosition position() const;
  void Seek(const data::DataPosition& position);

  int replicas() const { return replicas_; }
  // The replica built, or -1 for all.
  int replica() const { return replica_; }
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
  int replicas_ = 1;
  int replica_ = -1;
  // One per replica built (all, or replica_ alone), in lockstep.
  std::vector<std::unique_ptr<data::DataLoader>> loaders_;
  std::vector<int> loader_replica_;  // the replica of each loader
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_DIST_DATA_H_
