#include "api/heartbeat_limits.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "api/service.h"

namespace dhp::api {

absl::Status CheckHeartbeatLimits(const v1::HeartbeatRequest& req) {
  if (req.progress_size() > kMaxRelayedProgress) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress: ", req.progress_size(), " reports; a heartbeat relays at most ",
        kMaxRelayedProgress));
  }
  if (req.ranks_size() > kMaxHeartbeatRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ranks: ", req.ranks_size(), "; a heartbeat reports at most ", kMaxHeartbeatRanks));
  }
  for (int i = 0; i < req.ranks_size(); ++i) {
    if (!v1::RankProcessState_IsValid(req.ranks(i).state())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks[", i, "].state: ", req.ranks(i).state(), " is not a RankProcessState"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBatchLimits(const v1::HeartbeatBatchRequest& req) {
  if (req.heartbeats_size() > kMaxHeartbeatBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeats: ", req.heartbeats_size(), "; a batch holds at most ", kMaxHeartbeatBatch));
  }
  int64_t progress = 0;
  for (const v1::RelayedHeartbeat& entry : req.heartbeats()) {
    progress += entry.heartbeat().progress_size();
  }
  if (progress > kMaxBatchProgress) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeats: ", progress, " progress reports in all; a batch relays at most ",
        kMaxBatchProgress));
  }
  return absl::OkStatus();
}

}  // namespace dhp::api
