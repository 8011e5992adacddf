// Controller: the dhp control plane behind the API. Implements api::DhpService once for both
// transports.
//
// Threads: all durable state (Store, JobManager, NodeTracker) lives on one boost::asio
// io_context thread (the loop). Most gRPC calls arrive through Dispatch and run on the loop
// from start to end, holding no other thread (SubmitJob through SubmitJobAsync, in batches);
// REST calls and the synchronous gRPC methods post a closure onto the loop and wait for its
// result. Calls wait for the loop in two lanes (api::Lane): users' calls go ahead of the
// agents' and ranks', taking turns with them when both wait. Blocking calls (Watch, Kv waits, logs) wait
// on their own thread and visit the loop only to read. The rendezvous KV has its own lock; its
// changes run on the loop, which writes them to the store (reads and waits stay off it).
#ifndef DHP_CONTROLLER_CONTROLLER_H_
#define DHP_CONTROLLER_CONTROLLER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "api/service.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "common/spec_validate.h"
#include "controller/export_manager.h"
#include "controller/job_manager.h"
#include "controller/log_store.h"
#include "controller/loop_ledger.h"
#include "controller/node_tracker.h"
#include "controller/phase_timer.h"
#include "controller/rendezvous_kv.h"
#include "controller/run_metrics.h"
#include "common/serial_worker.h"
#include "controller/store.h"
#include "controller/supervisor.h"

namespace dhp::controller {

struct ControllerOptions {
  SpecOptions spec;                // spec.checkpoint_root is where runs write checkpoints
  NodeTrackerOptions nodes;
  int heartbeat_check_ms = 1000;   // how often silent nodes and stalled runs are looked for
  // How often due heartbeat times and step figures are written, a small batch each time
  // (NodeTrackerOptions::beat_save_batch, SupervisorOptions::progress_save_batch), each in a
  // loop turn of its own, so that no write holds the loop long: at 10,000 full nodes about 8
  // of each are due per 25 ms, a write of 1 ms (bench/results/control_plane.md).
  int persist_ms = 25;
  int kv_max_timeout_ms = 600000;  // longest Kv wait a caller may ask for
  int progress_reports_per_s = 4000;  // SupervisorOptions::progress_reports_per_s
  // Final jobs (with their runs, checkpoint records, events and logs; not their checkpoint
  // files) and node events are deleted this long after their last change; 0 keeps them.
  int64_t retention_s = 90 * 24 * 3600;
  int retention_sweep_ms = 3600 * 1000;  // how often the sweeper looks
  std::string log_root;            // rank logs (LogStore); empty: GetLogs/AppendLogs refused
  ExportOptions exports;           // ExportCheckpoint (controller/export_manager.h)
  // A second connection to the store's database (Store::OpenReader), outliving the controller:
  // a /metrics scrape reads its job rows and counts there, off the loop. nullptr: on the loop.
  Store* store_reader = nullptr;
  // A scrape computes the rows of this many placed runs (more, to finish a job), or copies 4x
  // as many nodes, per visit to the loop, so that heartbeats and API calls wait for one slice.
  int metrics_runs_per_slice = 64;
  // The per-rank /metrics families only while placed ranks <= this (0: never).
  int metrics_rank_series_max_ranks = 4096;
};

using api::kMaxRelayedProgress;
using api::kMaxHeartbeatRanks;

class Controller : public api::DhpService {
 public:
  Controller(Store& store, const Clock& clock, MetricsExposition& metrics,
             ControllerOptions options);
  ~Controller() override;

  // Starts the loop thread and the heartbeat check. Call once.
  void Start();
  // Ends open watch streams, stops the loop and joins it, then finishes the queued file work
  // (manifests, checkpoint deletions). Calls arriving later get UNAVAILABLE.
  void Stop();
  // Ends the rendezvous waits in flight (and refuses later Kv calls) with UNAVAILABLE, which
  // ranks retry against the next controller. Call before shutting the gRPC server down: its
  // shutdown waits for the calls in flight, and a wait may last minutes. Stop does it too.
  void CloseRendezvous() { kv_.Close(); }
  // Keys the rendezvous store holds for a job's attempt (0 once its run ended). For tests.
  size_t KvKeyCount(const std::string& job_id, int attempt) {
    return kv_.KeyCount(KvScopeKey{job_id, attempt});
  }
  // Rendezvous waits in flight (KvGet, KvWait). For tests.
  size_t KvWaiting() { return kv_.Waiting(); }

  absl::Status SubmitJob(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp) override;
  // Parses and validates spec_text on the calling thread and puts the spec in its place.
  absl::Status PrepareSubmitJob(v1::SubmitJobRequest* req) override;
  absl::Status GetJob(const v1::GetJobRequest& req, v1::GetJobResponse* resp) override;
  absl::Status ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) override;
  absl::Status CancelJob(const v1::CancelJobRequest& req, v1::CancelJobResponse* resp) override;
  absl::Status ResumeJob(const v1::ResumeJobRequest& req, v1::ResumeJobResponse* resp) override;
  absl::Status CheckpointJob(const v1::CheckpointJobRequest& req,
                             v1::CheckpointJobResponse* resp) override;
  absl::Status WatchJob(const v1::WatchJobRequest& req, api::EventSink& sink) override;
  absl::Status GetLogs(const v1::GetLogsRequest& req, v1::GetLogsResponse* resp) override;
  absl::Status ExportCheckpoint(const v1::ExportCheckpointRequest& req,
                                v1::ExportCheckpointResponse* resp) override;
  absl::Status GetExport(const v1::GetExportRequest& req, v1::GetExportResponse* resp) override;
  absl::Status ListExports(const v1::ListExportsRequest& req,
                           v1::ListExportsResponse* resp) override;
  absl::Status ListNodes(const v1::ListNodesRequest& req, v1::ListNodesResponse* resp) override;
  absl::Status DrainNode(const v1::DrainNodeRequest& req, v1::DrainNodeResponse* resp) override;
  absl::Status UncordonNode(const v1::UncordonNodeRequest& req,
                            v1::UncordonNodeResponse* resp) override;
  absl::Status RegisterNode(const v1::RegisterNodeRequest& req,
                            v1::RegisterNodeResponse* resp) override;
  absl::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) override;
  // Each heartbeat as its own Heartbeat, in order, all in one turn of the loop.
  absl::Status HeartbeatBatch(const v1::HeartbeatBatchRequest& req,
                              v1::HeartbeatBatchResponse* resp) override;
  absl::Status KvSet(const v1::KvSetRequest& req, v1::KvSetResponse* resp) override;
  absl::Status KvGet(const v1::KvGetRequest& req, v1::KvGetResponse* resp) override;
  absl::Status KvAdd(const v1::KvAddRequest& req, v1::KvAddResponse* resp) override;
  absl::Status KvWait(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp) override;
  absl::Status KvCheck(const v1::KvCheckRequest& req, v1::KvCheckResponse* resp) override;
  absl::Status KvDelete(const v1::KvDeleteRequest& req, v1::KvDeleteResponse* resp) override;
  absl::Status ReportProgress(const v1::ReportProgressRequest& req,
                              v1::ReportProgressResponse* resp) override;
  absl::Status AppendLogs(const v1::AppendLogsRequest& req, v1::AppendLogsResponse* resp) override;
  absl::Status ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                v1::ReportCheckpointResponse* resp) override;
  absl::Status RejectCheckpoint(const v1::RejectCheckpointRequest& req,
                                v1::RejectCheckpointResponse* resp) override;
  absl::Status Health() override;
  std::string MetricsText() override;
  // Queues `call` on the loop thread, in `lane`, and runs `done` there: the asynchronous gRPC
  // methods wait for the loop without a thread. After Stop, `done` gets UNAVAILABLE at once.
  void Dispatch(std::function<absl::Status()> call, Done done, api::Lane lane) override;
  // The scope is checked on the loop and the wait registered there; no thread waits
  // (RendezvousKv::GetAsync). `done` runs on the loop when the keys are there already, else
  // on the thread that ends the wait.
  void KvGetAsync(const v1::KvGetRequest& req, v1::KvGetResponse* resp, Done done,
                  std::shared_ptr<CancelSignal> cancel) override;
  void KvWaitAsync(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp, Done done,
                   std::shared_ptr<CancelSignal> cancel) override;
  // The spec is validated on the calling thread; then the submit waits in a queue for the
  // loop, which takes every submit queued meanwhile as one batch (controller_submit.cc): their
  // jobs in one transaction, one scheduling pass, and each answered with its job as that pass
  // left it. `done` runs on the loop (on Stop's thread once stopped: UNAVAILABLE). SubmitJob
  // is this, waited for.
  void SubmitJobAsync(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp, Done done,
                      std::function<void()> taken) override;

 private:
  // A submit waiting for the loop (SubmitJobAsync).
  struct PendingSubmit {
    v1::JobSpec spec;  // validated
    bool dry_run = false;
    std::string owner;
    v1::SubmitJobResponse* resp = nullptr;
    Done done;
    std::function<void()> taken;  // may be null
  };
  // Loop thread: takes the queued submits (every one queued until now) and answers them.
  void FlushSubmits();
  // Queues `run` for the loop in `lane` (dispatch_mu_ held), and runs the next queued call.
  void QueueCall(api::Lane lane, std::function<void()> run);
  void RunQueuedCall();
  // Loop thread: stores the batch, schedules, fills in each response; their statuses, in order.
  std::vector<absl::Status> SubmitBatch(std::vector<PendingSubmit>& batch);
  // Runs `fn` on the loop thread, timed in ledger_ as `work`, and returns its status;
  // UNAVAILABLE once stopped.
  absl::Status OnLoop(const std::function<absl::Status()>& fn,
                      LoopLedger::Work work = LoopLedger::kCalls);
  // Wakes watchers after events were committed. Loop thread only.
  void Publish(const std::vector<v1::Event>& events);
  // Waits until an event newer than `seen` exists, `ms` pass, or the controller stops.
  void WaitForEventsAfter(int64_t seen, int ms);
  void ScheduleHeartbeatCheck();
  void CheckRuns();  // the second turn of the once-a-second check: stalls and launch deadlines
  // Every persist_ms: the due heartbeat times, then (a loop turn of its own) PersistProgress.
  void SchedulePersist();
  void PersistProgress();  // the due step figures; then the next SchedulePersist
  // The lag prober's thread: every 50-150 ms (uniformly at random) it posts a probe onto the
  // loop, as a call arriving then is posted; RecordLag, on the loop, puts how long the probe
  // waited into dhp_controller_loop_lag_seconds (the wait a heartbeat or API call arriving then
  // had), split by what the loop ran meanwhile (ledger_), and warns past kSlowTickSeconds. Its
  // times do not follow the loop's own ticks, and each probe waits on its own (a timer re-armed
  // from the loop, as before, waited for the probes before it too: under a steady backlog of
  // calls its lag grew without bound while the calls waited ~0.2 s).
  void RunLagProber();
  void RecordLag(std::chrono::steady_clock::time_point posted);
  // Registers lag_cause_seconds_ and loop_busy_seconds_, a series for each cause and work.
  void AddLoopLedgerMetrics();
  // Registers dhp_store_wal_hold_seconds and reports the store's WAL holds to it.
  void AddStoreMetrics();
  // Deletes what retention_s has expired, up to a batch at a time, then runs again after
  // retention_sweep_ms (at once while batches are full). Loop thread.
  void ScheduleRetentionSweep(int delay_ms);
  int SweepExpired();  // how many jobs it deleted
  // Loop thread, after any change: a scheduling pass, checkpoint directories deleted off the
  // loop (on files_), the rendezvous keys of runs that ended dropped, and the events published.
  void Settle(std::vector<v1::Event>& events);
  // Observes each phase of a tick in dhp_controller_tick_seconds; warns past kSlowTickSeconds,
  // naming `what` ticked.
  void RecordTick(const PhaseTimer& timer, const char* what);
  // Tells the supervisor about node state changes among `events` (LOST / READY again).
  // After Recover: the runs still on cordoned nodes are asked again to checkpoint and stop
  // (requests are in memory; the cordon is stored).
  absl::Status PreemptOnCordonedNodes();
  absl::Status ApplyNodeEvents(const std::vector<v1::Event>& events,
                               std::vector<v1::Event>* more);
  // The ranks' reports an agent relayed in its heartbeat, each answered into resp->progress.
  void RelayProgress(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp,
                     std::vector<v1::Event>* events);
  absl::StatusOr<KvScopeKey> CheckScope(const v1::KvScope& scope);
  // What CheckScope checks, without blocking: `then` runs on the loop with the scope, or at
  // once with why not (a malformed scope, or UNAVAILABLE after Stop).
  void WithScope(const v1::KvScope& scope, std::function<void(absl::StatusOr<KvScopeKey>)> then);
  std::chrono::milliseconds KvTimeout(int timeout_ms) const;
  // The registry's collector: jobs and nodes by state, and the RunMetrics gauges. The store
  // rows are read on the reader connection (on the loop without one); the rows of the placed
  // runs are computed on the loop, metrics_runs_per_slice runs per visit (so one scrape is not
  // one snapshot: a run placed or ended meanwhile may be in its slot counts but not its rows).
  void CollectGauges();
  // The registered nodes, copied 4 * metrics_runs_per_slice per visit to the loop.
  absl::StatusOr<std::vector<v1::Node>> ListNodesInSlices();
  // The rows of the supervisor's runs, one slice per visit to the loop, into `builder`.
  absl::Status AddRunRowsInSlices(const StoredJobs& stored, RunMetricsBuilder& builder);

  Store& store_;
  const Clock& clock_;
  MetricsExposition& metrics_;
  const ControllerOptions options_;
  JobManager jobs_;
  NodeTracker nodes_;
  Supervisor supervisor_;
  std::unique_ptr<LogStore> logs_;  // thread-safe; used off the loop
  RendezvousKv kv_;
  SerialWorker files_{"checkpoint files"};  // manifests and deletions, off the loop
  // dhp_jobs (by state), dhp_nodes (by state), dhp_store_quarantine_rows (rows its quarantine
  // table holds, by table): computed at every scrape.
  ComputedGauges& cluster_gauges_;
  prometheus::Family<prometheus::Counter>& events_total_;
  prometheus::Family<prometheus::Counter>& quarantined_total_;  // rows moved to quarantine
  prometheus::Counter& relayed_progress_;  // dhp_progress_reports_relayed_total
  prometheus::Histogram& submit_batch_jobs_;  // dhp_controller_submit_batch_jobs
  // dhp_controller_tick_seconds{phase}: how long each phase of the 1 s tick held the loop.
  prometheus::Family<prometheus::Histogram>& tick_seconds_;
  prometheus::Histogram& loop_lag_seconds_;  // dhp_controller_loop_lag_seconds
  // dhp_controller_loop_lag_cause_seconds{cause}: each probe's lag, split (LoopLedger::Name).
  std::vector<prometheus::Histogram*> lag_cause_seconds_;
  // dhp_controller_loop_busy_seconds_total{work}: the loop's recorded work, by LoopLedger::Work.
  std::vector<prometheus::Counter*> loop_busy_seconds_;
  LoopLedger ledger_;                // loop thread
  int64_t last_lag_warning_ms_ = 0;  // loop thread
  RunMetrics run_metrics_;  // per-job, per-stage and cluster gauges (controller/run_metrics.h)
  std::mutex reader_mu_;    // one scrape at a time reads on options_.store_reader

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::steady_timer heartbeat_timer_;
  boost::asio::steady_timer persist_timer_;
  boost::asio::steady_timer retention_timer_;
  std::thread loop_;
  std::thread lag_prober_;  // RunLagProber; stopped by Stop
  std::mutex lag_prober_mu_;
  std::condition_variable lag_prober_cv_;  // Stop wakes the prober
  std::thread::id loop_id_;
  ExportManager exports_;  // its runner threads post onto io_; stopped before io_ goes
  std::atomic<bool> stopped_{false};
  std::mutex dispatch_mu_;        // orders Dispatch against Stop's last run of queued calls
  bool dispatch_closed_ = false;  // guarded by dispatch_mu_
  std::vector<PendingSubmit> submits_;  // guarded by dispatch_mu_; a flush is queued when not empty
  // The calls waiting for the loop, by api::Lane, guarded by dispatch_mu_. Each call queued
  // posts one RunQueuedCall, which runs the oldest user call unless the call before it was a
  // user call and worker calls wait: then the oldest worker call. So a user call waits for at
  // most one worker call besides the one running, and a flood of user calls leaves the worker
  // calls every other turn. Timers and other posted work keep their place in the loop's order.
  std::deque<std::function<void()>> queued_calls_[2];
  bool user_call_ran_last_ = false;  // guarded by dispatch_mu_

  std::mutex events_mu_;  // guards last_event_id_
  std::condition_variable events_cv_;
  int64_t last_event_id_ = 0;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_CONTROLLER_H_
