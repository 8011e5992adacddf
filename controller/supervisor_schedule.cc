// The Supervisor's queue and scheduling: the demands of queued jobs (with an elastic job's
// layouts), admission at submit, the scheduling pass, and placing a run where it decided.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/elastic.h"
#include "common/job_layout.h"
#include "common/logging.h"
#include "common/memory_plan.h"
#include "controller/job_events.h"
#include "controller/supervisor.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

// Puts an elastic job's chosen layout into its spec; " on layout NEW (was OLD), within its
// elastic bounds" when that changed it, else "".
std::string ElasticRelayout(const v1::JobSpec& chosen, v1::Job* job) {
  if (LayoutForSpec(chosen).DebugString() == LayoutForSpec(job->spec()).DebugString()) return "";
  const std::string change = DescribeLayoutChange(job->spec(), chosen);
  *job->mutable_spec() = chosen;
  return change + ", within its elastic bounds";
}

// "node-a: cpu 0,1; node-b: gpu 0,1,2,3"
std::string DescribePlacement(const std::vector<v1::RankPlacement>& placement) {
  std::map<std::string, std::string> by_node;
  std::map<std::string, bool> gpu;
  for (const v1::RankPlacement& p : placement) {
    std::string& slots = by_node[p.node_id()];
    absl::StrAppend(&slots, slots.empty() ? "" : ",", p.slot());
    gpu[p.node_id()] = p.gpu();
  }
  std::string out;
  for (const auto& [node, slots] : by_node) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", node, ": ", gpu[node] ? "gpu " : "cpu ", slots);
  }
  return out;
}

}  // namespace

Supervisor::Queued Supervisor::QueuedFor(const RunId& id, const v1::JobSpec& spec,
                                         int64_t submit_seq) const {
  Queued q{id, {}, {}};
  if (spec.has_elastic()) {
    q.layouts = ElasticLayouts(spec, SpecOptions{options_.checkpoint_root, nullptr});
  }
  if (q.layouts.size() > 1) {
    q.demand = DemandForLayouts(id.Key(), q.layouts, submit_seq);
  } else {
    q.layouts.clear();
    q.demand = DemandForSpec(id.Key(), spec, submit_seq);
  }
  return q;
}

absl::Status Supervisor::CheckAdmission(const v1::JobSpec& spec, Admitted* admitted) const {
  DHP_CHECK_ON_THREAD(loop_);
  Queued q = QueuedFor(RunId{}, spec, 0);
  const JobDemand& demand = q.demand;
  absl::Status s = scheduler_.CheckFeasible(demand);
  if (s.ok()) {
    if (admitted != nullptr) {
      admitted->demand = std::move(q.demand);
      admitted->layouts = std::move(q.layouts);
    }
    return s;
  }
  std::string message = absl::StrCat("the job can never fit this cluster: ", s.message());
  // Where memory is part of why (some GPU is too small for a rank; CPU slots are not checked),
  // the planner's breakdown says what the bytes are for.
  if (scheduler_.MemoryExcludesNodes(demand)) {
    if (std::optional<MemoryPlan> plan = MemoryPlanForSpec(spec, PlanDevice::kGpu)) {
      absl::StrAppend(&message, ". The ", MemoryPlanSummary(*plan),
                      ". `dhpctl plan -f SPEC --gpu MODEL` compares the layouts that fit");
    }
  }
  return absl::FailedPreconditionError(message);
}

void Supervisor::OnJobQueued(const v1::Job& job) {
  DHP_CHECK_ON_THREAD(loop_);
  const RunId id{job.id(), job.current_attempt()};
  queue_[id.Key()] = QueuedFor(id, job.spec(), job.submit_seq());
  appended_.push_back(id.Key());
}

void Supervisor::OnJobQueued(const v1::Job& job, Admitted admitted) {
  DHP_CHECK_ON_THREAD(loop_);
  const RunId id{job.id(), job.current_attempt()};
  const std::string key = id.Key();
  // As QueuedFor(id, job.spec(), job.submit_seq()) would have it.
  admitted.demand.job_id = key;
  admitted.demand.submit_seq = job.submit_seq();
  for (JobDemand& alternative : admitted.demand.alternatives) {
    alternative.job_id = key;
    alternative.submit_seq = job.submit_seq();
  }
  queue_[key] = Queued{id, std::move(admitted.demand), std::move(admitted.layouts)};
  appended_.push_back(key);
}

// ---- scheduling ---------------------------------------------------------------------------

absl::Status Supervisor::Schedule(std::vector<v1::Event>* events) {
  std::optional<Pass> pass = Decide();
  if (!pass.has_value()) return absl::OkStatus();
  if (absl::Status s = PlaceDecided(*pass, events); !s.ok()) {
    NotesLost(pass->notes);
    return s;
  }
  absl::Status noted_all = store_.CommitAll(pass->notes).status();  // one transaction
  if (!noted_all.ok()) NotesLost(pass->notes);
  return noted_all;
}

std::optional<Supervisor::Pass> Supervisor::Decide() {
  DHP_CHECK_ON_THREAD(loop_);
  if (queue_.empty()) appended_.clear();  // whatever was queued has left the queue
  if ((!dirty_ && appended_.empty()) || queue_.empty()) return std::nullopt;
  // Jobs queued since the last pass, when nothing else changed: decided without a pass over
  // the whole queue (the Scheduler checks that the result equals a full pass's, or declines).
  std::optional<ScheduleResult> quick;
  if (!dirty_) {
    std::vector<JobDemand> added;
    for (const std::string& key : appended_) {
      if (auto it = queue_.find(key); it != queue_.end()) added.push_back(it->second.demand);
    }
    quick = scheduler_.ScheduleAppended(added);
  }
  dirty_ = false;
  appended_.clear();
  ScheduleResult result;
  if (quick.has_value()) {
    result = *std::move(quick);
    ++appended_passes_;
  } else {
    std::vector<JobDemand> queue;
    queue.reserve(queue_.size());
    for (const auto& [key, queued] : queue_) queue.push_back(queued.demand);
    result = scheduler_.Schedule(queue);
    ++full_passes_;
  }
  Pass pass;
  pass.placed = std::move(result.placed);
  int noted = 0;
  for (const auto& [key, why] : result.waiting) {
    if (++noted > options_.max_waiting_messages) break;
    auto it = queue_.find(key);
    if (it == queue_.end()) continue;
    const std::string& job_id = it->second.id.job_id;
    if (waiting_[job_id] == why) continue;
    NoteWaiting(job_id, why, &pass.notes);
  }
  return pass;
}

absl::Status Supervisor::PlaceDecided(const Pass& pass, std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  for (const PlacementDecision& decision : pass.placed) {
    if (queue_.count(decision.job_id) == 0) {  // Unqueue'd since Decide: never stored
      scheduler_.Release(decision.job_id);
      continue;
    }
    if (absl::Status s = Place(decision, events); !s.ok()) {
      scheduler_.Release(decision.job_id);
      return s;
    }
  }
  return absl::OkStatus();
}

void Supervisor::NotesLost(const std::vector<JobWrite>& notes) {
  DHP_CHECK_ON_THREAD(loop_);
  for (const JobWrite& note : notes) waiting_.erase(note.job.id());  // noted again next pass
}

void Supervisor::Unqueue(const v1::Job& job) {
  DHP_CHECK_ON_THREAD(loop_);
  queue_.erase(RunId{job.id(), job.current_attempt()}.Key());
  waiting_.erase(job.id());
  dirty_ = true;
}

Supervisor::FreshJobs::FreshJobs(Supervisor& sup, const std::vector<v1::Job*>& jobs)
    : sup_(sup) {
  for (v1::Job* job : jobs) sup_.fresh_[job->id()] = job;
}

Supervisor::FreshJobs::~FreshJobs() { sup_.fresh_.clear(); }

std::optional<std::string> Supervisor::QueuedMessage(const v1::Job& job) const {
  DHP_CHECK_ON_THREAD(loop_);
  if (queue_.count(RunId{job.id(), job.current_attempt()}.Key()) == 0) return std::nullopt;
  auto it = waiting_.find(job.id());
  return it != waiting_.end() && !it->second.empty() ? it->second : job.message();
}

absl::Status Supervisor::Place(const PlacementDecision& decision, std::vector<v1::Event>* events) {
  auto queued = queue_.find(decision.job_id);  // the allocation key
  if (queued == queue_.end()) {  // cannot be: the scheduler places only what it was given
    DHP_LOG(ERROR) << "the scheduler placed run " << decision.job_id << ", which is not queued";
    scheduler_.Release(decision.job_id);
    return absl::OkStatus();
  }
  const RunId id = queued->second.id;
  const std::vector<v1::JobSpec>& layouts = queued->second.layouts;
  const v1::JobSpec* chosen =
      decision.layout < static_cast<int>(layouts.size()) ? &layouts[decision.layout] : nullptr;
  absl::StatusOr<Loaded> loaded = Load(id);
  if (!loaded.ok() || loaded->job.state() != v1::JOB_STATE_QUEUED) {
    queue_.erase(queued);  // stale queue entry: the job moved on meanwhile
    scheduler_.Release(decision.job_id);
    return absl::OkStatus();
  }
  ActiveRun active;
  active.id = id;
  for (size_t w = 0; w < decision.ranks.size(); ++w) {
    v1::RankPlacement& p = active.placement.emplace_back();
    p.set_world_rank(static_cast<int>(w));
    p.set_node_id(decision.ranks[w].node_id);
    p.set_slot(decision.ranks[w].slot);
    p.set_gpu(decision.ranks[w].gpu);
  }
  absl::Status s = Transition(*std::move(loaded), events, [&](v1::Job& job, v1::Run& run,
                                                              int64_t now, JobWrite& write) {
    run.mutable_placement()->Add(active.placement.begin(), active.placement.end());
    const double waited = std::max<int64_t>(0, now - TimestampToMicros(run.create_time())) / 1e6;
    run.set_queue_wait_seconds(waited);
    run.set_checkpoint_dir(checkpoints_.RunDirectory(job, id.attempt));
    run.set_world_size(static_cast<int>(decision.ranks.size()));
    const std::string relayout = chosen != nullptr ? ElasticRelayout(*chosen, &job) : "";
    const std::string reason =
        absl::StrFormat("placed on %s after %.1f s in the queue%s%s",
                        DescribePlacement(active.placement), waited,
                        decision.backfilled ? " (backfilled)" : "", relayout);
    MoveRun(job, run, v1::RUN_STATE_STARTING, reason, now, &write);
    active.start_step = run.start_step();
    active.stall_timeout_s = job.spec().restart().stall_timeout_s();
    active.launch_timeout_s = job.spec().restart().launch_timeout_s();
    active.preemption_grace_s = job.spec().restart().preemption_grace_s();
    return MoveJob(job, v1::JOB_STATE_SCHEDULED, reason, now, &write);
  });
  if (!s.ok()) return s;
  const int64_t now = clock_.NowMicros();
  active.ranks.resize(active.placement.size());
  active.job_state = v1::JOB_STATE_SCHEDULED;
  active.max_step = active.start_step;
  active.last_advance_micros = now;
  active.placed_micros = now;
  AddRun(std::move(active));
  queue_.erase(decision.job_id);
  waiting_.erase(id.job_id);
  return absl::OkStatus();
}

void Supervisor::NoteWaiting(const std::string& job_id, const std::string& why,
                             std::vector<JobWrite>* writes) {
  waiting_[job_id] = why;
  if (auto fresh = fresh_.find(job_id); fresh != fresh_.end()) {  // stored with the note
    fresh->second->set_message(why);
    return;
  }
  absl::StatusOr<v1::Job> job = store_.GetJob(job_id);
  if (!job.ok() || job->state() != v1::JOB_STATE_QUEUED || job->message() == why) return;
  JobWrite& write = writes->emplace_back();
  job->set_message(why);
  write.job = *std::move(job);
  write.labels_unchanged = true;  // the message alone changes
  write.spec_checked = true;      // as stored: it parsed, so its text is UTF-8
}

}  // namespace dhp::controller
