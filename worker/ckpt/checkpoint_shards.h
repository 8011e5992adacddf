// A complete checkpoint's rank shards, opened: every shard the controller's record lists,
// verified (size and CRC-32C, ckpt::OpenShard) and memory-mapped, with its parsed metadata
// (RankStateMeta), checked to be one checkpoint (same job, step and layout; one shard per rank).
// What `dhp-ckpt export` re-assembles (worker/rank/ckpt_export.h) and what a rank resuming under
// another layout reads its slices from (worker/rank/reshard.h). Plain C++ (no LibTorch).
//
// Cost: verifying a shard reads the whole file once; the tensors are read later, by slice, from
// the mapping.
//
// Thread-safety: immutable once opened; the files stay mapped while the object lives.
#ifndef DHP_WORKER_CKPT_CHECKPOINT_SHARDS_H_
#define DHP_WORKER_CKPT_CHECKPOINT_SHARDS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dhp/v1/job.pb.h"
#include "worker/ckpt/rank_state_format.h"
#include "worker/ckpt/shard_file.h"
#include "worker/model/safetensors.h"

namespace dhp::ckpt {

// <dir>/manifest.json as the controller writes it once every rank reported its shard. NOT_FOUND
// when missing, INVALID_ARGUMENT when it is not a checkpoint record, FAILED_PRECONDITION when the
// checkpoint is not COMPLETE.
absl::StatusOr<v1::Checkpoint> ReadManifest(const std::string& dir);

// The controller's record of world rank `rank`'s shard as written (what ReportCheckpoint
// carries and a manifest lists), and back.
v1::CheckpointShard ShardRecord(int rank, const ShardInfo& info);

// One stored tensor of one shard.
struct ShardTensor {
  const SafetensorsFile* file = nullptr;
  const StTensorInfo* info = nullptr;
};

class CheckpointShards {
 public:
  // Opens the shards of `record` (in record.path()) whose world rank is in `ranks`; empty: all.
  // Errors name the file: NOT_FOUND, DATA_LOSS (size, checksum), INVALID_ARGUMENT (metadata, a
  // rank listed twice or not at all, shards of different checkpoints).
  static absl::StatusOr<std::unique_ptr<CheckpointShards>> Open(const v1::Checkpoint& record,
                                                                const std::vector<int>& ranks = {});

  const std::string& dir() const { return dir_; }
  // The opened world ranks, ascending.
  std::vector<int> ranks() const;
  bool Has(int rank) const { return files_.count(rank) > 0; }
  // The opened shard of `rank` (which must be opened) and its metadata.
  const SafetensorsFile& File(int rank) const { return *files_.at(rank); }
  const RankStateMeta& Meta(int rank) const { return metas_.at(rank); }
  // The metadata of the lowest opened rank: job, step, layout and data position are the same in
  // every shard.
  const RankStateMeta& First() const { return metas_.begin()->second; }
  const std::string& FirstPath() const { return files_.begin()->second->path(); }
  // The tensor `name` of `rank`'s shard, or INVALID_ARGUMENT "<file> has no tensor <name>".
  absl::StatusOr<ShardTensor> Find(int rank, const std::string& name) const;

 private:
  CheckpointShards() = default;

  std::string dir_;
  std::map<int, std::unique_ptr<SafetensorsFile>> files_;  // by world rank
  std::map<int, RankStateMeta> metas_;
};

}  // namespace dhp::ckpt

#endif  // DHP_WORKER_CKPT_CHECKPOINT_SHARDS_H_
