// Test helpers for DistTrainer tests that run ranks as threads: one rank's process groups and its
// "handoff" communicator over the whole world, made the way dhp-rank makes them (job_rank.cc);
// the timeouts they use; and a rank's state written as a checkpoint shard, as dhp-rank writes it.
// Thread-safety: call once per rank thread; `kv` is shared by the ranks.
#ifndef DHP_WORKER_RANK_DIST_TEST_UTIL_H_
#define DHP_WORKER_RANK_DIST_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "dhp/v1/job.pb.h"
#include "worker/ckpt/rank_state_format.h"
#include "worker/model/weights.h"
#include "worker/comm/communicator.h"
#include "worker/comm/kv_client.h"
#include "worker/comm/process_groups.h"

namespace dhp {

struct RankComms {
  std::unique_ptr<comm::ProcessGroups> groups;
  std::unique_ptr<comm::Communicator> handoff;  // kHandoffGroup, every world rank in order
};

absl::StatusOr<RankComms> MakeRankComms(comm::KvClient& kv, const comm::Layout& layout, int rank,
                                        const comm::ProcessGroupsOptions& options);

// Rendezvous and store waits of 60 s, collectives of 120 s: generous for a loaded 2-core box.
comm::ProcessGroupsOptions TestGroupOptions();

// Writes `state` with `meta`'s metadata as <dir>/rank-<%05d meta.world_rank>.safetensors
// (ckpt::WriteTensorShard) and returns the shard's record for the checkpoint's v1::Checkpoint.
absl::StatusOr<v1::CheckpointShard> WriteRankStateShard(const std::string& dir,
                                                        const ckpt::RankStateMeta& meta,
                                                        const NamedTensors& state);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_DIST_TEST_UTIL_H_
