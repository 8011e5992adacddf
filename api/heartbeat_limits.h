// What a heartbeat may carry, checked where it arrives: by the controller (Heartbeat, and each
// entry of a HeartbeatBatch) and by dhp-relay before a heartbeat joins a batch, so that an agent
// reads the same answer through a relay as directly. Thread-safe (no state).
#ifndef DHP_API_HEARTBEAT_LIMITS_H_
#define DHP_API_HEARTBEAT_LIMITS_H_

#include "absl/status/status.h"
#include "dhp/v1/service.pb.h"

namespace dhp::api {

// OK, or INVALID_ARGUMENT naming the field: more than kMaxRelayedProgress progress reports,
// more than kMaxHeartbeatRanks ranks (api/service.h), or a rank state that is not a
// RankProcessState.
absl::Status CheckHeartbeatLimits(const v1::HeartbeatRequest& req);

// OK, or INVALID_ARGUMENT naming the field: more than kMaxHeartbeatBatch heartbeats, or more
// than kMaxBatchProgress progress reports in them all. Each heartbeat's own limits are checked
// by CheckHeartbeatLimits, one by one, as each is answered on its own.
absl::Status CheckBatchLimits(const v1::HeartbeatBatchRequest& req);

}  // namespace dhp::api

#endif  // DHP_API_HEARTBEAT_LIMITS_H_
