// The Supervisor's handling of what ranks report themselves: progress (and stalls when it
// stops), and checkpoint shards and rejections (handed to the CheckpointTracker).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_layout.h"
#include "common/logging.h"
#include "common/proto_enum.h"
#include "controller/job_events.h"
#include "controller/supervisor.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

// A rank whose reporter has been silent this long, or 2.5x the pace its last answer asked
// for (RankView::asked_report_ms) when longer, is named as not reporting (its reporter re-sends every 2 s, or at
// that pace, even while a step hangs).
constexpr int64_t kSilentMicros = 5000000;

// A report's metrics replace the rank's, updated in place: a rank sends the same ~24 keys each
// time, and assigning a new map allocated a node and a key for each, on the loop.
void ReplaceMetrics(const google::protobuf::Map<std::string, double>& in,
                    std::map<std::string, double>& out) {
  for (const auto& [key, value] : in) out[key] = value;
  if (out.size() == in.size()) return;  // out holds in's keys: the same set
  for (auto it = out.begin(); it != out.end();) {
    it = in.count(it->first) == 0 ? out.erase(it) : std::next(it);
  }
}

}  // namespace

// ---- progress ------------------------------------------------------------------------------

absl::Status Supervisor::OnRelayedProgress(const std::string& node_id,
                                           const v1::ReportProgressRequest& req,
                                           v1::ReportProgressResponse* resp,
                                           std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  const ActiveRun* run = FindRun(req.job_id(), req.attempt());
  if (run != nullptr && req.rank() >= 0 && req.rank() < static_cast<int>(run->placement.size()) &&
      run->placement[req.rank()].node_id() != node_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("rank ", req.rank(), " of job ", req.job_id(), " attempt ", req.attempt(),
                     " is placed on node \"", run->placement[req.rank()].node_id(),
                     "\", not on \"", node_id, "\" that relayed its report"));
  }
  return OnProgress(req, resp, events);
}

absl::Status Supervisor::OnProgress(const v1::ReportProgressRequest& req,
                                    v1::ReportProgressResponse* resp,
                                    std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  if (req.step() < 0 || req.step() > kMaxReportedStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", req.step(), " must be in 0..", kMaxReportedStep));
  }
  if (req.total_steps() < 0 || req.total_steps() > kMaxReportedStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "total_steps: ", req.total_steps(), " must be in 0..", kMaxReportedStep, " (0: unknown)"));
  }
  resp->set_next_report_ms(NextReportMs());
  ActiveRun* run = FindRun(req.job_id(), req.attempt());
  // An active run that is not draining is its job's current attempt: no need to read the job.
  if (run == nullptr || run->draining) {
    absl::StatusOr<v1::Job> job = store_.GetJob(req.job_id());
    if (!job.ok()) return job.status();
    if (req.attempt() != job->current_attempt()) {
      return absl::FailedPreconditionError(
          absl::StrCat("attempt ", req.attempt(), " of job ", req.job_id(),
                       " is not current; the job is on attempt ", job->current_attempt()));
    }
  }
  if (run == nullptr) {
    resp->set_stop(true);
    return absl::OkStatus();
  }
  if (req.rank() < 0 || req.rank() >= static_cast<int>(run->ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank: ", req.rank(), " is not a rank of ",
                                                   "the run (world size ", run->ranks.size(), ")"));
  }
  if (run->draining) {  // told to stop; a step it finished still counts for a cancelled run
    resp->set_stop(true);
    if (run->cancelling && !std::isnan(req.loss())) run->loss = req.loss();
    if (run->cancelling) run->max_step = std::max(run->max_step, req.step());
    return absl::OkStatus();
  }
  if (run->checkpoint_at.has_value()) {
    resp->set_checkpoint(true);
    resp->set_checkpoint_at_step(*run->checkpoint_at);
  }
  if (!run->preempt_reason.empty()) {
    resp->set_preempt(true);
    resp->set_preempt_reason(run->preempt_reason);
  }
  const int64_t now = clock_.NowMicros();
  RankView& rank = run->ranks[req.rank()];
  rank.step = std::max(rank.step, req.step());
  rank.report_micros = now;
  rank.asked_report_ms = resp->next_report_ms();
  rank.waiting_on = req.waiting_on();
  if (!req.metrics().empty()) ReplaceMetrics(req.metrics(), rank.metrics);
  if (!std::isnan(req.loss())) run->loss = req.loss();
  if (req.total_steps() > 0) run->total_steps = req.total_steps();
  if (req.tokens_per_second() > 0) run->tokens_per_second = req.tokens_per_second();
  if (req.step_seconds() > 0) run->step_seconds = req.step_seconds();
  bool advanced = req.step() > run->max_step;
  if (advanced) {
    run->max_step = req.step();
    run->last_advance_micros = now;
  }
  const bool to_running = run->job_state != v1::JOB_STATE_RUNNING && req.step() > run->start_step;
  const bool last = run->total_steps > 0 && run->max_step >= run->total_steps;
  if (to_running || (advanced && last)) return PersistProgress(*run, to_running, events);
  if (advanced && !run->progress_unsaved) {  // SaveProgress writes it with others, when due
    run->progress_unsaved = true;
    progress_due_.emplace(run->last_persist_micros + options_.progress_save_micros, run->id);
  }
  return absl::OkStatus();
}

std::string TrainingLine(const ActiveRun& run) {
  return run.total_steps > 0
             ? absl::StrCat("training: step ", run.max_step, " of ", run.total_steps, " done")
             : absl::StrCat("training: step ", run.max_step, " done");
}

void RecordSteps(const ActiveRun& run, v1::Job& job, v1::Run& stored) {
  if (run.max_step < 0) return;  // nothing reported, nothing known
  job.set_latest_step(run.max_step);
  job.set_latest_loss(run.loss);
  if (run.total_steps > 0) job.set_total_steps(run.total_steps);
  job.set_tokens_per_second(run.tokens_per_second);
  job.set_step_seconds(run.step_seconds);
  stored.set_last_step(run.max_step);
  stored.set_last_loss(run.loss);
}

namespace {

// A running job's message and step figures from its active run (not the update time).
void ApplyProgress(const ActiveRun& run, v1::Job& job, v1::Run& stored) {
  if (job.state() == v1::JOB_STATE_RUNNING) job.set_message(TrainingLine(run));
  RecordSteps(run, job, stored);
}

}  // namespace

absl::Status Supervisor::PersistProgress(ActiveRun& run, bool to_running,
                                         std::vector<v1::Event>* events) {
  absl::Status s = Transition(run.id, events, [&](v1::Job& job, v1::Run& stored, int64_t now,
                                                  JobWrite& write) {
    if (to_running) {
      if (absl::Status s = MoveJobToRunning(job, TrainingLine(run), now, &write); !s.ok()) {
        return s;
      }
      MoveRun(job, stored, v1::RUN_STATE_RUNNING, "training", now, &write);
    }
    ApplyProgress(run, job, stored);
    *job.mutable_update_time() = MicrosToTimestamp(now);
    run.last_persist_micros = now;
    run.progress_unsaved = false;
    return absl::OkStatus();
  });
  if (s.ok() && to_running) run.job_state = v1::JOB_STATE_RUNNING;
  return s;
}

absl::Status Supervisor::SaveProgress(std::vector<v1::Event>* events, bool all) {
  DHP_CHECK_ON_THREAD(loop_);
  const int64_t now = clock_.NowMicros();
  std::vector<JobWrite> writes;
  std::vector<ActiveRun*> saved;
  auto save = [&](const RunId& id, ActiveRun& run) {
    absl::StatusOr<Loaded> loaded = Load(id);
    if (!loaded.ok()) {  // ended meanwhile by another path: its transition wrote the figures
      run.progress_unsaved = false;
      return;
    }
    ApplyProgress(run, loaded->job, loaded->run);
    *loaded->job.mutable_update_time() = MicrosToTimestamp(now);
    JobWrite& write = writes.emplace_back();
    write.labels_unchanged = true;  // ApplyProgress writes the step figures and message only
    write.job = std::move(loaded->job);
    write.runs.push_back(std::move(loaded->run));
    saved.push_back(&run);
  };
  if (all) {
    for (auto& [id, run] : runs_) {
      ++progress_runs_visited_;
      if (run.progress_unsaved && !run.draining) save(id, run);
    }
    progress_due_.clear();
  }
  std::vector<RunId> later;  // draining when due: looked at again one period on
  while (!progress_due_.empty() && progress_due_.begin()->first <= now &&
         static_cast<int>(writes.size()) < options_.progress_save_batch) {
    const RunId id = progress_due_.begin()->second;
    progress_due_.erase(progress_due_.begin());
    ++progress_runs_visited_;
    auto it = runs_.find(id);
    if (it == runs_.end() || !it->second.progress_unsaved) continue;  // saved or ended
    if (now - it->second.last_persist_micros < options_.progress_save_micros) {
      progress_due_.emplace(it->second.last_persist_micros + options_.progress_save_micros, id);
      continue;  // saved by another path since this entry was made, and unsaved again
    }
    if (it->second.draining) {
      later.push_back(id);
      continue;
    }
    save(id, it->second);
  }
  for (const RunId& id : later) progress_due_.emplace(now + options_.progress_save_micros, id);
  absl::StatusOr<std::vector<v1::Event>> added = store_.CommitAll(writes);
  if (!added.ok()) {  // still unsaved: due again at the next call
    for (ActiveRun* run : saved) progress_due_.emplace(now, run->id);
    return added.status();
  }
  events->insert(events->end(), added->begin(), added->end());
  for (ActiveRun* run : saved) {
    run->progress_unsaved = false;
    run->last_persist_micros = now;
  }
  return absl::OkStatus();
}

void Supervisor::OverlayProgress(v1::Job& job, v1::Run* current_run) const {
  DHP_CHECK_ON_THREAD(loop_);
  auto it = runs_.find(RunId{job.id(), job.current_attempt()});
  if (it == runs_.end() || !it->second.progress_unsaved) return;
  v1::Run ignored;
  ApplyProgress(it->second, job, current_run != nullptr ? *current_run : ignored);
}

void Supervisor::DescribeRanks(const v1::Job& job, v1::GetJobResponse* resp) const {
  DHP_CHECK_ON_THREAD(loop_);
  auto it = runs_.find(RunId{job.id(), job.current_attempt()});
  if (it == runs_.end()) return;
  const ActiveRun& run = it->second;
  const comm::Layout layout = LayoutForSpec(job.spec());
  const int64_t now = clock_.NowMicros();
  for (size_t w = 0; w < run.ranks.size(); ++w) {
    const RankView& r = run.ranks[w];
    v1::RankProgress* p = resp->add_ranks();
    p->set_rank(static_cast<int>(w));
    p->set_node_id(run.placement[w].node_id());
    p->set_step(r.step);
    if (r.report_micros > 0) p->set_report_age_seconds((now - r.report_micros) / 1e6);
    p->set_waiting_on(r.waiting_on);
    p->mutable_metrics()->insert(r.metrics.begin(), r.metrics.end());
    if (static_cast<int>(w) < layout.WorldSize()) {
      p->set_has_vision(comm::VisionCoord(layout, static_cast<int>(w)).has_value());
      p->set_has_text(comm::TextCoord(layout, static_cast<int>(w)).has_value());
    }
  }
}

// ---- stalls --------------------------------------------------------------------------------

absl::Status Supervisor::CheckStalls(std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  const int64_t now = clock_.NowMicros();
  // FailRun changes neither runs_ nor by_node_ (only SweepDrained does): iterating is safe.
  for (auto& [id, run] : runs_) {
    if (run.draining) continue;
    if (absl::Status s = CheckPreemptGrace(run, now, events); !s.ok()) return s;
    if (run.draining) continue;
    if (absl::Status s = CheckLaunched(run, now, events); !s.ok()) return s;
    if (run.draining) continue;
    if (now - run.last_advance_micros < int64_t{run.stall_timeout_s} * 1000000) continue;
    if (absl::Status s = FailRun(run, StallReason(run, now), true, events); !s.ok()) return s;
  }
  return SweepDrained(events);
}

absl::Status Supervisor::CheckLaunched(ActiveRun& run, int64_t now,
                                       std::vector<v1::Event>* events) {
  if (run.launched == static_cast<int>(run.ranks.size())) return absl::OkStatus();
  if (now - run.placed_micros < int64_t{run.launch_timeout_s} * 1000000) return absl::OkStatus();
  std::map<std::string, std::vector<int>> missing;  // node -> ranks never reported
  for (size_t w = 0; w < run.ranks.size(); ++w) {
    const RankView& r = run.ranks[w];
    // A rank that reported progress runs, whatever its agent has said so far.
    if (!r.launched && r.report_micros == 0) {
      missing[run.placement[w].node_id()].push_back(static_cast<int>(w));
    }
  }
  if (missing.empty()) return absl::OkStatus();
  std::string where;
  for (const auto& [node, ranks] : missing) {
    absl::StrAppend(&where, where.empty() ? "" : "; ", "node ", node, ": ranks ",
                    absl::StrJoin(ranks, ", "));
  }
  const std::string reason =
      absl::StrCat("ranks placed ", (now - run.placed_micros) / 1000000,
                   " s ago were never reported running (restart.launch_timeout_s ",
                   run.launch_timeout_s, "): ", where);
  return FailRun(run, reason, true, events);
}

std::string Supervisor::StallReason(const ActiveRun& run, int64_t now) const {
  std::string out = absl::StrCat("no progress for ", (now - run.last_advance_micros) / 1000000,
                                 " s (restart.stall_timeout_s ", run.stall_timeout_s, ") at step ",
                                 std::max<int64_t>(run.max_step, 0));
  std::string silent, behind, waiting;
  for (size_t w = 0; w < run.ranks.size(); ++w) {
    const RankView& r = run.ranks[w];
    const std::string who = absl::StrCat("rank ", w, " (node ", run.placement[w].node_id(), ")");
    if (r.report_micros == 0) {
      absl::StrAppend(&silent, silent.empty() ? "" : ", ", who, " never reported");
    } else if (now - r.report_micros >
               std::max<int64_t>(kSilentMicros, r.asked_report_ms * int64_t{2500})) {
      absl::StrAppend(&silent, silent.empty() ? "" : ", ", who, " silent for ",
                      (now - r.report_micros) / 1000000, " s after step ", r.step);
    } else if (r.step < run.max_step) {
      absl::StrAppend(&behind, behind.empty() ? "" : ", ", who, " at step ", r.step);
    }
    if (!r.waiting_on.empty()) {
      absl::StrAppend(&waiting, waiting.empty() ? "" : "; ", "rank ", w, " waits in ",
                      r.waiting_on);
    }
  }
  if (!silent.empty()) absl::StrAppend(&out, "; stalled: ", silent);
  if (!behind.empty()) absl::StrAppend(&out, "; behind: ", behind);
  if (!waiting.empty()) absl::StrAppend(&out, "; ", waiting);
  return out;
}

// ---- checkpoints: the CheckpointTracker's, for the current run only -----------------------

absl::Status Supervisor::OnCheckpointShard(const v1::ReportCheckpointRequest& req,
                                           v1::ReportCheckpointResponse* resp,
                                           std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  const RunId id{req.job_id(), req.attempt()};
  absl::StatusOr<Loaded> loaded = Load(id);
  if (!loaded.ok()) return loaded.status();
  absl::Status s = checkpoints_.OnShard(loaded->job, loaded->run, req, resp, events);
  // Every rank saved after this step, whether or not its progress report is in yet: the run's
  // last step is never below the checkpoint the next attempt starts from.
  ActiveRun* run = FindRun(id);
  if (s.ok() && run != nullptr && resp->checkpoint().state() == v1::CHECKPOINT_STATE_COMPLETE) {
    run->max_step = std::max(run->max_step, resp->checkpoint().step());
  }
  // A shard written at or after the requested step answers a checkpoint-now request.
  if (s.ok() && run != nullptr && run->checkpoint_at.has_value() &&
      req.step() >= *run->checkpoint_at) {
    run->checkpoint_at.reset();
  }
  // The stored request goes once such a checkpoint is COMPLETE. A failure to write that leaves
  // it stored: after a restart the ranks would be asked for a step they have saved (a no-op).
  const v1::Checkpoint& done = resp->checkpoint();
  if (s.ok() && done.state() == v1::CHECKPOINT_STATE_COMPLETE &&
      loaded->run.has_checkpoint_requested_at_step() &&
      done.step() >= loaded->run.checkpoint_requested_at_step()) {
    absl::Status cleared = Transition(id, events, [&](v1::Job&, v1::Run& r, int64_t, JobWrite&) {
      if (done.step() >= r.checkpoint_requested_at_step()) r.clear_checkpoint_requested_at_step();
      return absl::OkStatus();
    });
    if (!cleared.ok()) {
      DHP_LOG(WARNING) << "job " << id.job_id << ": clearing the answered checkpoint request: "
                       << cleared;
    }
  }
  return s;
}

absl::Status Supervisor::OnCheckpointRejected(const v1::RejectCheckpointRequest& req,
                                              std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  const RunId id{req.job_id(), req.attempt()};
  absl::StatusOr<Loaded> loaded = Load(id);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<std::string> why = checkpoints_.Reject(loaded->job, req, events);
  if (!why.ok()) return why.status();
  ActiveRun* run = FindRun(id);
  if (run != nullptr && !run->draining) {
    if (absl::Status s = FailRun(*run, *why, false, events); !s.ok()) return s;
  }
  return SweepDrained(events);
}

}  // namespace dhp::controller
