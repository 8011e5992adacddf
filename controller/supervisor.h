// Supervisor: runs jobs. Turns queued jobs into placed runs (Scheduler), tells each node's agent
// which rank processes it should run (heartbeat responses), follows the ranks' reports (process
// states from agents, progress and checkpoints from ranks) and drives every job and run through
// its states: SCHEDULED -> STARTING -> RUNNING -> SUCCEEDED, automatic restarts from the latest
// complete checkpoint (RESTARTING -> QUEUED, up to restart.max_restarts, then FAILED), and
// CANCELLING -> CANCELLED once the agents report the ranks gone.
//
// A run fails when one of its ranks exits non-zero (not stopped by its agent), when a node
// holding its ranks is LOST, when a node's agent stops reporting ranks it had launched (it
// restarted and they ended with it; the next attempt is not counted as a restart), when its step has not advanced for restart.stall_timeout_s (the
// event names the ranks that fell behind and what each rank's watchdog says it waits on), or when
// a rank finds its resume checkpoint corrupt (that restart is not counted: the checkpoint is
// marked CORRUPT and the next attempt takes the one before).
//
// Slots stay allocated to an ended run until every node holding its ranks has reported them
// gone (or is LOST), so a new run never shares a device with processes still exiting.
//
// Checkpoint bookkeeping (shards, completion, keep-latest, corruption, where a run writes and
// resumes) is the CheckpointTracker's; the Supervisor hands it reports of current runs only.
//
// Durable state is the Store (jobs, runs with their placements, checkpoints, events); the
// in-memory view (queue, allocations, per-rank reports) is rebuilt by Recover() after a
// controller restart, and agents re-report their ranks with the next heartbeat.
//
// Thread-safety: not thread-safe; the Controller calls it only on its loop thread.
#ifndef DHP_CONTROLLER_SUPERVISOR_H_
#define DHP_CONTROLLER_SUPERVISOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/check.h"
#include "common/clock.h"
#include "controller/checkpoint_tracker.h"
#include "controller/run_id.h"
#include "controller/scheduler.h"
#include "controller/store.h"
#include "dhp/v1/service.pb.h"

namespace dhp::controller {

struct SupervisorOptions {
  std::string checkpoint_root;  // absolute; runs write under <root>/<directory>/<job>/attempt-<a>
  int max_waiting_messages = 100;  // queued jobs per pass whose "why waiting" message is kept
  // A running run's step figures are written at most this often (SaveProgress), all runs due in
  // one transaction; reads in between see them from memory (OverlayProgress). Reaching RUNNING,
  // the last step and every transition are written at once.
  int64_t progress_save_micros = 30000000;
  // At most this many runs per SaveProgress call (the controller calls it every persist_ms),
  // so that one call holds the loop about a millisecond, not a whole backlog's worth. About
  // 50 µs a run (bench/progress_save_bench): 25 a call is ~1.2 ms, and 1,000 runs a second
  // (every 25 ms) is 3x what 10,000 runs saved every 30 s need.
  int progress_save_batch = 25;
  // Progress reports the ranks of all placed runs are asked to stay within, per second, in all
  // (heartbeat.progress_reports_per_s): each rank is told to report at most once per
  // placed ranks / this many seconds (ReportProgressResponse.next_report_ms). 0: not asked.
  int progress_reports_per_s = 4000;
};

// One rank of an active run, as its agent and the rank itself last reported.
struct RankView {
  bool launched = false;          // the agent reported the process (running or exited)
  bool exited = false;
  int exit_code = 0;
  int signal = 0;
  bool stopped_by_agent = false;
  int64_t step = -1;              // newest step the rank reported; -1: none yet
  int64_t report_micros = 0;      // when it last reported progress
  int asked_report_ms = 0;        // the pace its last answer asked for (next_report_ms)
  std::string waiting_on;         // its watchdog's description while a step takes long
  std::map<std::string, double> metrics;  // its newest ReportProgressRequest.metrics
};

struct ActiveRun {
  RunId id;
  std::vector<v1::RankPlacement> placement;  // by world rank
  std::vector<RankView> ranks;
  int launched = 0;                 // ranks with RankView::launched, kept as reports arrive
  int finished = 0;                 // ranks that exited with code 0 and no signal
  v1::JobState job_state = v1::JOB_STATE_SCHEDULED;  // cached from the store
  int64_t start_step = 0;           // the step it resumes from
  int64_t max_step = -1;
  double loss = 0;                  // newest reported by a rank with a text role
  int64_t total_steps = 0;
  double tokens_per_second = 0;
  double step_seconds = 0;
  int64_t last_advance_micros = 0;  // when max_step last grew (or the run was placed)
  int64_t placed_micros = 0;        // when it was placed (or recovered after a restart)
  int64_t last_persist_micros = 0;
  bool progress_unsaved = false;    // step figures newer than the store's (SaveProgress)
  int stall_timeout_s = 600;
  int launch_timeout_s = 120;       // every rank must be reported launched by then
  bool draining = false;             // ended: its ranks must go; slots held until they have
  bool cancelling = false;           // drained -> the job becomes CANCELLED
  // Checkpoint now (CheckpointJob): the ranks are told to write a checkpoint at the first step
  // boundary at or after this step, until a shard of such a step is reported. Stored too
  // (Run.checkpoint_requested_at_step, until such a checkpoint is COMPLETE or the run ends), so
  // that Recover asks again after a controller restart.
  std::optional<int64_t> checkpoint_at;
  // Preempt (a drain of a node holding its ranks): the ranks are told to checkpoint at their
  // next step boundary and exit kRankExitPreempted; a run still not ended at the deadline is
  // stopped without that checkpoint. In memory: the Controller asks again after a restart for
  // the runs still on cordoned nodes.
  std::string preempt_reason;  // "": not asked
  int64_t preempt_deadline_micros = 0;
  int preemption_grace_s = 120;
  std::set<std::string> drain_nodes;  // nodes that have not yet reported the ranks gone
};

// "training: step 12 of 100 done": a running job's message, kept current as steps are persisted.
std::string TrainingLine(const ActiveRun& run);
// Copies the run's step figures (step, loss, totals, throughput) into the job and its stored run,
// exact at every transition; nothing when the run has reported no step.
void RecordSteps(const ActiveRun& run, v1::Job& job, v1::Run& stored);

class Supervisor {
 public:
  Supervisor(Store& store, const Clock& clock, SupervisorOptions options);

  // Rebuilds the queue, allocations and active runs from the store. Call once, before serving.
  absl::Status Recover();

  // A spec's demand as CheckAdmission computed it, for OnJobQueued to take instead of computing
  // it again: it depends on the spec alone, but for the job id and submit order, given then.
  class Admitted {
    friend class Supervisor;
    JobDemand demand;
    std::vector<v1::JobSpec> layouts;
  };

  // FAILED_PRECONDITION with the reason when the job could never fit the registered cluster.
  // `admitted`, if given: the demand, for OnJobQueued.
  absl::Status CheckAdmission(const v1::JobSpec& spec, Admitted* admitted = nullptr) const;

  // After the job (re)entered QUEUED: submit, resume. `admitted`: from CheckAdmission of the
  // job's spec, as stored.
  void OnJobQueued(const v1::Job& job);
  void OnJobQueued(const v1::Job& job, Admitted admitted);
  // While alive, the jobs in `jobs` are queued (OnJobQueued) but not stored yet: the caller
  // stores them after Decide, together with the pass's notes (SubmitJob's batch: one
  // transaction). A note of why one of them waits goes into its proto, not a write of its own.
  class FreshJobs {
   public:
    FreshJobs(Supervisor& sup, const std::vector<v1::Job*>& jobs);
    ~FreshJobs();
    FreshJobs(const FreshJobs&) = delete;
    FreshJobs& operator=(const FreshJobs&) = delete;

   private:
    Supervisor& sup_;
  };
  // A job OnJobQueued took whose first write was then not stored: it leaves the queue, and the
  // next pass goes over the whole queue (the last one counted it).
  void Unqueue(const v1::Job& job);
  // `job` as OnJobQueued got it: while it is still queued, the message it has in the store now
  // (the scheduling pass's note of why it waits, else its own); nullopt once the job left the
  // queue (placed, cancelled), when the store has more that changed.
  std::optional<std::string> QueuedMessage(const v1::Job& job) const;
  // After a user cancel: QUEUED -> CANCELLED leaves the queue; CANCELLING drains the run.
  absl::Status OnJobCancelled(const v1::Job& job, std::vector<v1::Event>* events);
  // CheckpointJob: asks the ranks of the job's running attempt for a checkpoint at their next
  // step boundary (an event records it). FAILED_PRECONDITION unless the job is STARTING or
  // RUNNING; a request while one is pending joins it.
  absl::Status RequestCheckpoint(const std::string& job_id, v1::CheckpointJobResponse* resp,
                                 std::vector<v1::Event>* events);

  // DrainNode, after the node was cordoned: asks every running attempt with ranks on the node
  // to checkpoint at its next step boundary and stop (an event each; `why` says who asked);
  // an attempt that has not finished a step yet has nothing to save and ends at once. Both end
  // PREEMPTED and their jobs are queued again, not counted as restarts. Appends the job ids.
  absl::Status PreemptRunsOn(const std::string& node_id, const std::string& why,
                             std::vector<std::string>* job_ids, std::vector<v1::Event>* events);

  // Node inventory: a registration, a state change, a cordon or a stopping agent of a node
  // (cordoned, stopping and LOST nodes get no new ranks).
  void OnNodeChanged(const v1::Node& node);
  // A node went LOST: every run with ranks on it fails; draining runs stop waiting for it.
  absl::Status OnNodeLost(const std::string& node_id, std::vector<v1::Event>* events);

  // A heartbeat (after NodeTracker accepted it): processes the reported rank processes and fills
  // the ranks the node should run.
  absl::Status OnHeartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp,
                           std::vector<v1::Event>* events);
  absl::Status OnProgress(const v1::ReportProgressRequest& req, v1::ReportProgressResponse* resp,
                          std::vector<v1::Event>* events);
  // A report relayed in node_id's heartbeat (HeartbeatRequest.progress): PERMISSION_DENIED
  // when the rank of an active run is placed on another node, else as OnProgress.
  absl::Status OnRelayedProgress(const std::string& node_id, const v1::ReportProgressRequest& req,
                                 v1::ReportProgressResponse* resp,
                                 std::vector<v1::Event>* events);
  absl::Status OnCheckpointShard(const v1::ReportCheckpointRequest& req,
                                 v1::ReportCheckpointResponse* resp,
                                 std::vector<v1::Event>* events);
  absl::Status OnCheckpointRejected(const v1::RejectCheckpointRequest& req,
                                    std::vector<v1::Event>* events);

  // Places queued jobs when something changed since the last pass (cheap otherwise). When only
  // new jobs were queued, only they are tried (Scheduler::ScheduleAppended), so that a submit
  // costs the same with 10 or 10,000 jobs waiting.
  absl::Status Schedule(std::vector<v1::Event>* events);
  // Schedule in two steps, for a caller that stores the pass's notes with writes of its own:
  // Decide runs the pass (the scheduler's allocations, the queue, the notes remembered) and
  // stores nothing; PlaceDecided then places each decision (a transaction each; OK, and the
  // entry dropped, for a job that turns out not to be stored). Notes that were not stored must
  // be given to NotesLost. nullopt: nothing changed since the last pass.
  struct Pass {
    std::vector<PlacementDecision> placed;
    std::vector<JobWrite> notes;  // one per waiting job whose stored message changes
  };
  std::optional<Pass> Decide();
  absl::Status PlaceDecided(const Pass& pass, std::vector<v1::Event>* events);
  void NotesLost(const std::vector<JobWrite>& notes);
  // Periodic: fails runs whose step has not advanced for their stall timeout, and runs with
  // ranks their agents have not reported launched within the launch timeout; stops preempted
  // runs whose ranks have not stopped within restart.preemption_grace_s.
  absl::Status CheckStalls(std::vector<v1::Event>* events);
  // Periodic: writes the step figures of the running runs not saved for progress_save_micros,
  // in one transaction (at most progress_save_batch runs per call; the rest in the next).
  // Visits only the due runs (progress_due_). `all`: every unsaved one, whenever saved last
  // (at shutdown).
  absl::Status SaveProgress(std::vector<v1::Event>* events, bool all = false);
  // The job's step figures and "training: ..." message, and its current run's (when given),
  // as the ranks last reported them when newer than the stored ones. Every read of a job that
  // may be running goes through this.
  void OverlayProgress(v1::Job& job, v1::Run* current_run) const;

  // Checkpoint bookkeeping: the caller takes its manifests to write and directories to delete.
  CheckpointTracker& checkpoints() { return checkpoints_; }

  // Whether the attempt still has (or may still get) rank processes: placed and not drained.
  bool HasProcesses(const RunId& id) const;

  // The live per-rank view of the job's current run (GetJobResponse.ranks), if placed.
  void DescribeRanks(const v1::Job& job, v1::GetJobResponse* resp) const;

  const Scheduler& scheduler() const { return scheduler_; }
  const std::map<RunId, ActiveRun>& runs() const { return runs_; }
  size_t queue_size() const { return queue_.size(); }
  // The demand run `id` is queued with; null when it is not queued (for tests).
  const JobDemand* queued_demand(const RunId& id) const {
    auto it = queue_.find(id.Key());
    return it != queue_.end() ? &it->second.demand : nullptr;
  }
  // Placed ranks that heartbeats have looked at, in all; a heartbeat looks only at the ranks
  // placed on its own node (for tests).
  int64_t ranks_visited() const { return ranks_visited_; }
  // Runs SaveProgress looked at, for tests: the due ones, not every run.
  int64_t progress_runs_visited() const { return progress_runs_visited_; }
  // ReportProgressResponse.next_report_ms for every rank now: the placed ranks spread over
  // progress_reports_per_s (0 when that is 0).
  int NextReportMs() const;
  // Scheduling passes over the whole queue, and over only the jobs queued since (for tests).
  int64_t full_passes() const { return full_passes_; }
  int64_t appended_passes() const { return appended_passes_; }

 private:
  ThreadChecker loop_;  // the controller's loop thread: every entry point checks it
  struct Loaded {
    v1::Job job;
    v1::Run run;
  };
  absl::StatusOr<Loaded> Load(const RunId& id);
  // One transition of a run and its job, the only way the Supervisor changes them: `change`
  // moves them (MoveJob / MoveRun into the write) or updates their fields, and may add rows
  // (the next attempt's run); then the job, the run and all `change` added are committed in
  // one transaction and the events appended to `events`. When `change` fails nothing is
  // written. The first form loads them (FAILED_PRECONDITION when the attempt is not current).
  using Change =
      absl::FunctionRef<absl::Status(v1::Job& job, v1::Run& run, int64_t now, JobWrite& write)>;
  absl::Status Transition(const RunId& id, std::vector<v1::Event>* events, Change change);
  absl::Status Transition(Loaded loaded, std::vector<v1::Event>* events, Change change);
  absl::Status Place(const PlacementDecision& decision, std::vector<v1::Event>* events);
  // Remembers why the job waits and, when its stored message says otherwise, appends the write
  // that changes it (a pass's notes are committed together), or changes a fresh job's proto.
  void NoteWaiting(const std::string& job_id, const std::string& why,
                   std::vector<JobWrite>* writes);
  // Ends an active run as FAILED and restarts the job or fails it. `counted`: uses a restart.
  absl::Status FailRun(ActiveRun& run, const std::string& reason, bool counted,
                       std::vector<v1::Event>* events, v1::RunState end);
  absl::Status FailRun(ActiveRun& run, const std::string& reason, bool counted,
                       std::vector<v1::Event>* events);
  absl::Status SucceedRun(ActiveRun& run, std::vector<v1::Event>* events);
  // Ends a preempted run whose grace period is over (PREEMPTED, not counted).
  absl::Status CheckPreemptGrace(ActiveRun& run, int64_t now, std::vector<v1::Event>* events);
  // One node's report on one run: applies the statuses, moves the job when all ranks launched or
  // finished, and counts the node as confirmed when the run is draining.
  // Logs the runs in `sorted` (a heartbeat's reports, by run) that are active but have no rank
  // placed on `node`: their reports were ignored.
  void WarnUnplacedReports(const std::string& node,
                           const std::vector<const v1::RankStatus*>& sorted) const;
  absl::Status ApplyNodeReport(ActiveRun& run, const std::string& node,
                               const std::vector<int>& placed,
                               std::vector<const v1::RankStatus*>& statuses,
                               std::vector<v1::Event>* events);
  // Ends the run, not counted, when the node's agent no longer reports ranks of `placed` (the
  // world ranks on that node) that it had launched and that have not exited: it restarted.
  absl::Status CheckAgentKept(ActiveRun& run, const std::string& node,
                              const std::vector<int>& placed,
                              const std::vector<const v1::RankStatus*>& statuses,
                              std::vector<v1::Event>* events);
  absl::Status ApplyRankStatus(ActiveRun& run, const v1::RankStatus& status,
                               const std::string& node_id, std::vector<v1::Event>* events);
  void StartDraining(ActiveRun& run);
  // Releases and forgets every draining run whose nodes have all confirmed; completes cancels.
  absl::Status SweepDrained(std::vector<v1::Event>* events);
  absl::Status FinishDrain(const ActiveRun& run, std::vector<v1::Event>* events);
  absl::Status PersistProgress(ActiveRun& run, bool to_running, std::vector<v1::Event>* events);
  absl::Status Commit(JobWrite& write, std::vector<v1::Event>* events);
  // Recover: a live job whose current run cannot be loaded ends (FAILED, or CANCELLED when it
  // was CANCELLING) with `why` in its message, so that recovery goes on and it can be resumed.
  void EndUnrecoverable(v1::Job job, const absl::Status& why, int64_t now);
  // runs_ and the by-node index change together, through these two.
  void AddRun(ActiveRun run);
  void EraseRun(const RunId& id);
  absl::Status CheckLaunched(ActiveRun& run, int64_t now, std::vector<v1::Event>* events);
  std::string StallReason(const ActiveRun& run, int64_t now) const;
  ActiveRun* FindRun(const RunId& id) { return FindRun(id.job_id, id.attempt); }
  ActiveRun* FindRun(std::string_view job_id, int attempt);

  Store& store_;
  const Clock& clock_;
  const SupervisorOptions options_;
  Scheduler scheduler_;
  CheckpointTracker checkpoints_;
  struct Queued {
    RunId id;
    JobDemand demand;  // demand.job_id is id.Key(), the Scheduler's allocation key
    // An elastic job's layouts (common/elastic.h), index = PlacementDecision::layout; empty
    // for a job that runs only on its spec's layout.
    std::vector<v1::JobSpec> layouts;
  };
  // The demand of `spec` as queued: with its elastic layouts, if it has any.
  Queued QueuedFor(const RunId& id, const v1::JobSpec& spec, int64_t submit_seq) const;
  std::map<std::string, Queued> queue_;  // QUEUED jobs by allocation key (RunId::Key())
  std::map<RunId, ActiveRun> runs_;
  // runs_ hashed, for the lookups every report and heartbeat makes (a find in runs_ is ~14
  // string comparisons at 10,000 runs, and a RunId to look up copies the job id). The keys
  // view runs_'s own keys, which live as long as their entries.
  struct RunRef {
    std::string_view job_id;
    int attempt = 0;
    friend bool operator==(const RunRef& a, const RunRef& b) {
      return a.attempt == b.attempt && a.job_id == b.job_id;
    }
  };
  struct RunRefHash {
    size_t operator()(const RunRef& r) const {
      return std::hash<std::string_view>()(r.job_id) ^
             (static_cast<size_t>(r.attempt) * 0x9e3779b97f4a7c15ULL);
    }
  };
  std::unordered_map<RunRef, ActiveRun*, RunRefHash> run_index_;
  // node id -> run -> world ranks placed there, for every run in runs_ (draining included):
  // a heartbeat, a lost node, touch only their own node's runs. Hashed: a heartbeat finds its
  // node without the ~14 string comparisons of an ordered map at 10,000 nodes; nothing
  // iterates it.
  std::unordered_map<std::string, std::map<RunId, std::vector<int>>> by_node_;
  std::unordered_map<std::string_view, v1::Job*> fresh_;  // by id, from FreshJobs
  std::set<RunId> drained_;  // draining runs whose nodes have all confirmed; to sweep
  // (when due, run) for the runs whose progress_unsaved turned true: SaveProgress takes the
  // due ones from the front instead of visiting every run. An entry whose run was saved or
  // ended by another path meanwhile is dropped when it comes up.
  std::set<std::pair<int64_t, RunId>> progress_due_;
  int64_t placed_ranks_ = 0;  // the ranks of every run in runs_
  int64_t ranks_visited_ = 0;
  int64_t progress_runs_visited_ = 0;
  std::map<std::string, std::string> waiting_;  // job id -> why it waits (last persisted)
  std::set<std::string> lost_nodes_;
  bool dirty_ = true;  // nodes, slots or the queue's jobs changed since the last pass
  std::vector<std::string> appended_;  // allocation keys of jobs queued since the last pass
  int64_t full_passes_ = 0;
  int64_t appended_passes_ = 0;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_SUPERVISOR_H_
