// Test helper for DistTrainer tests that run ranks as threads: one rank's process groups and its
// "handoff" communicator over the whole world, made the way dhp-rank makes them (job_rank.cc).
// Thread-safety: call once per rank thread; `kv` is shared by the ranks.
#ifndef DHP_WORKER_RANK_DIST_TEST_UTIL_H_
#define DHP_WORKER_RANK_DIST_TEST_UTIL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/layout.h"
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

}  // namespace dhp

#endif  // DHP_WORKER_RANK_DIST_TEST_UTIL_H_
