// The job lifecycle as an explicit transition table.
//
//   QUEUED ─► SCHEDULED ─► STARTING ─► RUNNING ─► SUCCEEDED
//     │           │            │          │
//     │           └──────┬─────┴──────────┴─► FAILED ─► (resume) QUEUED
//     │                  ├─► RESTARTING ─► QUEUED          (automatic restart)
//     │                  └─► CANCELLING ─► CANCELLED ─► (resume) QUEUED
//     └─► CANCELLED (nothing is running yet, so cancel completes at once)
//
// Pure functions, thread-safe.
#ifndef DHP_CONTROLLER_JOB_STATE_MACHINE_H_
#define DHP_CONTROLLER_JOB_STATE_MACHINE_H_

#include "absl/status/status.h"
#include "dhp/v1/job.pb.h"

namespace dhp::controller {

// OK when a job may move from `from` to `to`; otherwise FAILED_PRECONDITION with a message
// naming both states, e.g. "job cannot go from SUCCEEDED to QUEUED: ...".
absl::Status CheckJobTransition(v1::JobState from, v1::JobState to);

// CANCELLED, SUCCEEDED and FAILED: nothing runs and nothing will without a user's Resume.
bool IsTerminal(v1::JobState state);

// The state Cancel moves a job to: CANCELLED from QUEUED, CANCELLING from a state where ranks
// may exist. FAILED_PRECONDITION for terminal states and CANCELLING itself.
absl::Status CancelTarget(v1::JobState from, v1::JobState* to);

// Resume is legal from CANCELLED and FAILED only.
absl::Status CheckResumable(v1::JobState from);

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_JOB_STATE_MACHINE_H_
