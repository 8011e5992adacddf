// The LibTorch side of a rank's checkpoint (issue 15 §4): the snapshot of its state taken at a
// step boundary, and the CheckpointWriter task (checkpoint_writer.h) that writes it as the
// rank's shard and describes it for the controller.
//
// SnapshotToHost copies DistTrainer::LiveState() (aliases of the live parameters and optimizer
// state) into host memory that nothing else references, so that the optimizer steps that follow
// cannot change what is written: CPU tensors are cloned; CUDA tensors are copied device-to-host
// into pinned memory (LibTorch's caching host allocator: the blocks are reused by the next
// snapshot), all issued asynchronously on the current stream and waited for once, before it
// returns. Cost: one copy of the state (bytes: TensorBytes), in host memory, per checkpoint in
// flight.
//
// Thread-safety: no shared state. A task may run on any thread (the writer's): it owns its
// snapshot.
#ifndef DHP_WORKER_RANK_RANK_CHECKPOINT_H_
#define DHP_WORKER_RANK_RANK_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/weights.h"
#include "worker/rank/checkpoint_writer.h"

namespace dhp {

// Host copies of `live` (same names, dtypes and shapes; contiguous) that share no storage with
// it. LibTorch errors (e.g. out of pinned memory) become Statuses.
absl::StatusOr<NamedTensors> SnapshotToHost(const NamedTensors& live);

// Bytes of the tensors' elements.
int64_t TensorBytes(const NamedTensors& tensors);

// Where one rank's shards go and what its reports say.
struct RankCheckpointTarget {
  std::string job_id;
  int attempt = 1;
  int world_size = 1;
  int world_rank = 0;
  std::string checkpoint_dir;  // the run's; checkpoints go to step-<%08d>/ below it
};

// <checkpoint_dir>/step-<%08d step>
std::string CheckpointStepDir(const std::string& checkpoint_dir, int64_t step);
// rank-<%05d rank>.safetensors
std::string RankShardFile(int world_rank);

// The task that writes `state` (which it keeps alive until it ends) and `metadata` to
// CheckpointStepDir(...)/RankShardFile(...) (ckpt::WriteTensorShard: atomic, fsynced, CRC-32C)
// and returns ReportCheckpointRequest{job, attempt, step, world size, path, shard, write
// seconds}. `state` may be live aliases when the task runs before training goes on
// (synchronous writes).
CheckpointTask MakeRankCheckpointTask(const RankCheckpointTarget& target, int64_t step,
                                      NamedTensors state,
                                      std::map<std::string, std::string> metadata);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_RANK_CHECKPOINT_H_
