#include "controller/controller.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>

#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "common/logging.h"
#include "common/path_inside.h"
#include "common/proto_enum.h"
#include "controller/job_state_machine.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

constexpr int kWatchBatch = 1000;

SupervisorOptions SupervisorOptionsOf(const ControllerOptions& options) {
  SupervisorOptions s;
  s.checkpoint_root = options.spec.checkpoint_root;
  s.progress_reports_per_s = options.progress_reports_per_s;
  return s;
}

// <dir>/manifest.json, written atomically (temporary file, fsync, rename).
void WriteManifest(const std::string& dir, const std::string& json) {
  const std::string path = dir + "/manifest.json";
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr && std::fwrite(json.data(), 1, json.size(), f) == json.size() &&
            std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) DHP_LOG(WARNING) << "writing " << path << ": " << std::strerror(errno);
}
constexpr int kWatchPollMs = 500;
}  // namespace

Controller::Controller(Store& store, const Clock& clock, MetricsExposition& metrics,
                       ControllerOptions options)
    : store_(store),
      clock_(clock),
      metrics_(metrics),
      options_(options),
      jobs_(store, clock, options.spec),
      nodes_(store, clock, options.nodes),
      supervisor_(store, clock, SupervisorOptionsOf(options)),
      kv_(&store),
      cluster_gauges_(metrics.AddComputedGauges({
          {"dhp_jobs", "Jobs by state.", {"state"}},
          {"dhp_nodes", "Registered nodes by state.", {"state"}},
          {"dhp_store_quarantine_rows",
           "Rows held in the store's quarantine table, by the table they came from.",
           {"table"}},
          {"dhp_store_file_bytes",
           "Size of the store's files: the SQLite database (db) and its write-ahead log (wal).",
           {"file"}},
          {"dhp_rendezvous_waits",
           "Rendezvous waits (KvGet, KvWait) in flight; past 262,144 they are refused.",
           {}},
      })),
      events_total_(
          metrics.AddCounter("dhp_events_total", "Events recorded since the controller started.")),
      quarantined_total_(metrics.AddCounter(
          "dhp_store_quarantined_rows_total",
          "Rows of the store that could not be read (a stored message that does not parse) and "
          "were moved to its quarantine table, since the controller started, by table.")),
      relayed_progress_(metrics
                            .AddCounter("dhp_progress_reports_relayed_total",
                                        "Rank progress reports that agents relayed in their "
                                        "heartbeats, since the controller started.")
                            .Add({})),
      submit_batch_jobs_(metrics
                             .AddHistogram("dhp_controller_submit_batch_jobs",
                                           "SubmitJob calls the controller's loop took together, "
                                           "stored in one transaction and scheduled in one pass "
                                           "(those queued while the loop was busy).")
                             .Add({}, prometheus::Histogram::BucketBoundaries{
                                          1, 2, 4, 8, 16, 32, 64, 128, 256})),
      tick_seconds_(metrics.AddHistogram(
          "dhp_controller_tick_seconds",
          "How long each phase of the controller's periodic work held its event loop "
          "(heartbeats and API calls wait meanwhile). Once a second: nodes (loss check), "
          "node_events, stalls, schedule; every persist interval (25 ms): beats (due "
          "heartbeat times written), progress (due step figures written); at every /metrics "
          "scrape: metrics_counts, metrics_nodes and metrics_compute (once per slice of nodes "
          "and of placed runs), metrics_read (the placed jobs' rows, only when the controller "
          "has no reader connection to read them off the loop).")),
      loop_lag_seconds_(
          metrics
              .AddHistogram("dhp_controller_loop_lag_seconds",
                            "How long a probe posted onto the controller's event loop every "
                            "50-150 ms at random waited to run: the time a heartbeat or API call "
                            "arriving then waited for the loop.")
              .Add({}, LatencyBuckets())),
      run_metrics_(metrics),
      work_(boost::asio::make_work_guard(io_)),
      heartbeat_timer_(io_),
      persist_timer_(io_),
      retention_timer_(io_),
      exports_(store, clock, options.exports,
               [this](std::function<void()> fn) {
                 boost::asio::post(io_, [this, fn = std::move(fn)] {
                   LoopLedger::Span span(ledger_, LoopLedger::kOther);
                   fn();
                 });
               }) {
  for (const auto& [table, count] : store_.CountQuarantined()) {
    quarantined_total_.Add({{"table", table}});  // every table's series, from 0
  }
  store_.set_quarantine_listener([this](const QuarantinedRow& row) {
    quarantined_total_.Add({{"table", row.table}}).Increment();
  });
  last_event_id_ = store_.LastEventId();
  if (!options_.log_root.empty()) logs_ = std::make_unique<LogStore>(options_.log_root);
  metrics_.AddCollector([this] { CollectGauges(); });
  AddLoopLedgerMetrics();
  AddStoreMetrics();
}

Controller::~Controller() {
  Stop();
  store_.set_quarantine_listener(nullptr);  // the store outlives this controller
  store_.set_wal_hold_observer(nullptr);
}

void Controller::Start() {
  loop_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "dhp-loop");  // for top -H and the scale benchmark
    io_.run();
  });
  loop_id_ = loop_.get_id();
  // The nodes first: one stored over today's resource limits is cordoned before runs see it.
  absl::Status recovered = OnLoop([this] {
    nodes_.Load();
    return supervisor_.Recover();
  });
  if (!recovered.ok()) DHP_LOG(ERROR) << "recovering runs from the store: " << recovered;
  absl::Status redrained = OnLoop([this] { return PreemptOnCordonedNodes(); });
  if (!redrained.ok()) DHP_LOG(ERROR) << "asking runs on drained nodes again: " << redrained;
  absl::Status exported = OnLoop([this] { return exports_.Recover(); });
  if (!exported.ok()) DHP_LOG(ERROR) << "failing the exports of the last run: " << exported;
  absl::Status loaded = OnLoop([this] { return kv_.Load(); });
  if (!loaded.ok()) DHP_LOG(ERROR) << "loading the rendezvous keys from the store: " << loaded;
  boost::asio::post(io_, [this] { ScheduleHeartbeatCheck(); });
  boost::asio::post(io_, [this] { SchedulePersist(); });
  lag_prober_ = std::thread([this] { RunLagProber(); });
  if (options_.retention_s > 0) boost::asio::post(io_, [this] { ScheduleRetentionSweep(0); });
}

void Controller::Stop() {
  if (loop_.joinable() && !stopped_) {  // heartbeat times not yet written, so none goes back
    absl::Status flushed = OnLoop([this] {
      std::vector<v1::Event> events;
      absl::Status saved = supervisor_.SaveProgress(&events, /*all=*/true);
      if (!saved.ok()) DHP_LOG(WARNING) << "writing step figures at shutdown: " << saved;
      return nodes_.Flush();
    });
    if (!flushed.ok()) DHP_LOG(WARNING) << "writing heartbeat times at shutdown: " << flushed;
  }
  if (stopped_.exchange(true)) return;
  kv_.Close();
  events_cv_.notify_all();
  boost::asio::post(io_, [this] {
    heartbeat_timer_.cancel();
    persist_timer_.cancel();
    retention_timer_.cancel();
  });
  {
    std::lock_guard<std::mutex> lock(lag_prober_mu_);  // not between its check and its wait
    lag_prober_cv_.notify_all();
  }
  if (lag_prober_.joinable()) lag_prober_.join();
  work_.reset();
  io_.stop();
  if (loop_.joinable()) loop_.join();
  {
    // Calls dispatched but not run: each now ends UNAVAILABLE (OnLoop refuses once stopped),
    // so that every gRPC call in flight is answered.
    std::lock_guard<std::mutex> lock(dispatch_mu_);
    dispatch_closed_ = true;
  }
  exports_.Stop();  // children killed, records left RUNNING (failed at the next start)
  io_.restart();
  io_.poll();
  files_.Stop();
}

void Controller::Publish(const std::vector<v1::Event>& events) {
  if (events.empty()) return;
  for (const v1::Event& e : events) {
    events_total_.Add({{"type", e.type()}}).Increment();
    DHP_LOG(INFO) << "event " << e.id() << " " << e.type() << " "
                  << (e.job_id().empty() ? e.node_id() : e.job_id()) << " " << e.from_state()
                  << " -> " << e.to_state() << ": " << e.reason();
  }
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    last_event_id_ = std::max(last_event_id_, events.back().id());
  }
  events_cv_.notify_all();
}

void Controller::WaitForEventsAfter(int64_t seen, int ms) {
  std::unique_lock<std::mutex> lock(events_mu_);
  events_cv_.wait_for(lock, std::chrono::milliseconds(ms),
                      [&] { return last_event_id_ > seen || stopped_; });
}

void Controller::Settle(std::vector<v1::Event>& events) {
  absl::Status s = supervisor_.Schedule(&events);
  if (!s.ok()) DHP_LOG(ERROR) << "scheduling pass failed: " << s;
  std::vector<std::string> doomed = supervisor_.checkpoints().TakeDeletions();
  std::vector<std::pair<std::string, std::string>> manifests = supervisor_.checkpoints().TakeManifests();
  if (!doomed.empty() || !manifests.empty()) {
    // File work can take long: never on the loop. Both are idempotent if cut short.
    files_.Post([doomed = std::move(doomed), manifests = std::move(manifests),
                 root = options_.spec.checkpoint_root] {
      for (const auto& [dir, json] : manifests) WriteManifest(dir, json);
      for (const std::string& path : doomed) {
        if (!PathInside(path, root) || PathInside(root, path)) {  // never the root or outside
          DHP_LOG(ERROR) << "not deleting checkpoint " << path << ": outside " << root;
          continue;
        }
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
        if (ec) DHP_LOG(WARNING) << "deleting checkpoint " << path << ": " << ec.message();
      }
    });
  }
  // A run that ended needs its rendezvous keys no more (a new attempt gets a new scope).
  for (const v1::Event& e : events) {
    if (e.type() == "run.state" &&
        (e.to_state() == "SUCCEEDED" || e.to_state() == "FAILED" || e.to_state() == "CANCELLED")) {
      absl::Status dropped = kv_.DropScope(KvScopeKey{e.job_id(), e.attempt()});
      if (!dropped.ok()) {
        DHP_LOG(WARNING) << "deleting the rendezvous keys of " << e.job_id() << " attempt "
                         << e.attempt() << " (the next start deletes them): " << dropped;
      }
    }
  }
  Publish(events);
}

// ---- jobs ----------------------------------------------------------------------------------

absl::Status Controller::PrepareSubmitJob(v1::SubmitJobRequest* req) {
  // A spec sent as a message is validated again on the loop anyway (cheap); YAML is not.
  if (req->spec_text().empty()) return absl::OkStatus();
  absl::StatusOr<v1::JobSpec> spec = jobs_.ValidateSubmission(*req);
  if (!spec.ok()) return spec.status();
  *req->mutable_spec() = *std::move(spec);
  req->clear_spec_text();
  return absl::OkStatus();
}

absl::Status Controller::GetJob(const v1::GetJobRequest& req, v1::GetJobResponse* resp) {
  return OnLoop([&] {
    absl::Status s = jobs_.Get(req, resp);
    if (!s.ok()) return s;
    v1::Run* current = nullptr;
    for (v1::Run& run : *resp->mutable_runs()) {
      if (run.attempt() == resp->job().current_attempt()) current = &run;
    }
    supervisor_.OverlayProgress(*resp->mutable_job(), current);
    supervisor_.DescribeRanks(resp->job(), resp);
    return s;
  });
}

absl::Status Controller::ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
  return OnLoop([&] {
    absl::Status s = jobs_.List(req, resp);
    for (v1::Job& job : *resp->mutable_jobs()) supervisor_.OverlayProgress(job, nullptr);
    return s;
  });
}

absl::Status Controller::CancelJob(const v1::CancelJobRequest& req, v1::CancelJobResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = jobs_.Cancel(req, resp, &events);
    if (s.ok()) s = supervisor_.OnJobCancelled(resp->job(), &events);
    if (s.ok()) {
      absl::StatusOr<v1::Job> now = store_.GetJob(req.job_id());
      if (now.ok()) *resp->mutable_job() = *now;
      supervisor_.OverlayProgress(*resp->mutable_job(), nullptr);
    }
    Settle(events);
    return s;
  });
}

absl::Status Controller::ResumeJob(const v1::ResumeJobRequest& req, v1::ResumeJobResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = jobs_.Resume(req, resp, &events, [this](const v1::JobSpec& spec) {
      return supervisor_.CheckAdmission(spec);  // a new layout must fit, as at submit
    });
    if (s.ok()) supervisor_.OnJobQueued(resp->job());
    Settle(events);
    return s;
  });
}

absl::Status Controller::CheckpointJob(const v1::CheckpointJobRequest& req,
                                       v1::CheckpointJobResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = supervisor_.RequestCheckpoint(req.job_id(), resp, &events);
    Settle(events);
    return s;
  });
}

absl::Status Controller::WatchJob(const v1::WatchJobRequest& req, api::EventSink& sink) {
  const std::string& job_id = req.job_id();
  int64_t after = req.after_event_id();
  if (after < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "after_event_id: ", after, " is negative; event ids start at 1 (0: from the first)"));
  }
  while (true) {
    bool final = false;
    int64_t seen_last = 0;
    std::vector<v1::Event> batch;
    absl::Status s = OnLoop([&]() -> absl::Status {
      seen_last = store_.LastEventId();
      if (!job_id.empty()) {
        absl::StatusOr<v1::Job> job = store_.GetJob(job_id);
        if (!job.ok()) return job.status();
        final = IsTerminal(job->state());
      }
      batch = store_.ListEvents(job_id, after, kWatchBatch);
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    for (const v1::Event& e : batch) {
      if (!sink.Write(e)) return absl::OkStatus();
      after = e.id();
    }
    if (batch.size() == static_cast<size_t>(kWatchBatch)) continue;  // more history to replay
    if (!req.follow() || final) return absl::OkStatus();
    do {
      if (sink.IsCancelled()) return absl::OkStatus();
      if (stopped_) return absl::UnavailableError("the controller is shutting down");
      WaitForEventsAfter(seen_last, kWatchPollMs);
    } while ([&] {
      std::lock_guard<std::mutex> lock(events_mu_);
      return last_event_id_ <= seen_last;
    }());
  }
}

absl::Status Controller::ExportCheckpoint(const v1::ExportCheckpointRequest& req,
                                          v1::ExportCheckpointResponse* resp) {
  if (absl::Status s = CheckExportRequest(req); !s.ok()) return s;
  return OnLoop([&] { return exports_.Create(req, resp); });
}

absl::Status Controller::GetExport(const v1::GetExportRequest& req, v1::GetExportResponse* resp) {
  return OnLoop([&] { return exports_.Get(req, resp); });
}

absl::Status Controller::ListExports(const v1::ListExportsRequest& req,
                                     v1::ListExportsResponse* resp) {
  return OnLoop([&] { return exports_.List(req, resp); });
}

namespace {

// GetLogs' arguments, for both transports (REST only parses its query parameters).
absl::Status CheckGetLogsRequest(const v1::GetLogsRequest& req) {
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  if (req.attempt() < 0) {
    return absl::InvalidArgumentError("attempt: " + std::to_string(req.attempt()) +
                                      " is negative; attempts start at 1 (0: the current one)");
  }
  if (req.max_bytes() < 0) {
    return absl::InvalidArgumentError("max_bytes: " + std::to_string(req.max_bytes()) +
                                      " must not be negative (0: 64 KiB)");
  }
  for (int32_t rank : req.ranks()) {
    if (rank < 0) {
      return absl::InvalidArgumentError("ranks: " + std::to_string(rank) +
                                        " is negative; ranks start at 0");
    }
  }
  for (int64_t offset : req.offsets()) {
    if (offset < 0) {
      return absl::InvalidArgumentError("offsets: " + std::to_string(offset) + " is negative");
    }
  }
  if (req.offsets_size() > req.ranks_size()) {
    return absl::InvalidArgumentError(
        "offsets: " + std::to_string(req.offsets_size()) + " offsets for " +
        std::to_string(req.ranks_size()) +
        " ranks; give one offset per rank, in the same order (REST: "
        "rank=0&offset=100&rank=1&offset=0)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Controller::GetLogs(const v1::GetLogsRequest& req, v1::GetLogsResponse* resp) {
  if (logs_ == nullptr) return absl::FailedPreconditionError("this controller keeps no logs");
  if (absl::Status s = CheckGetLogsRequest(req); !s.ok()) return s;
  int attempt = req.attempt();
  bool final = false;
  absl::Status found = OnLoop([&] {
    absl::StatusOr<v1::Job> job = store_.GetJob(req.job_id());
    if (!job.ok()) return job.status();
    if (attempt == 0) attempt = job->current_attempt();
    if (attempt < 0 || attempt > job->current_attempt()) {
      return absl::InvalidArgumentError("attempt: job " + job->id() + " has attempts 1.." +
                                        std::to_string(job->current_attempt()));
    }
    for (const v1::Run& run : store_.ListRuns(job->id())) {
      if (run.attempt() != attempt) continue;
      const bool ended = run.state() == v1::RUN_STATE_SUCCEEDED ||
                         run.state() == v1::RUN_STATE_FAILED ||
                         run.state() == v1::RUN_STATE_CANCELLED;
      // Agents ship output every ~0.5 s: a run counts as final a few seconds after its ranks
      // are gone, so a follower sees the last lines.
      final = ended && !supervisor_.HasProcesses(RunId{job->id(), attempt}) &&
              clock_.NowMicros() - TimestampToMicros(run.end_time()) > 3000000;
    }
    return absl::OkStatus();
  });
  if (!found.ok()) return found;
  resp->set_attempt(attempt);
  resp->set_final(final);
  std::vector<int32_t> ranks(req.ranks().begin(), req.ranks().end());
  if (ranks.empty()) {
    absl::StatusOr<std::vector<int32_t>> listed = logs_->Ranks(req.job_id(), attempt);
    if (!listed.ok()) return listed.status();
    ranks = *listed;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int64_t offset = static_cast<int>(i) < req.offsets_size() ? req.offsets(i) : 0;
    absl::StatusOr<v1::LogChunk> chunk =
        logs_->Read(req.job_id(), attempt, ranks[i], offset, req.max_bytes());
    if (!chunk.ok()) return chunk.status();
    *resp->add_chunks() = *std::move(chunk);
  }
  return absl::OkStatus();
}

absl::Status Controller::AppendLogs(const v1::AppendLogsRequest& req,
                                    v1::AppendLogsResponse* resp) {
  if (logs_ == nullptr) return absl::FailedPreconditionError("this controller keeps no logs");
  // Only output of a rank the run placed on this node is stored: not of jobs or attempts that
  // do not exist, nor of another node's ranks.
  std::map<std::pair<std::string, int>, v1::Run> runs;
  absl::Status loaded = OnLoop([&] {
    for (const v1::LogChunk& chunk : req.chunks()) {
      auto key = std::make_pair(chunk.job_id(), chunk.attempt());
      if (runs.count(key) != 0) continue;
      runs[key];  // stays empty (attempt 0) when the job has no such attempt
      for (v1::Run& run : store_.ListRuns(chunk.job_id())) {
        if (run.attempt() == chunk.attempt()) runs[key] = std::move(run);
      }
    }
    return absl::OkStatus();
  });
  if (!loaded.ok()) return loaded;
  for (const v1::LogChunk& chunk : req.chunks()) {
    const v1::Run& run = runs[std::make_pair(chunk.job_id(), chunk.attempt())];
    const bool placed_here =
        std::any_of(run.placement().begin(), run.placement().end(), [&](const auto& p) {
          return p.world_rank() == chunk.world_rank() && p.node_id() == req.node_id();
        });
    absl::StatusOr<int64_t> size =
        placed_here ? logs_->Append(chunk)
                    : absl::InvalidArgumentError(absl::StrCat(
                          "rank ", chunk.world_rank(), " of attempt ", chunk.attempt(), " of job ",
                          chunk.job_id(), " does not run on node ", req.node_id()));
    if (!size.ok() && size.status().code() != absl::StatusCode::kInvalidArgument) {
      return size.status();  // the store failed: the agent retries the whole batch
    }
    if (!size.ok()) {  // a chunk that can never be stored: skip it, keep the others flowing
      DHP_LOG(WARNING) << "AppendLogs from " << req.node_id() << ": " << size.status();
      size = chunk.offset() + static_cast<int64_t>(chunk.data().size());
    }
    resp->add_sizes(*size);
  }
  return absl::OkStatus();
}

absl::Status Controller::ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                          v1::ReportCheckpointResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = supervisor_.OnCheckpointShard(req, resp, &events);
    Settle(events);
    return s;
  });
}

absl::Status Controller::RejectCheckpoint(const v1::RejectCheckpointRequest& req,
                                          v1::RejectCheckpointResponse*) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = supervisor_.OnCheckpointRejected(req, &events);
    Settle(events);
    return s;
  });
}

absl::Status Controller::ReportProgress(const v1::ReportProgressRequest& req,
                                        v1::ReportProgressResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = supervisor_.OnProgress(req, resp, &events);
    Settle(events);
    return s;
  });
}

// ---- rendezvous ----------------------------------------------------------------------------

namespace {

absl::Status CheckScopeFields(const v1::KvScope& scope) {
  if (scope.job_id().empty()) return absl::InvalidArgumentError("scope.job_id: must not be empty");
  if (scope.attempt() <= 0) {
    return absl::InvalidArgumentError("scope.attempt: " + std::to_string(scope.attempt()) +
                                      " must be at least 1");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvScopeKey> Controller::CheckScope(const v1::KvScope& scope) {
  if (absl::Status s = CheckScopeFields(scope); !s.ok()) return s;
  absl::Status s =
      OnLoop([&] { return jobs_.CheckCurrentAttempt(scope.job_id(), scope.attempt()); });
  if (!s.ok()) return s;
  return KvScopeKey{scope.job_id(), scope.attempt()};
}

void Controller::WithScope(const v1::KvScope& scope,
                           std::function<void(absl::StatusOr<KvScopeKey>)> then) {
  if (absl::Status s = CheckScopeFields(scope); !s.ok()) return then(s);
  KvScopeKey key{scope.job_id(), scope.attempt()};
  Dispatch([this, key] { return jobs_.CheckCurrentAttempt(key.job_id, key.attempt); },
           [key, then = std::move(then)](const absl::Status& s) {
             if (s.ok()) return then(key);
             then(s);
           },
           api::Lane::kWorker);  // a rank's rendezvous wait
}

std::chrono::milliseconds Controller::KvTimeout(int timeout_ms) const {
  return std::chrono::milliseconds(std::clamp(timeout_ms, 0, options_.kv_max_timeout_ms));
}

// Changes run on the loop (the store's thread), reads on the caller's thread. A wait is
// registered on the loop right after its scope is checked there, and holds no thread; the
// blocking KvGet and KvWait (REST's threads) wait for the same asynchronous path.

namespace {

// Starts an asynchronous call and blocks until its `done` has run: its status. Never on the
// loop thread, which the call needs.
absl::Status Blocking(const std::function<void(api::DhpService::Done)>& start) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = promise->get_future();
  start([promise](const absl::Status& s) { promise->set_value(s); });
  return result.get();
}

}  // namespace

absl::Status Controller::KvSet(const v1::KvSetRequest& req, v1::KvSetResponse*) {
  return OnLoop([&]() -> absl::Status {
    absl::StatusOr<KvScopeKey> scope = CheckScope(req.scope());
    if (!scope.ok()) return scope.status();
    return kv_.Set(*scope, req.key(), req.value());
  });
}

absl::Status Controller::KvGet(const v1::KvGetRequest& req, v1::KvGetResponse* resp) {
  return Blocking([&](Done done) { KvGetAsync(req, resp, std::move(done), nullptr); });
}

void Controller::KvGetAsync(const v1::KvGetRequest& req, v1::KvGetResponse* resp, Done done,
                            std::shared_ptr<CancelSignal> cancel) {
  WithScope(req.scope(), [this, key = req.key(), timeout = KvTimeout(req.timeout_ms()), resp,
                          done = std::move(done),
                          cancel = std::move(cancel)](absl::StatusOr<KvScopeKey> scope) {
    if (!scope.ok()) return done(scope.status());
    kv_.GetAsync(
        *scope, key, timeout,
        [resp, done](absl::StatusOr<std::string> v) {
          if (v.ok()) resp->set_value(std::move(*v));
          done(v.status());
        },
        cancel);
  });
}

void Controller::KvWaitAsync(const v1::KvWaitRequest& req, v1::KvWaitResponse*, Done done,
                             std::shared_ptr<CancelSignal> cancel) {
  WithScope(req.scope(), [this, keys = std::vector<std::string>(req.keys().begin(),
                                                                 req.keys().end()),
                          timeout = KvTimeout(req.timeout_ms()), done = std::move(done),
                          cancel = std::move(cancel)](absl::StatusOr<KvScopeKey> scope) {
    if (!scope.ok()) return done(scope.status());
    kv_.WaitAsync(
        *scope, keys, timeout, [done](absl::StatusOr<std::string> r) { done(r.status()); },
        cancel);
  });
}

absl::Status Controller::KvAdd(const v1::KvAddRequest& req, v1::KvAddResponse* resp) {
  return OnLoop([&]() -> absl::Status {
    absl::StatusOr<KvScopeKey> scope = CheckScope(req.scope());
    if (!scope.ok()) return scope.status();
    absl::StatusOr<int64_t> v = kv_.Add(*scope, req.key(), req.delta(), req.request_id());
    if (!v.ok()) return v.status();
    resp->set_value(*v);
    return absl::OkStatus();
  });
}

absl::Status Controller::KvWait(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp) {
  return Blocking([&](Done done) { KvWaitAsync(req, resp, std::move(done), nullptr); });
}

absl::Status Controller::KvCheck(const v1::KvCheckRequest& req, v1::KvCheckResponse* resp) {
  absl::StatusOr<KvScopeKey> scope = CheckScope(req.scope());
  if (!scope.ok()) return scope.status();
  std::vector<std::string> keys(req.keys().begin(), req.keys().end());
  resp->set_ready(kv_.Check(*scope, keys));
  return absl::OkStatus();
}

absl::Status Controller::KvDelete(const v1::KvDeleteRequest& req, v1::KvDeleteResponse* resp) {
  return OnLoop([&]() -> absl::Status {
    absl::StatusOr<KvScopeKey> scope = CheckScope(req.scope());
    if (!scope.ok()) return scope.status();
    absl::StatusOr<bool> deleted = kv_.Delete(*scope, req.key(), req.request_id());
    if (!deleted.ok()) return deleted.status();
    resp->set_deleted(*deleted);
    return absl::OkStatus();
  });
}

}  // namespace dhp::controller
