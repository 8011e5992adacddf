// The Controller's health check and its /metrics collector (controller.h): the scrape reads the
// store on the reader connection and visits the loop a slice at a time.
#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/proto_enum.h"
#include "controller/controller.h"

namespace dhp::controller {

// ---- health and metrics --------------------------------------------------------------------

absl::Status Controller::Health() {
  return OnLoop([&] {
    store_.LastEventId();  // the store answers
    return absl::OkStatus();
  });
}

namespace {

struct StoreCounts {
  std::map<v1::JobState, int64_t> jobs;           // by state
  std::map<std::string, int64_t> quarantined;     // by table
};

StoreCounts ReadStoreCounts(Store& store) {
  return StoreCounts{store.CountJobsByState(), store.CountQuarantined()};
}

}  // namespace

void Controller::CollectGauges() {
  std::vector<v1::Node> all_nodes;
  ClusterSlots slots;
  std::set<std::string> job_ids;
  StoreCounts counts;
  StoredJobs stored;
  Store* reader = options_.store_reader;
  absl::Status s = OnLoop([&] {
    PhaseTimer timer;
    slots = ReadClusterSlots(supervisor_);
    // The runs are in job order: each id goes at the end, without a search.
    for (const auto& [id, run] : supervisor_.runs()) job_ids.insert(job_ids.end(), id.job_id);
    timer.Lap("metrics_counts");
    if (reader == nullptr) {
      counts = ReadStoreCounts(store_);
      stored = ReadStoredJobs(store_, job_ids);
      timer.Lap("metrics_read");
    }
    RecordTick(timer, "metrics scrape's read of the live state");
    return absl::OkStatus();
  }, LoopLedger::kScrape);
  if (!s.ok()) return;
  absl::StatusOr<std::vector<v1::Node>> listed = ListNodesInSlices();
  if (!listed.ok()) return;
  all_nodes = *std::move(listed);
  if (reader != nullptr) {
    std::lock_guard<std::mutex> lock(reader_mu_);
    counts = ReadStoreCounts(*reader);
    stored = ReadStoredJobs(*reader, job_ids);
  }

  GaugeRows jobs, nodes, quarantined, files;
  for (const auto& [file, bytes] : store_.FileBytes()) {
    files.push_back({{file}, static_cast<double>(bytes)});
  }
  for (const auto& [table, n] : counts.quarantined) {
    quarantined.push_back({{table}, static_cast<double>(n)});
  }
  for (int i = 1; i < v1::JobState_descriptor()->value_count(); ++i) {
    auto state = static_cast<v1::JobState>(v1::JobState_descriptor()->value(i)->number());
    jobs.push_back({{ShortName(state)}, static_cast<double>(counts.jobs[state])});
  }
  std::map<std::string, int> by_state = {{"READY", 0}, {"LOST", 0}};
  for (const v1::Node& n : all_nodes) by_state[ShortName(n.state())]++;
  for (const auto& [state, n] : by_state) nodes.push_back({{state}, static_cast<double>(n)});

  GaugeTextWriter run_rows = run_metrics_.Writer();
  const bool rank_series = slots.used <= options_.metrics_rank_series_max_ranks &&
                           options_.metrics_rank_series_max_ranks > 0;
  RunMetricsBuilder builder(std::move(all_nodes), run_rows, rank_series);
  if (!AddRunRowsInSlices(stored, builder).ok()) return;
  cluster_gauges_.Set({{"dhp_jobs", std::move(jobs)},
                       {"dhp_nodes", std::move(nodes)},
                       {"dhp_store_quarantine_rows", std::move(quarantined)},
                       {"dhp_store_file_bytes", std::move(files)},
                       {"dhp_rendezvous_waits", {{{}, static_cast<double>(kv_.Waiting())}}}});
  builder.Finish(slots);
  run_metrics_.Set(std::move(run_rows));
}

void Controller::AddStoreMetrics() {
  auto& holds = metrics_.AddHistogram(
      "dhp_store_wal_hold_seconds",
      "How long the WAL checkpointer held the store's writers (and so the controller's loop, if "
      "it had something to write): restart, the last copy before the WAL starts over (past 16 "
      "MiB of it); truncate, emptying the WAL file once writes slow down.");
  prometheus::Histogram* restart = &holds.Add({{"kind", "restart"}}, LatencyBuckets());
  prometheus::Histogram* truncate = &holds.Add({{"kind", "truncate"}}, LatencyBuckets());
  store_.set_wal_hold_observer([restart, truncate](const char* kind, double seconds) {
    (std::string_view(kind) == "restart" ? restart : truncate)->Observe(seconds);
  });
}

absl::StatusOr<std::vector<v1::Node>> Controller::ListNodesInSlices() {
  // A node's copy costs a few microseconds, a placed run's rows ten times more.
  const size_t per_slice = 4 * static_cast<size_t>(std::max(1, options_.metrics_runs_per_slice));
  std::vector<v1::Node> all;
  bool more = true;
  while (more) {
    absl::Status s = OnLoop([&] {
      PhaseTimer timer;
      std::vector<v1::Node> slice = nodes_.List(all.empty() ? "" : all.back().id(), per_slice);
      more = slice.size() == per_slice;
      all.insert(all.end(), std::make_move_iterator(slice.begin()),
                 std::make_move_iterator(slice.end()));
      timer.Lap("metrics_nodes");
      RecordTick(timer, "metrics scrape's copy of the nodes");
      return absl::OkStatus();
    }, LoopLedger::kScrape);
    if (!s.ok()) return s;
  }
  return all;
}

absl::Status Controller::AddRunRowsInSlices(const StoredJobs& stored,
                                            RunMetricsBuilder& builder) {
  const size_t per_slice = static_cast<size_t>(std::max(1, options_.metrics_runs_per_slice));
  std::optional<std::string> after;  // the last job whose runs are done
  bool more = true;
  while (more) {
    absl::Status s = OnLoop([&] {
      PhaseTimer timer;
      const std::map<RunId, ActiveRun>& runs = supervisor_.runs();
      auto it = after ? runs.upper_bound(RunId{*after, INT_MAX}) : runs.begin();
      std::vector<const ActiveRun*> slice;
      for (; it != runs.end(); ++it) {
        // A job's runs go in one slice: its rows come from its current run.
        if (slice.size() >= per_slice && it->first.job_id != slice.back()->id.job_id) break;
        slice.push_back(&it->second);
      }
      more = it != runs.end();
      if (!slice.empty()) after = slice.back()->id.job_id;
      builder.AddRuns(slice, stored);
      timer.Lap("metrics_compute");
      RecordTick(timer, "metrics scrape's rows of placed runs");
      return absl::OkStatus();
    }, LoopLedger::kScrape);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string Controller::MetricsText() { return metrics_.RenderText(); }

}  // namespace dhp::controller
