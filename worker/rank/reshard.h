// Resuming a checkpoint under another layout (issue 15 §2): the state a rank of the new layout
// loads (DistTrainer::LoadState), computed from the shards the old layout's ranks wrote, reading
// only the slices it needs from the memory-mapped shard files.
//
// What can change: the vision degree under Ulysses SP (or degree 1), the text TP degree, the
// number of data-parallel replicas and the placement. What cannot: the vision TP baseline's
// degree, or switching between vision TP and Ulysses SP (its ZeRO-1 partitions hold TP shards,
// flattened; comm::CheckReshardable in common/layout.h, which the controller checks at resume
// too). The model must be the same.
//
// How each tensor of the new rank's state is made (replica 0's copies; replicas are equal):
//   visual.*                   Ulysses / degree 1: the whole tower of old vision rank (0, 0);
//                              vision TP: old vision rank (0, i) for new inner rank i;
//   optim.vision.{master,exp_avg,exp_avg_sq}
//                              the ZeRO-1 partition [P'] of the new group rank over the flat
//                              buffer of F elements: the old partitions [P] (P = ceil(F / N)) are
//                              the same buffer cut at other points, so the new partition is read
//                              from the one or two old ranks whose partitions overlap it, padding
//                              stays zero (zero1.h);
//   model.*, lm_head.*         this rank's text TP range (tp::TextTpShardLayout of the new
//   optim.text.<p>.{exp_avg,exp_avg_sq,master}  degree) of the full tensor, read from the old
//                              text ranks whose ranges overlap it (their first holders: a
//                              replicated KV head counts once);
//   trainer.step, optim.vision.step, optim.text.<p>.step  as stored (the same on every rank).
// The data position is the global stream position (DistData), the same under any layout.
//
// Cost per rank: the old shards it reads are verified whole (CRC-32C) once: under a TP 8 -> 4
// change that is the two old shards overlapping its range, about twice its own shard's bytes;
// then one copy of its new state in host memory, as a same-layout resume (which reads its own
// shard) needs.
//
// Thread-safety: immutable once opened.
#ifndef DHP_WORKER_RANK_RESHARD_H_
#define DHP_WORKER_RANK_RESHARD_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/layout.h"
#include "common/model_presets.h"
#include "dhp/v1/job.pb.h"
#include "worker/ckpt/checkpoint_shards.h"
#include "worker/ckpt/rank_state_format.h"
#include "worker/model/weights.h"

namespace dhp {

// The layout that wrote `record`: from the dhp.spec metadata of its rank-0 shard (read without
// verifying the file; Open verifies what it reads). FAILED_PRECONDITION for a shard without it
// (an older dhp-rank: such a checkpoint resumes only under its own layout).
absl::StatusOr<comm::Layout> CheckpointLayout(const v1::Checkpoint& record);

class ReshardedState {
 public:
  // Opens the old shards that world rank `world_rank` of `to` reads. `vision_flat_numel`: the
  // element count F of the rank's ZeRO-1 buffer (Zero1AdamW::full_numel; 0 on a rank without a
  // vision role). Errors: CheckpointLayout's and CheckReshardable's, and the shards' (NOT_FOUND,
  // DATA_LOSS, INVALID_ARGUMENT naming the file).
  static absl::StatusOr<std::unique_ptr<ReshardedState>> Open(const v1::Checkpoint& record,
                                                              const ModelPreset& preset,
                                                              const comm::Layout& to,
                                                              int world_rank,
                                                              int64_t vision_flat_numel);
  ~ReshardedState();

  const comm::Layout& from() const;
  // The checkpoint's job, step and data position (its rank-0 shard's metadata when opened).
  const ckpt::RankStateMeta& meta() const;

  // The new rank's state: a tensor for every name of `live` (DistTrainer::LiveState() of the
  // rank's freshly built trainer: its names and shapes) and the text optimizer state the old
  // text ranks hold, made as the file comment says. INVALID_ARGUMENT naming the tensor when the
  // old shards lack it or hold another shape.
  absl::StatusOr<NamedTensors> State(const NamedTensors& live) const;

 private:
  class Impl;
  explicit ReshardedState(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_RESHARD_H_
