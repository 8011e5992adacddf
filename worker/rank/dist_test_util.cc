#include "worker/rank/dist_test_util.h"

#include <numeric>
#include <vector>

#include "worker/ckpt/checkpoint_shards.h"
#include "worker/ckpt/tensor_shard.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/rank_checkpoint.h"

namespace dhp {

absl::StatusOr<RankComms> MakeRankComms(comm::KvClient& kv, const comm::Layout& layout, int rank,
                                        const comm::ProcessGroupsOptions& options) {
  RankComms out;
  absl::StatusOr<std::unique_ptr<comm::ProcessGroups>> groups =
      comm::ProcessGroups::Create(kv, layout, rank, options);
  if (!groups.ok()) return groups.status();
  out.groups = std::move(*groups);
  comm::GroupSpec all{kHandoffGroup, std::vector<int>(layout.WorldSize())};
  std::iota(all.world_ranks.begin(), all.world_ranks.end(), 0);
  absl::StatusOr<std::unique_ptr<comm::Communicator>> handoff =
      comm::CreateCommunicator(kv, all, rank, options, &out.groups->stats());
  if (!handoff.ok()) return handoff.status();
  out.handoff = std::move(*handoff);
  return out;
}

comm::ProcessGroupsOptions TestGroupOptions() {
  comm::ProcessGroupsOptions po;
  po.arrival_timeout = po.store_timeout = std::chrono::seconds(60);
  po.collective_timeout = std::chrono::seconds(120);
  return po;
}

absl::StatusOr<v1::CheckpointShard> WriteRankStateShard(const std::string& dir,
                                                        const ckpt::RankStateMeta& meta,
                                                        const NamedTensors& state) {
  absl::StatusOr<ckpt::WrittenShard> written =
      ckpt::WriteTensorShard(dir, RankShardFile(meta.world_rank), state, meta.ToMetadata());
  if (!written.ok()) return written.status();
  return ckpt::ShardRecord(meta.world_rank, written->info);
}

}  // namespace dhp
