#include "worker/rank/dist_test_util.h"

#include <numeric>
#include <vector>

#include "worker/rank/dist_step.h"

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

}  // namespace dhp
