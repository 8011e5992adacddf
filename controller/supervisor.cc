#include "controller/supervisor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/proto_enum.h"
#include "common/rank_exit.h"
#include "controller/job_events.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

// Orders rank reports (and runs, to find a run's reports) by run: job id, then attempt.
struct ReportBefore {
  static bool Less(const std::string& a_job, int a_attempt, const std::string& b_job,
                   int b_attempt) {
    const int c = a_job.compare(b_job);
    return c < 0 || (c == 0 && a_attempt < b_attempt);
  }
  bool operator()(const v1::RankStatus* a, const v1::RankStatus* b) const {
    return Less(a->job_id(), a->attempt(), b->job_id(), b->attempt());
  }
  bool operator()(const v1::RankStatus* a, const RunId& b) const {
    return Less(a->job_id(), a->attempt(), b.job_id, b.attempt);
  }
  bool operator()(const RunId& a, const v1::RankStatus* b) const {
    return Less(a.job_id, a.attempt, b->job_id(), b->attempt());
  }
};

// The longest pace asked of a rank (RankReporter honours at most 10 min).
constexpr int64_t kMaxNextReportMs = 600000;

std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - begin);
}

// An exited rank that a signal ended, not the agent stopping it.
bool KilledFromOutside(const v1::RankStatus& st) {
  return st.state() == v1::RANK_PROCESS_STATE_EXITED && st.signal() != 0 &&
         !st.stopped_by_agent();
}

using Labels = google::protobuf::Map<std::string, std::string>;

bool SameLabels(const Labels& a, const Labels& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

Supervisor::Supervisor(Store& store, const Clock& clock, SupervisorOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      checkpoints_(store, clock, options_.checkpoint_root) {}

absl::StatusOr<Supervisor::Loaded> Supervisor::Load(const RunId& id) {
  absl::StatusOr<v1::Job> job = store_.GetJob(id.job_id);
  if (!job.ok()) return job.status();
  if (id.attempt != job->current_attempt()) {
    return absl::FailedPreconditionError(
        absl::StrCat("attempt ", id.attempt, " of job ", id.job_id, " is not current; the job ",
                     "is on attempt ", job->current_attempt()));
  }
  for (v1::Run& run : store_.ListRuns(id.job_id)) {
    if (run.attempt() == id.attempt) return Loaded{*std::move(job), std::move(run)};
  }
  return absl::NotFoundError(absl::StrCat("job ", id.job_id, " has no run ", id.attempt));
}

absl::Status Supervisor::Transition(const RunId& id, std::vector<v1::Event>* events,
                                    Change change) {
  absl::StatusOr<Loaded> loaded = Load(id);
  if (!loaded.ok()) return loaded.status();
  return Transition(*std::move(loaded), events, change);
}

absl::Status Supervisor::Transition(Loaded loaded, std::vector<v1::Event>* events,
                                    Change change) {
  JobWrite write;
  const Labels labels = loaded.job.spec().labels();  // a change may not touch them: compared
  if (absl::Status s = change(loaded.job, loaded.run, clock_.NowMicros(), write); !s.ok()) {
    return s;
  }
  write.labels_unchanged = SameLabels(labels, loaded.job.spec().labels());
  write.job = std::move(loaded.job);
  write.runs.insert(write.runs.begin(), std::move(loaded.run));
  return Commit(write, events);
}

absl::Status Supervisor::Commit(JobWrite& write, std::vector<v1::Event>* events) {
  absl::StatusOr<std::vector<v1::Event>> added = store_.Commit(write);
  if (!added.ok()) return added.status();
  events->insert(events->end(), added->begin(), added->end());
  return absl::OkStatus();
}

ActiveRun* Supervisor::FindRun(std::string_view job_id, int attempt) {
  auto it = run_index_.find(RunRef{job_id, attempt});
  return it == run_index_.end() ? nullptr : it->second;
}

bool Supervisor::HasProcesses(const RunId& id) const {
  DHP_CHECK_ON_THREAD(loop_);
  return runs_.count(id) > 0;
}

void Supervisor::AddRun(ActiveRun run) {
  const RunId id = run.id;
  for (const v1::RankPlacement& p : run.placement) {
    by_node_[p.node_id()][id].push_back(p.world_rank());
  }
  if (run.draining && run.drain_nodes.empty()) drained_.insert(id);
  if (auto old = runs_.find(id); old != runs_.end()) {
    placed_ranks_ -= static_cast<int64_t>(old->second.ranks.size());
  }
  placed_ranks_ += static_cast<int64_t>(run.ranks.size());
  auto [it, added] = runs_.insert_or_assign(id, std::move(run));
  if (added) run_index_.emplace(RunRef{it->first.job_id, it->first.attempt}, &it->second);
}

int Supervisor::NextReportMs() const {
  if (options_.progress_reports_per_s <= 0) return 0;
  const int64_t ms = (placed_ranks_ * 1000 + options_.progress_reports_per_s - 1) /
                     options_.progress_reports_per_s;
  return static_cast<int>(std::min<int64_t>(ms, kMaxNextReportMs));
}

void Supervisor::EraseRun(const RunId& id) {
  auto it = runs_.find(id);
  if (it == runs_.end()) return;
  for (const v1::RankPlacement& p : it->second.placement) {
    auto node = by_node_.find(p.node_id());
    if (node == by_node_.end()) continue;
    node->second.erase(id);
    if (node->second.empty()) by_node_.erase(node);
  }
  drained_.erase(id);
  placed_ranks_ -= static_cast<int64_t>(it->second.ranks.size());
  run_index_.erase(RunRef{it->first.job_id, it->first.attempt});
  runs_.erase(it);
}


// ---- recovery, admission, queue ---------------------------------------------------------------

absl::Status Supervisor::Recover() {
  DHP_CHECK_ON_THREAD(loop_);
  for (const v1::Node& node : store_.ListNodes()) OnNodeChanged(node);
  JobQuery query;
  query.states = {v1::JOB_STATE_QUEUED, v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_STARTING,
                  v1::JOB_STATE_RUNNING, v1::JOB_STATE_CANCELLING};
  query.limit = 1000;
  const int64_t now = clock_.NowMicros();
  while (true) {
    absl::StatusOr<JobPage> page = store_.ListJobs(query);
    if (!page.ok()) return page.status();
    for (const v1::Job& job : page->jobs) {
      if (job.state() == v1::JOB_STATE_QUEUED) {
        OnJobQueued(job);
        continue;
      }
      ActiveRun run;
      run.id = RunId{job.id(), job.current_attempt()};
      absl::StatusOr<Loaded> loaded = Load(run.id);
      if (!loaded.ok()) {  // e.g. its run's row could not be read and was quarantined
        EndUnrecoverable(job, loaded.status(), now);
        continue;
      }
      run.job_state = job.state();
      run.placement.assign(loaded->run.placement().begin(), loaded->run.placement().end());
      run.ranks.resize(run.placement.size());
      if (job.state() == v1::JOB_STATE_STARTING || job.state() == v1::JOB_STATE_RUNNING) {
        // Every rank had launched: an agent that reports one missing restarted meanwhile.
        for (RankView& r : run.ranks) r.launched = true;
        run.launched = static_cast<int>(run.ranks.size());
      }
      run.start_step = loaded->run.start_step();
      run.max_step = loaded->run.last_step();
      if (loaded->run.has_checkpoint_requested_at_step()) {  // CheckpointJob, not yet answered
        run.checkpoint_at = loaded->run.checkpoint_requested_at_step();
      }
      run.last_advance_micros = now;  // fresh stall and launch periods after a restart
      run.placed_micros = now;
      run.stall_timeout_s = job.spec().restart().stall_timeout_s();
      run.launch_timeout_s = job.spec().restart().launch_timeout_s();
      run.preemption_grace_s = job.spec().restart().preemption_grace_s();
      std::vector<SlotRef> slots;
      for (const v1::RankPlacement& p : run.placement) {
        slots.push_back(SlotRef{p.node_id(), p.slot(), p.gpu()});
      }
      absl::Status reserved = scheduler_.Reserve(run.id.Key(), slots);
      if (!reserved.ok()) DHP_LOG(WARNING) << "recovering job " << job.id() << ": " << reserved;
      if (job.state() == v1::JOB_STATE_CANCELLING) {
        run.cancelling = true;
        StartDraining(run);
      }
      AddRun(std::move(run));
    }
    if (page->next_before_seq == 0) break;
    query.before_seq = page->next_before_seq;
  }
  dirty_ = true;
  DHP_LOG(INFO) << "supervisor recovered " << queue_.size() << " queued and " << runs_.size()
                << " placed jobs";
  return absl::OkStatus();
}

void Supervisor::EndUnrecoverable(v1::Job job, const absl::Status& why, int64_t now) {
  const v1::JobState to =
      job.state() == v1::JOB_STATE_CANCELLING ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_FAILED;
  const std::string reason =
      absl::StrCat("attempt ", job.current_attempt(), " cannot be recovered after a controller "
                   "restart: ", why.message(), "; resume the job to start a new attempt");
  JobWrite write;
  absl::Status s = MoveJob(job, to, reason, now, &write);
  if (s.ok()) {
    write.job = job;
    s = store_.Commit(write).status();
  }
  DHP_LOG(ERROR) << "recovering job " << job.id() << ": " << why.message()
                 << (s.ok() ? "; it is now " + ShortName(to) : "; left as it is: " + s.ToString());
}

absl::Status Supervisor::OnJobCancelled(const v1::Job& job, std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  const RunId id{job.id(), job.current_attempt()};
  if (queue_.erase(id.Key()) > 0) dirty_ = true;  // it may have held the reservation
  waiting_.erase(job.id());
  if (job.state() != v1::JOB_STATE_CANCELLING) return absl::OkStatus();
  ActiveRun* run = FindRun(id);
  if (run == nullptr) {  // nothing was placed: the cancel completes at once
    absl::StatusOr<Loaded> loaded = Load(id);
    if (!loaded.ok()) return loaded.status();
    ActiveRun none;
    none.id = id;
    none.cancelling = true;
    return FinishDrain(none, events);
  }
  run->cancelling = true;
  run->job_state = v1::JOB_STATE_CANCELLING;
  if (!run->draining) StartDraining(*run);
  return SweepDrained(events);
}

// ---- nodes --------------------------------------------------------------------------------

void Supervisor::OnNodeChanged(const v1::Node& node) {
  DHP_CHECK_ON_THREAD(loop_);
  NodeCapacity cap;
  cap.node_id = node.id();
  const v1::NodeResources& res = node.resources();
  cap.gpu = res.gpus_size() > 0;
  cap.slots = cap.gpu ? res.gpus_size() : res.cpu_slots();
  if (cap.gpu) {
    int64_t smallest = 0;
    for (const v1::Gpu& g : res.gpus()) {
      if (smallest == 0 || g.memory_bytes() < smallest) smallest = g.memory_bytes();
    }
    cap.memory_bytes_per_slot = smallest;
  } else if (cap.slots > 0) {
    cap.memory_bytes_per_slot = res.memory_bytes() / cap.slots;
  }
  cap.schedulable =
      node.state() == v1::NODE_STATE_READY && !node.cordoned() && !node.stopping();
  scheduler_.UpsertNode(cap);
  if (node.state() == v1::NODE_STATE_READY) {
    lost_nodes_.erase(node.id());
  } else {
    lost_nodes_.insert(node.id());
  }
  dirty_ = true;
}

absl::Status Supervisor::OnNodeLost(const std::string& node_id, std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  absl::StatusOr<v1::Node> node = store_.GetNode(node_id);
  if (node.ok()) OnNodeChanged(*node);
  lost_nodes_.insert(node_id);
  auto placed = by_node_.find(node_id);
  if (placed == by_node_.end()) return SweepDrained(events);
  // FailRun changes neither runs_ nor by_node_ (only SweepDrained does): iterating is safe.
  for (const auto& [id, world_ranks] : placed->second) {
    ActiveRun& run = runs_.at(id);
    if (run.draining) {
      run.drain_nodes.erase(node_id);
      if (run.drain_nodes.empty()) drained_.insert(id);
      continue;
    }
    const std::string reason = absl::StrCat(
        "node ", node_id, " was lost (no heartbeat) with ranks ", absl::StrJoin(world_ranks, ", "));
    if (absl::Status s = FailRun(run, reason, true, events); !s.ok()) return s;
  }
  return SweepDrained(events);
}

// ---- heartbeats: rank processes -------------------------------------------------------------

absl::Status Supervisor::OnHeartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp,
                                     std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  const std::string& node = req.node_id();
  // The reports grouped by run, each group in the order sent: a sorted vector rather than a
  // map of vectors, for fewer allocations per beat.
  std::vector<const v1::RankStatus*> reports;
  reports.reserve(req.ranks_size());
  for (const v1::RankStatus& st : req.ranks()) reports.push_back(&st);
  // An agent lists each run's ranks together: usually sorted already, and then not copied.
  if (!std::is_sorted(reports.begin(), reports.end(), ReportBefore{})) {
    std::stable_sort(reports.begin(), reports.end(), ReportBefore{});
  }
  size_t applied = 0;  // reports of runs placed here
  // Only the runs with ranks on this node: the work does not grow with the cluster.
  auto placed = by_node_.find(node);
  if (placed != by_node_.end()) {
    for (const auto& [id, world_ranks] : placed->second) {
      ranks_visited_ += static_cast<int64_t>(world_ranks.size());
      const auto [lo, hi] = std::equal_range(reports.begin(), reports.end(), id, ReportBefore{});
      applied += static_cast<size_t>(hi - lo);
      std::vector<const v1::RankStatus*> statuses(lo, hi);
      if (absl::Status s = ApplyNodeReport(*FindRun(id), node, world_ranks, statuses, events);
          !s.ok()) {
        return s;
      }
    }
  }
  if (applied < reports.size()) WarnUnplacedReports(node, reports);
  if (!drained_.empty()) {  // only a sweep changes by_node_
    if (absl::Status s = SweepDrained(events); !s.ok()) return s;
    placed = by_node_.find(node);  // again: the sweep may have forgotten runs
  }
  if (placed == by_node_.end()) return absl::OkStatus();
  for (const auto& [id, world_ranks] : placed->second) {
    const ActiveRun& run = *FindRun(id);
    if (run.draining) continue;
    for (int w : world_ranks) {
      const v1::RankPlacement& p = run.placement[w];
      v1::RankLaunch* launch = resp->add_ranks();
      launch->set_job_id(run.id.job_id);
      launch->set_attempt(run.id.attempt);
      launch->set_world_rank(p.world_rank());
      launch->set_world_size(static_cast<int>(run.placement.size()));
      launch->set_slot(p.slot());
      launch->set_gpu(p.gpu());
      launch->set_preemption_grace_s(run.preemption_grace_s);
    }
  }
  return absl::OkStatus();
}

void Supervisor::WarnUnplacedReports(const std::string& node,
                                     const std::vector<const v1::RankStatus*>& sorted) const {
  auto placed = by_node_.find(node);
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && !ReportBefore{}(sorted[i - 1], sorted[i])) continue;  // one line per run
    const RunId id{sorted[i]->job_id(), sorted[i]->attempt()};
    if (placed != by_node_.end() && placed->second.count(id) > 0) continue;
    if (runs_.count(id) > 0) {
      DHP_LOG(WARNING) << "node " << node << " reports ranks of run " << id.Key()
                       << ", none of which is placed there; ignored";
    }
  }
}

absl::Status Supervisor::ApplyNodeReport(ActiveRun& run, const std::string& node,
                                         const std::vector<int>& placed,
                                         std::vector<const v1::RankStatus*>& statuses,
                                         std::vector<v1::Event>* events) {
  // The first failure applied names the run's failure. When one report holds several, a rank
  // killed by a signal (OOM killer, an operator) is the likely cause and its peers' errors
  // ("connection reset" in a collective) the consequence: it goes first.
  std::stable_sort(statuses.begin(), statuses.end(),
                   [](const v1::RankStatus* a, const v1::RankStatus* b) {
                     return KilledFromOutside(*a) && !KilledFromOutside(*b);
                   });
  for (const v1::RankStatus* st : statuses) {
    if (run.draining) break;
    if (absl::Status s = ApplyRankStatus(run, *st, node, events); !s.ok()) return s;
  }
  if (!run.draining) {
    if (absl::Status s = CheckAgentKept(run, node, placed, statuses, events); !s.ok()) return s;
  }
  const int world = static_cast<int>(run.ranks.size());
  if (!run.draining && run.finished == world) {
    if (absl::Status s = SucceedRun(run, events); !s.ok()) return s;
  } else if (!run.draining && run.launched == world &&
             run.job_state == v1::JOB_STATE_SCHEDULED) {
    absl::Status s = Transition(run.id, events, [&](v1::Job& job, v1::Run&, int64_t now,
                                                    JobWrite& write) {
      return MoveJob(job, v1::JOB_STATE_STARTING, absl::StrCat("all ", world, " ranks launched"),
                     now, &write);
    });
    if (!s.ok()) return s;
    run.job_state = v1::JOB_STATE_STARTING;
  }
  if (run.draining && run.drain_nodes.count(node) > 0) {
    bool running = false;
    for (const v1::RankStatus* st : statuses) {
      running = running || st->state() == v1::RANK_PROCESS_STATE_RUNNING;
    }
    if (!running) {
      run.drain_nodes.erase(node);
      if (run.drain_nodes.empty()) drained_.insert(run.id);
    }
  }
  return absl::OkStatus();
}

absl::Status Supervisor::CheckAgentKept(ActiveRun& run, const std::string& node,
                                        const std::vector<int>& placed,
                                        const std::vector<const v1::RankStatus*>& statuses,
                                        std::vector<v1::Event>* events) {
  // An agent reports every rank it started for as long as the run wants it; a launched rank
  // that has not exited and is missing from its report died with an agent that restarted.
  std::vector<int> reported;  // sorted: one allocation per run and beat, not one per rank
  reported.reserve(statuses.size());
  for (const v1::RankStatus* st : statuses) reported.push_back(st->world_rank());
  std::sort(reported.begin(), reported.end());
  std::vector<int> lost;
  for (int w : placed) {
    const RankView& r = run.ranks[w];
    if (r.launched && !r.exited && !std::binary_search(reported.begin(), reported.end(), w)) {
      lost.push_back(w);
    }
  }
  if (lost.empty()) return absl::OkStatus();
  const std::string reason = absl::StrCat(
      "the agent on node ", node, " no longer reports rank", lost.size() > 1 ? "s " : " ",
      absl::StrJoin(lost, ", "), ", which it had launched: the agent restarted and its ranks "
      "ended with it (not counted as a restart)");
  return FailRun(run, reason, /*counted=*/false, events);
}

absl::Status Supervisor::ApplyRankStatus(ActiveRun& run, const v1::RankStatus& st,
                                         const std::string& node_id,
                                         std::vector<v1::Event>* events) {
  const int w = st.world_rank();
  if (w < 0 || w >= static_cast<int>(run.ranks.size()) ||
      run.placement[w].node_id() != node_id) {
    DHP_LOG(WARNING) << "node " << node_id << " reports rank " << w << " of " << run.id.job_id
                     << " attempt " << run.id.attempt << ", which is not placed there; ignored";
    return absl::OkStatus();
  }
  RankView& rank = run.ranks[w];
  if (!rank.launched) {
    rank.launched = true;
    ++run.launched;
  }
  if (st.state() != v1::RANK_PROCESS_STATE_EXITED || rank.exited) return absl::OkStatus();
  rank.exited = true;
  rank.exit_code = st.exit_code();
  rank.signal = st.signal();
  rank.stopped_by_agent = st.stopped_by_agent();
  if (st.exit_code() == 0 && st.signal() == 0) ++run.finished;
  if (st.exit_code() == kRankExitPreempted && st.signal() == 0) {
    // Every rank checkpointed at one step and the shards were reported before any exited
    // (job_rank.h): the next attempt resumes there, and no restart is spent.
    const std::string why =
        run.preempt_reason.empty() ? "a SIGTERM reached the job" : run.preempt_reason;
    return FailRun(run,
                   absl::StrCat("preempted: rank ", w, " on node ", node_id, " stopped after ",
                                why, ", every rank having checkpointed first (not counted as a "
                                "restart)"),
                   /*counted=*/false, events, v1::RUN_STATE_PREEMPTED);
  }
  if ((st.exit_code() == 0 && st.signal() == 0) || st.stopped_by_agent()) return absl::OkStatus();
  std::string reason = absl::StrCat("rank ", w, " on node ", node_id);
  if (st.signal() != 0) {
    absl::StrAppend(&reason, " was killed by signal ", st.signal(), " (", strsignal(st.signal()),
                    ")");
  } else {
    absl::StrAppend(&reason, " exited with code ", st.exit_code());
  }
  const std::string last = LastLine(st.log_tail());
  if (!last.empty()) absl::StrAppend(&reason, ": ", last);
  return FailRun(run, reason, true, events);
}

// ---- run endings ----------------------------------------------------------------------------

absl::Status Supervisor::SucceedRun(ActiveRun& run, std::vector<v1::Event>* events) {
  absl::Status s = Transition(run.id, events, [&](v1::Job& job, v1::Run& stored, int64_t now,
                                                  JobWrite& write) {
    if (absl::Status s = MoveJobToRunning(job, "training", now, &write); !s.ok()) return s;
    const std::string reason = absl::StrCat("all ", run.ranks.size(), " ranks finished at step ",
                                            std::max<int64_t>(run.max_step, 0));
    RecordSteps(run, job, stored);
    MoveRun(job, stored, v1::RUN_STATE_SUCCEEDED, reason, now, &write);
    return MoveJob(job, v1::JOB_STATE_SUCCEEDED, reason, now, &write);
  });
  if (!s.ok()) return s;
  run.job_state = v1::JOB_STATE_SUCCEEDED;
  StartDraining(run);
  return absl::OkStatus();
}

absl::Status Supervisor::FailRun(ActiveRun& run, const std::string& reason, bool counted,
                                 std::vector<v1::Event>* events) {
  return FailRun(run, reason, counted, events, v1::RUN_STATE_FAILED);
}

absl::Status Supervisor::FailRun(ActiveRun& run, const std::string& reason, bool counted,
                                 std::vector<v1::Event>* events, v1::RunState end) {
  v1::Job requeued;  // the job after the transition, when it went back to the queue
  absl::Status s = Transition(run.id, events, [&](v1::Job& job, v1::Run& stored, int64_t now,
                                                  JobWrite& write) {
    RecordSteps(run, job, stored);
    MoveRun(job, stored, end, reason, now, &write);
    const int max_restarts = job.spec().restart().max_restarts();
    if (counted && job.restart_count() >= max_restarts) {
      const std::string why =
          max_restarts == 0
              ? absl::StrCat(reason, "; automatic restarts are off (restart.max_restarts 0)")
              : absl::StrCat(reason, "; all ", max_restarts, " restarts used");
      return MoveJob(job, v1::JOB_STATE_FAILED, why, now, &write);
    }
    if (absl::Status s = MoveJob(job, v1::JOB_STATE_RESTARTING, reason, now, &write); !s.ok()) {
      return s;
    }
    if (counted) job.set_restart_count(job.restart_count() + 1);
    job.set_current_attempt(job.current_attempt() + 1);
    v1::Run& next = write.runs.emplace_back();
    next.set_job_id(job.id());
    next.set_attempt(job.current_attempt());
    next.set_state(v1::RUN_STATE_PENDING);
    *next.mutable_create_time() = MicrosToTimestamp(now);
    std::string from = "from the start (no complete checkpoint)";
    if (std::optional<v1::Checkpoint> c = checkpoints_.ResumePoint(job.id())) {
      next.set_resume_checkpoint_id(c->id());
      next.set_start_step(c->step());
      from = absl::StrCat("from checkpoint ", c->id(), " at step ", c->step());
    }
    const std::string why =
        counted ? absl::StrCat("restart ", job.restart_count(), " of ", max_restarts, " ", from)
                : absl::StrCat("retry ", from);
    if (absl::Status s = MoveJob(job, v1::JOB_STATE_QUEUED, why, now, &write); !s.ok()) return s;
    write.events.push_back(JobEvent(job, now, "run.state", "", "PENDING", "attempt created"));
    requeued = job;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  run.job_state = v1::JOB_STATE_FAILED;
  StartDraining(run);
  if (!requeued.id().empty()) OnJobQueued(requeued);
  return absl::OkStatus();
}

void Supervisor::StartDraining(ActiveRun& run) {
  run.draining = true;
  run.drain_nodes.clear();
  for (const v1::RankPlacement& p : run.placement) {
    if (lost_nodes_.count(p.node_id()) == 0) run.drain_nodes.insert(p.node_id());
  }
  if (run.drain_nodes.empty()) drained_.insert(run.id);
}

absl::Status Supervisor::SweepDrained(std::vector<v1::Event>* events) {
  std::set<RunId> ids;
  ids.swap(drained_);
  for (auto k = ids.begin(); k != ids.end(); ++k) {
    const RunId id = *k;
    auto it = runs_.find(id);
    if (it == runs_.end() || !it->second.draining || !it->second.drain_nodes.empty()) continue;
    ActiveRun done = it->second;  // a copy: EraseRun reads its placement
    EraseRun(id);
    scheduler_.Release(id.Key());
    dirty_ = true;
    if (absl::Status s = FinishDrain(done, events); !s.ok()) {
      drained_.insert(std::next(k), ids.end());  // swept by the next call
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Supervisor::FinishDrain(const ActiveRun& run, std::vector<v1::Event>* events) {
  if (!run.cancelling) return absl::OkStatus();
  absl::StatusOr<Loaded> loaded = Load(run.id);
  if (!loaded.ok() || loaded->job.state() != v1::JOB_STATE_CANCELLING) return absl::OkStatus();
  return Transition(*std::move(loaded), events, [&](v1::Job& job, v1::Run& stored, int64_t now,
                                                   JobWrite& write) {
    const std::string reason = job.message().empty() ? "cancelled" : job.message();
    RecordSteps(run, job, stored);
    MoveRun(job, stored, v1::RUN_STATE_CANCELLED, reason, now, &write);
    return MoveJob(job, v1::JOB_STATE_CANCELLED, absl::StrCat(reason, "; every rank has stopped"),
                   now, &write);
  });
}

}  // namespace dhp::controller
