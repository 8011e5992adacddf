// The Supervisor's handling of what ranks report themselves: progress (and stalls when it
// stops) and checkpoint shards (recording, completion, garbage collection, corruption).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_layout.h"
#include "common/logging.h"
#include "common/path_inside.h"
#include "common/proto_enum.h"
#include "common/proto_yaml.h"
#include "controller/job_events.h"
#include "controller/supervisor.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

constexpr int64_t kPersistEveryMicros = 1000000;
// A rank whose reporter has been silent this long is named as not reporting (its reporter
// re-sends every 2 s even while a step hangs).
constexpr int64_t kSilentMicros = 5000000;

std::string Mib(int64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

bool SafeFileName(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos;
}

}  // namespace

// ---- progress ------------------------------------------------------------------------------

absl::Status Supervisor::OnProgress(const v1::ReportProgressRequest& req,
                                    v1::ReportProgressResponse* resp,
                                    std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  if (req.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step: ", req.step(), " must not be negative"));
  }
  absl::StatusOr<v1::Job> job = store_.GetJob(req.job_id());
  if (!job.ok()) return job.status();
  if (req.attempt() != job->current_attempt()) {
    return absl::FailedPreconditionError(
        absl::StrCat("attempt ", req.attempt(), " of job ", req.job_id(),
                     " is not current; the job is on attempt ", job->current_attempt()));
  }
  ActiveRun* run = FindRun(RunId{req.job_id(), req.attempt()});
  if (run == nullptr || run->draining) {
    resp->set_stop(true);
    return absl::OkStatus();
  }
  if (req.rank() < 0 || req.rank() >= static_cast<int>(run->ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank: ", req.rank(), " is not a rank of ",
                                                   "the run (world size ", run->ranks.size(), ")"));
  }
  const int64_t now = clock_.NowMicros();
  RankView& rank = run->ranks[req.rank()];
  rank.step = std::max(rank.step, req.step());
  rank.report_micros = now;
  rank.waiting_on = req.waiting_on();
  if (!req.metrics().empty()) rank.metrics = {req.metrics().begin(), req.metrics().end()};
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
  const bool due = now - run->last_persist_micros >= kPersistEveryMicros ||
                   (run->total_steps > 0 && run->max_step >= run->total_steps);
  if (to_running || (advanced && due)) return PersistProgress(*run, to_running, events);
  return absl::OkStatus();
}

absl::Status Supervisor::PersistProgress(ActiveRun& run, bool to_running,
                                         std::vector<v1::Event>* events) {
  absl::Status s = Transition(run.id, events, [&](v1::Job& job, v1::Run& stored, int64_t now,
                                                  JobWrite& write) {
    if (to_running) {
      const std::string why = absl::StrCat("training: step ", run.max_step, " done");
      if (absl::Status s = MoveJobToRunning(job, why, now, &write); !s.ok()) return s;
      MoveRun(job, stored, v1::RUN_STATE_RUNNING, "training", now, &write);
    }
    job.set_latest_step(run.max_step);
    job.set_latest_loss(run.loss);
    job.set_total_steps(run.total_steps);
    job.set_tokens_per_second(run.tokens_per_second);
    job.set_step_seconds(run.step_seconds);
    *job.mutable_update_time() = MicrosToTimestamp(now);
    stored.set_last_step(run.max_step);
    stored.set_last_loss(run.loss);
    run.last_persist_micros = now;
    return absl::OkStatus();
  });
  if (s.ok() && to_running) run.job_state = v1::JOB_STATE_RUNNING;
  return s;
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
    } else if (now - r.report_micros > kSilentMicros) {
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

// ---- checkpoints ---------------------------------------------------------------------------

absl::Status Supervisor::OnCheckpointShard(const v1::ReportCheckpointRequest& req,
                                           v1::ReportCheckpointResponse* resp,
                                           std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  absl::StatusOr<Loaded> loaded = Load(RunId{req.job_id(), req.attempt()});
  if (!loaded.ok()) return loaded.status();
  const v1::Run& run = loaded->run;
  const v1::CheckpointShard& shard = req.shard();
  if (req.step() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("step: ", req.step(), " must be at least 1"));
  }
  if (req.world_size() != run.world_size() || run.world_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: ", req.world_size(),
                                                   " is not the run's (", run.world_size(), ")"));
  }
  if (shard.rank() < 0 || shard.rank() >= run.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("shard.rank: ", shard.rank(), " is out of range"));
  }
  if (!SafeFileName(shard.file())) {
    return absl::InvalidArgumentError("shard.file: \"" + shard.file() +
                                      "\" must be a plain file name");
  }
  // Resolved, links followed: a link inside the run's directory pointing out does not pass.
  if (req.path().empty() || !PathInside(req.path(), run.checkpoint_dir()) ||
      PathInside(run.checkpoint_dir(), req.path())) {  // the directory itself
    return absl::InvalidArgumentError("path: \"" + req.path() + "\" is not inside the run's " +
                                      "checkpoint directory " + run.checkpoint_dir());
  }
  v1::Checkpoint ckpt;
  for (const v1::Checkpoint& c : store_.ListCheckpoints(req.job_id())) {
    if (c.attempt() == req.attempt() && c.step() == req.step()) ckpt = c;
  }
  if (ckpt.id() == 0) {
    ckpt.set_job_id(req.job_id());
    ckpt.set_attempt(req.attempt());
    ckpt.set_step(req.step());
    ckpt.set_path(req.path());
    ckpt.set_state(v1::CHECKPOINT_STATE_PARTIAL);
    ckpt.set_world_size(req.world_size());
    *ckpt.mutable_create_time() = MicrosToTimestamp(clock_.NowMicros());
    absl::StatusOr<v1::Checkpoint> added = store_.AddCheckpoint(ckpt, {});
    if (!added.ok()) return added.status();
    ckpt = *added;
  }
  if (ckpt.state() != v1::CHECKPOINT_STATE_PARTIAL) {
    *resp->mutable_checkpoint() = ckpt;  // a retried report of a finished checkpoint
    return absl::OkStatus();
  }
  auto* shards = ckpt.mutable_shards();
  shards->erase(std::remove_if(shards->begin(), shards->end(),
                               [&](const v1::CheckpointShard& s) { return s.rank() == shard.rank(); }),
                shards->end());
  *ckpt.add_shards() = shard;
  std::sort(shards->begin(), shards->end(),
            [](const auto& a, const auto& b) { return a.rank() < b.rank(); });
  int64_t size = 0;
  for (const v1::CheckpointShard& s : ckpt.shards()) size += s.size_bytes();
  ckpt.set_size_bytes(size);
  ckpt.set_write_seconds(std::max(ckpt.write_seconds(), req.write_seconds()));
  std::vector<v1::Event> ckpt_events;
  if (ckpt.shards_size() == ckpt.world_size()) {
    ckpt.set_state(v1::CHECKPOINT_STATE_COMPLETE);
    ckpt_events.push_back(JobEvent(
        loaded->job, clock_.NowMicros(), "checkpoint", "PARTIAL", "COMPLETE",
        absl::StrFormat("checkpoint %d at step %d: %d shards, %s, written in %.2f s, in %s",
                        ckpt.id(), ckpt.step(), ckpt.shards_size(), Mib(size),
                        ckpt.write_seconds(), ckpt.path())));
  }
  absl::StatusOr<std::vector<v1::Event>> added = store_.UpdateCheckpoint(ckpt, ckpt_events);
  if (!added.ok()) return added.status();
  events->insert(events->end(), added->begin(), added->end());
  *resp->mutable_checkpoint() = ckpt;
  if (ckpt.state() != v1::CHECKPOINT_STATE_COMPLETE) return absl::OkStatus();
  // The manifest beside the shards: the same record, readable without the controller.
  manifests_.emplace_back(ckpt.path(), ProtoToJson(ckpt, /*pretty=*/true));
  return CollectGarbage(loaded->job, events);
}

absl::Status Supervisor::CollectGarbage(const v1::Job& job, std::vector<v1::Event>* events) {
  const std::vector<v1::Checkpoint> all = store_.ListCheckpoints(job.id());
  std::vector<const v1::Checkpoint*> complete;
  for (const v1::Checkpoint& c : all) {
    if (c.state() == v1::CHECKPOINT_STATE_COMPLETE) complete.push_back(&c);
  }
  if (complete.empty()) return absl::OkStatus();
  const int keep = std::max(1, job.spec().checkpoint().keep_latest());
  const int64_t newest = complete.back()->step();
  std::set<int64_t> kept;
  for (size_t i = complete.size() > static_cast<size_t>(keep) ? complete.size() - keep : 0;
       i < complete.size(); ++i) {
    kept.insert(complete[i]->id());
  }
  for (const v1::Checkpoint& c : all) {
    std::string why;
    if (c.state() == v1::CHECKPOINT_STATE_COMPLETE && kept.count(c.id()) == 0) {
      why = absl::StrCat("older than the ", keep, " newest complete checkpoints ",
                         "(checkpoint.keep_latest ", keep, ")");
    } else if (c.state() != v1::CHECKPOINT_STATE_COMPLETE && c.step() <= newest) {
      why = absl::StrCat("superseded by the complete checkpoint at step ", newest);
    }
    if (why.empty()) continue;
    v1::Event e = JobEvent(job, clock_.NowMicros(), "checkpoint", ShortName(c.state()), "DELETED",
                           absl::StrCat("checkpoint ", c.id(), " at step ", c.step(), ": ", why));
    absl::StatusOr<std::vector<v1::Event>> added = store_.DeleteCheckpoint(c.id(), {e});
    if (!added.ok()) return added.status();
    events->insert(events->end(), added->begin(), added->end());
    const std::string root = options_.checkpoint_root + "/";
    if (c.path().rfind(root, 0) == 0 && c.path().find("..") == std::string::npos) {
      deletions_.push_back(c.path());
    } else {
      DHP_LOG(WARNING) << "not deleting " << c.path() << ": outside the checkpoint root";
    }
  }
  return absl::OkStatus();
}

absl::Status Supervisor::OnCheckpointRejected(const v1::RejectCheckpointRequest& req,
                                              std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  absl::StatusOr<Loaded> loaded = Load(RunId{req.job_id(), req.attempt()});
  if (!loaded.ok()) return loaded.status();
  v1::Checkpoint ckpt;
  for (const v1::Checkpoint& c : store_.ListCheckpoints(req.job_id())) {
    if (c.id() == req.checkpoint_id()) ckpt = c;
  }
  if (ckpt.id() == 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", req.checkpoint_id(), " of job ",
                                            req.job_id(), " not found"));
  }
  const std::string why = absl::StrCat("checkpoint ", ckpt.id(), " at step ", ckpt.step(),
                                       " is unusable: rank ", req.rank(), ": ", req.reason());
  if (ckpt.state() != v1::CHECKPOINT_STATE_CORRUPT) {
    v1::Event e = JobEvent(loaded->job, clock_.NowMicros(), "checkpoint", ShortName(ckpt.state()),
                           "CORRUPT", absl::StrCat(why, "; it is skipped"));
    ckpt.set_state(v1::CHECKPOINT_STATE_CORRUPT);
    ckpt.set_reason(absl::StrCat("rank ", req.rank(), ": ", req.reason()));
    absl::StatusOr<std::vector<v1::Event>> added = store_.UpdateCheckpoint(ckpt, {e});
    if (!added.ok()) return added.status();
    events->insert(events->end(), added->begin(), added->end());
  }
  ActiveRun* run = FindRun(RunId{req.job_id(), req.attempt()});
  if (run != nullptr && !run->draining) {
    if (absl::Status s = FailRun(*run, why, false, events); !s.ok()) return s;
  }
  return SweepDrained(events);
}

}  // namespace dhp::controller
