// Deterministic, resumable stream of training samples from a DatasetMix: walks the epochs'
// orders (DatasetMix::EpochOrder(seed, epoch)) one global batch at a time, builds the samples of
// this data-parallel shard, and skips (or reports) records that fail to build.
//
// Sharding: of each global batch's draws, shard k builds draws k, k + num_shards, ... so shards
// stay in lockstep and never overlap. A skipped sample is not replaced (the shard's batch is one
// smaller) for the same reason.
//
// Resuming: position() after a step, stored in a checkpoint, given to Seek() reproduces the rest
// of the stream exactly.
//
// Thread-safety: not thread-safe (one consumer). Borrows the mix and the builder.
#ifndef DHP_WORKER_DATA_DATA_LOADER_H_
#define DHP_WORKER_DATA_DATA_LOADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset_mix.h"
#include "worker/data/sample_builder.h"

namespace dhp {
namespace data {

struct DataLoaderOptions {
  uint64_t seed = 0;
  bool skip_invalid = true;        // false: a sample that fails to build is an error
  int max_reported_errors = 20;    // skipped samples' messages kept for logs
  int shard_index = 0;
  int num_shards = 1;
};

struct DataPosition {
  int64_t epoch = 0;
  int64_t offset = 0;  // draws of this epoch already consumed
};

class DataLoader {
 public:
  DataLoader(const DatasetMix& mix, const SampleBuilder& builder, DataLoaderOptions options);

  // The next `global_batch` draws (crossing into the next epoch when needed); returns this
  // shard's built samples, in order.
  absl::StatusOr<std::vector<TrainingSample>> NextBatch(int64_t global_batch);

  DataPosition position() const { return position_; }
  void Seek(DataPosition position);

  int64_t skipped() const { return skipped_; }
  const std::vector<std::string>& skipped_errors() const { return errors_; }

 private:
  SampleRef NextRef();

  const DatasetMix* mix_;
  const SampleBuilder* builder_;
  DataLoaderOptions options_;
  DataPosition position_;
  std::vector<SampleRef> order_;  // of order_epoch_
  int64_t order_epoch_ = -1;
  int64_t skipped_ = 0;
  std::vector<std::string> errors_;
};

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_DATA_LOADER_H_
