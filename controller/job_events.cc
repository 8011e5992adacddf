#include "controller/job_events.h"

#include "common/proto_enum.h"
#include "controller/job_state_machine.h"
#include "controller/time_util.h"

namespace dhp::controller {

v1::Event JobEvent(const v1::Job& job, int64_t now_micros, const std::string& type,
                   const std::string& from, const std::string& to, const std::string& reason) {
  v1::Event e;
  e.set_job_id(job.id());
  e.set_attempt(job.current_attempt());
  *e.mutable_time() = MicrosToTimestamp(now_micros);
  e.set_type(type);
  e.set_from_state(from);
  e.set_to_state(to);
  e.set_reason(reason);
  return e;
}

absl::Status MoveJob(v1::Job& job, v1::JobState to, const std::string& reason,
                     int64_t now_micros, JobWrite* write) {
  if (absl::Status s = CheckJobTransition(job.state(), to); !s.ok()) return s;
  write->events.push_back(
      JobEvent(job, now_micros, "job.state", ShortName(job.state()), ShortName(to), reason));
  job.set_state(to);
  job.set_message(reason);
  *job.mutable_update_time() = MicrosToTimestamp(now_micros);
  return absl::OkStatus();
}

absl::Status MoveJobToRunning(v1::Job& job, const std::string& reason, int64_t now_micros,
                              JobWrite* write) {
  if (job.state() == v1::JOB_STATE_SCHEDULED) {
    absl::Status s = MoveJob(job, v1::JOB_STATE_STARTING, "ranks launched", now_micros, write);
    if (!s.ok()) return s;
  }
  if (job.state() != v1::JOB_STATE_STARTING) return absl::OkStatus();
  return MoveJob(job, v1::JOB_STATE_RUNNING, reason, now_micros, write);
}

void MoveRun(const v1::Job& job, v1::Run& run, v1::RunState to, const std::string& reason,
             int64_t now_micros, JobWrite* write) {
  v1::Event e = JobEvent(job, now_micros, "run.state", ShortName(run.state()), ShortName(to),
                         reason);
  e.set_attempt(run.attempt());
  write->events.push_back(e);
  run.set_state(to);
  run.set_reason(reason);
  if (to == v1::RUN_STATE_SUCCEEDED || to == v1::RUN_STATE_FAILED ||
      to == v1::RUN_STATE_CANCELLED || to == v1::RUN_STATE_PREEMPTED) {
    *run.mutable_end_time() = MicrosToTimestamp(now_micros);
    run.clear_checkpoint_requested_at_step();  // an ended run has no ranks to ask
  }
  if (to == v1::RUN_STATE_RUNNING) *run.mutable_start_time() = MicrosToTimestamp(now_micros);
}

}  // namespace dhp::controller
