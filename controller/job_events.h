// Building job and run transitions as events inside one JobWrite, with every job transition
// checked against the state machine. Used by the JobManager (user operations) and the
// Supervisor (what runs do). Thread-safe (pure functions).
#ifndef DHP_CONTROLLER_JOB_EVENTS_H_
#define DHP_CONTROLLER_JOB_EVENTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "controller/store.h"
#include "dhp/v1/job.pb.h"

namespace dhp::controller {

// An event of `job` (its id and current attempt) at `now_micros`.
v1::Event JobEvent(const v1::Job& job, int64_t now_micros, const std::string& type,
                   const std::string& from, const std::string& to, const std::string& reason);

// Moves `job` to `to` (checked by CheckJobTransition), sets its message and update time, and
// appends a "job.state" event to `write`. `write->job` is not touched: assign it at the end.
absl::Status MoveJob(v1::Job& job, v1::JobState to, const std::string& reason,
                     int64_t now_micros, JobWrite* write);

// A job whose ranks train: SCHEDULED -> STARTING ("ranks launched") -> RUNNING (`reason`), or
// STARTING -> RUNNING; a job in any other state is left as it is.
absl::Status MoveJobToRunning(v1::Job& job, const std::string& reason, int64_t now_micros,
                              JobWrite* write);

// Moves `run` to `to`, sets its reason (and end time for a final state, where a pending
// checkpoint request is dropped) and appends a "run.state" event of `job`'s id and the run's
// attempt.
void MoveRun(const v1::Job& job, v1::Run& run, v1::RunState to, const std::string& reason,
             int64_t now_micros, JobWrite* write);

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_JOB_EVENTS_H_
