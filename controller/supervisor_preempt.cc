// The Supervisor's operator requests: checkpoint now (CheckpointJob) and preemption of the runs
// on a drained node (DrainNode), with the grace period that bounds the latter.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/proto_enum.h"
#include "controller/job_events.h"
#include "controller/supervisor.h"

namespace dhp::controller {

absl::Status Supervisor::RequestCheckpoint(const std::string& job_id,
                                           v1::CheckpointJobResponse* resp,
                                           std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  absl::StatusOr<v1::Job> job = store_.GetJob(job_id);
  if (!job.ok()) return job.status();
  ActiveRun* run = FindRun(RunId{job_id, job->current_attempt()});
  const bool live =
      job->state() == v1::JOB_STATE_STARTING || job->state() == v1::JOB_STATE_RUNNING;
  if (!live || run == nullptr || run->draining) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot checkpoint job ", job_id, ": it is ", ShortName(job->state()),
                     "; only a STARTING or RUNNING job has ranks to write a checkpoint"));
  }
  const bool joined = run->checkpoint_at.has_value();
  // The newest step a rank reported (or the first step of the attempt): a checkpoint there
  // loses no step.
  if (!joined) run->checkpoint_at = std::max(run->max_step, run->start_step + 1);
  const int64_t at = *run->checkpoint_at;
  absl::Status s = Transition(run->id, events, [&](v1::Job& j, v1::Run& r, int64_t now,
                                                   JobWrite& w) {
    r.set_checkpoint_requested_at_step(at);  // asked again after a controller restart
    w.events.push_back(JobEvent(j, now, "checkpoint", "", "REQUESTED",
                                absl::StrCat("checkpoint requested by user",
                                             joined ? " (joins the pending request)" : "",
                                             ": at step ", at, " or the first step boundary after it")));
    return absl::OkStatus();
  });
  if (!s.ok()) {
    if (!joined) run->checkpoint_at.reset();
    return s;
  }
  *resp->mutable_job() = *job;
  resp->set_at_step(at);
  return absl::OkStatus();
}

absl::Status Supervisor::PreemptRunsOn(const std::string& node_id, const std::string& why,
                                       std::vector<std::string>* job_ids,
                                       std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  auto placed = by_node_.find(node_id);
  if (placed == by_node_.end()) return absl::OkStatus();
  const int64_t now = clock_.NowMicros();
  // FailRun changes neither runs_ nor by_node_ (only SweepDrained does): iterating is safe.
  for (const auto& [id, world_ranks] : placed->second) {
    ActiveRun& run = runs_.at(id);
    if (run.draining) continue;
    job_ids->push_back(id.job_id);
    if (!run.preempt_reason.empty()) continue;  // asked already: keeps its deadline
    if (run.max_step <= run.start_step) {
      // No step of this attempt finished: there is nothing newer than its resume point to save.
      const std::string reason = absl::StrCat(
          "preempted: ", why, " before the attempt finished a step; it resumes from step ",
          run.start_step, " (not counted as a restart)");
      if (absl::Status s = FailRun(run, reason, false, events, v1::RUN_STATE_PREEMPTED);
          !s.ok()) {
        return s;
      }
      continue;
    }
    const std::string asked = absl::StrCat(
        why, ": every rank checkpoints at its next step boundary (after step ", run.max_step,
        ") and stops, within restart.preemption_grace_s ", run.preemption_grace_s, " s");
    absl::Status s = Transition(run.id, events, [&](v1::Job& j, v1::Run&, int64_t at,
                                                    JobWrite& w) {
      w.events.push_back(JobEvent(j, at, "preempt", "", "REQUESTED", asked));
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    run.preempt_reason = why;
    run.preempt_deadline_micros = now + int64_t{run.preemption_grace_s} * 1000000;
  }
  return SweepDrained(events);
}

absl::Status Supervisor::CheckPreemptGrace(ActiveRun& run, int64_t now,
                                           std::vector<v1::Event>* events) {
  if (run.preempt_reason.empty() || now < run.preempt_deadline_micros) return absl::OkStatus();
  const std::string reason = absl::StrCat(
      "preempted: ", run.preempt_reason, "; the ranks did not checkpoint and stop within "
      "restart.preemption_grace_s ", run.preemption_grace_s, " s and were stopped; the next "
      "attempt resumes from the newest complete checkpoint (not counted as a restart)");
  return FailRun(run, reason, false, events, v1::RUN_STATE_PREEMPTED);
}

}  // namespace dhp::controller
