// RunMetrics: the per-job, per-stage and cluster gauges of the controller's /metrics, computed
// at every scrape from the supervisor's live view of the placed runs (what each rank last
// reported with ReportProgress) plus a few store rows of those jobs.
//
// The metric names and labels below are a contract: dashboards/*.json and
// deploy/prometheus/alerts.yml use them, and tests/monitoring_test.py checks that every name
// they use is one the controller exports. Every family is registered when the controller starts
// (so /metrics always lists its HELP and TYPE); a family has a sample only while something
// sets it. All are gauges.
//
// Labels: job = job id, stage = vision|text, rank = world rank of the job's current run,
// node = node id. NOTE: `job` collides with the label Prometheus attaches to every scraped
// series (the scrape job's name): scrape the controller with `honor_labels: true`
// (deploy/prometheus/prometheus.yml), or the job id lands in `exported_job`.
//
// Jobs: the supervisor's runs (placed or still draining). Queued jobs without a run are only
// counted (dhp_jobs, dhp_queued_jobs): a scrape reads no per-job rows beyond those runs, so it
// costs O(placed runs), not O(jobs in the store).
//
//   dhp_job_step{job}                       current step (the run's newest; else the job's)
//   dhp_job_total_steps{job}                steps the job trains to (once a rank reported it)
//   dhp_job_loss{job}                       newest training loss
//   dhp_job_learning_rate{job}              newest learning rate (rank metric "lr")
//   dhp_job_grad_norm{job}                  newest global gradient norm (rank metric "grad_norm")
//   dhp_job_restarts{job}                   automatic restarts used so far (Job.restart_count)
//   dhp_job_queue_wait_seconds{job}         the current run's time in the queue until it was
//                                           placed (Run.queue_wait_seconds); placed runs only
//   dhp_job_tokens_per_second{job}          newest throughput of the current run, all stages
//   dhp_job_step_seconds{job}               newest step time of the current run
//   dhp_job_state{job,state}                1 for the job's state (QUEUED, RUNNING, ...)
//   dhp_job_last_progress_timestamp_seconds{job}  Unix time at which the current run's step
//                                           last advanced (or it was placed); placed runs only.
//                                           Stalled: time() - this > threshold
//   dhp_job_stage_tokens_per_second{job,stage}        over the ranks hosting the stage: highest
//   dhp_job_stage_step_seconds{job,stage,phase}       longest, by phase
//   dhp_job_stage_memory_bytes{job,stage,kind}        most, by kind
//   dhp_job_stage_mfu{job,stage}                      mean of the ranks that report it
//   dhp_job_memory_used_ratio{job}                    highest of the ranks': reserved, else rss,
//                                                     over dhp_rank_memory_capacity_bytes
//   The per-rank families below (dhp_stage_*, dhp_collective_bytes, dhp_rank_*) are exported
//   only while the cluster's placed ranks (dhp_slots{kind="used"}) are at most
//   metrics.rank_series_max_ranks (default 4096; ~28 series per GPU rank: at 80,000 ranks a
//   scrape would be ~2.2 million series, ~200 MB): dhp_metrics_rank_series is 1 while they are.
//   The job-stage summaries above are the same figures reduced over the ranks, at any size.
//   dhp_stage_tokens_per_second{job,stage,rank}     <stage>_tokens_per_s
//   dhp_stage_step_seconds{job,stage,rank,phase}    phase = forward|backward|comm|optimizer:
//                                                   <stage>_<phase>_s, else <phase>_s
//   dhp_stage_memory_bytes{job,stage,rank,kind}     kind = allocated|reserved|peak (CUDA caching
//                                                   allocator) | rss (resident set):
//                                                   <stage>_memory_<kind>_bytes, else
//                                                   memory_<kind>_bytes
//   dhp_stage_mfu{job,stage,rank}                   mfu_<stage> (0..1), when reported (a known
//   peak) dhp_collective_bytes{job,rank,group}            comm_bytes:<group>: cumulative bytes by
//                                                   tensor size sent plus received on that
//                                                   process group: the collectives' algorithmic
//                                                   volume (worker/comm/comm_stats.h), not bytes
//                                                   on the wire (bench/results/comm_wire.md)
//   dhp_rank_step{job,rank}                         the rank's newest reported step
//   dhp_rank_last_report_timestamp_seconds{job,rank} Unix time of the rank's newest report
//   dhp_rank_memory_capacity_bytes{job,rank}        memory of the rank's device: its GPU's, or on
//                                                   a CPU node the node's memory / its CPU slots
//   dhp_checkpoint_step{job}, dhp_checkpoint_write_seconds{job} (slowest shard),
//   dhp_checkpoint_size_bytes{job} (all shards)     the job's newest COMPLETE checkpoint
//   dhp_slots{kind}                          kind = total|used|free rank slots (GPUs or CPU slots)
//   dhp_queued_jobs                          jobs waiting in the scheduler's queue
//   dhp_node_slots{node,kind}                kind = total|used: a node's rank slots
//   dhp_device_memory_bytes{node,device}     device = GPU index ("0", "1", ...), or "host" for
//                                            the memory of a node without GPUs
//   dhp_metrics_rank_series                  1 while the per-rank families are exported
// Kept by the Controller (controller_metrics.cc): dhp_jobs{state}, dhp_nodes{state},
// dhp_store_quarantine_rows{table} and
//   dhp_rendezvous_waits                     KvGet and KvWait calls waiting for their keys (the
//                                            limit is RendezvousKv::kMaxWaits)
// And a counter kept by the Controller (controller_nodes.cc):
//   dhp_progress_reports_relayed_total       rank progress reports agents carried in their
//                                            heartbeats (HeartbeatRequest.progress)
//
// No value is an age computed at scrape time: times are exported as Unix timestamps (as
// Prometheus recommends), so two scrapes with nothing new in between render the same text.
//
// A rank gets stage rows for each stage role it hosts (a collocated rank: both). Values a rank
// measures for its whole process (memory, and the step split unless it sends per-stage keys)
// then appear under both stages: take max, not sum, across stages of one rank. Rows appear once
// the rank reported the key; a rank that has not reported yet has none.
//
// Thread-safety: ComputeRunMetrics is pure. What reads the Supervisor (GatherRunMetricsInput,
// ReadClusterSlots, RunMetricsBuilder::AddRuns on its runs) runs on the controller's loop thread;
// ReadStoredJobs on whichever thread may use the Store it is given. A RunMetricsBuilder is used
// by one thread at a time. RunMetrics::Set is thread-safe.
#ifndef DHP_CONTROLLER_RUN_METRICS_H_
#define DHP_CONTROLLER_RUN_METRICS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/metrics_exposition.h"
#include "controller/store.h"
#include "controller/supervisor.h"
#include "dhp/v1/job.pb.h"
#include "dhp/v1/node.pb.h"

namespace dhp::controller {

// What the store holds of one job that has a run.
struct StoredJob {
  v1::Job job;
  std::optional<v1::Run> current_run;        // its current attempt's run
  std::optional<v1::Checkpoint> checkpoint;  // its newest COMPLETE one
};
using StoredJobs = std::map<std::string, StoredJob>;  // by job id

// The scheduler's cluster-wide numbers.
struct ClusterSlots {
  int total = 0;
  int used = 0;
  int free = 0;
  int64_t queued_jobs = 0;
};

// The jobs' store rows; a job no longer stored (or unreadable) is left out. Any thread that may
// use `store` (the controller reads on its reader connection, off the loop).
StoredJobs ReadStoredJobs(Store& store, const std::set<std::string>& job_ids);
ClusterSlots ReadClusterSlots(const Supervisor& supervisor);  // loop thread

using NodesById = std::unordered_map<std::string_view, const v1::Node*>;

// Builds the rows of one scrape a slice of runs at a time, so that the loop is held for one
// slice, not for all placed runs. The rows go into a GaugeSink whose family positions are
// RunMetrics::Families(): for a scrape, RunMetrics::Writer(), which writes each row's text as it
// comes (no label strings are kept; with every per-rank series, 80,000 GPU ranks make ~2.2
// million rows):
//
//   GaugeTextWriter text = run_metrics.Writer();
//   RunMetricsBuilder b(nodes, text);       // the registered nodes (NodeTracker::List)
//   b.AddRuns(slice, stored);               // on the loop, per slice; keeps no pointer to them
//   b.Finish(slots);                        // the cluster's rows, after the jobs'
//   run_metrics.Set(std::move(text));
//
// Runs come in job order, as Supervisor::runs() holds them, and every run of a job in the same
// slice (the job's rows come from its current run).
class RunMetricsBuilder {
 public:
  // `out` outlives the builder. Without `rank_series`, the per-rank families get no rows (the
  // per-job ones, the stage summaries among them, are all there).
  RunMetricsBuilder(std::vector<v1::Node> nodes, GaugeSink& out, bool rank_series = true);
  RunMetricsBuilder(const RunMetricsBuilder&) = delete;
  RunMetricsBuilder& operator=(const RunMetricsBuilder&) = delete;

  // The rows of the jobs of `runs` (jobs missing from `jobs` are left out), and their slots
  // counted toward dhp_node_slots{kind="used"}.
  void AddRuns(const std::vector<const ActiveRun*>& runs, const StoredJobs& jobs);
  // Adds the cluster's rows (dhp_slots, dhp_queued_jobs, dhp_node_slots,
  // dhp_device_memory_bytes).
  void Finish(const ClusterSlots& slots);

 private:
  void CountUsed(const std::vector<v1::RankPlacement>& placement);

  std::vector<v1::Node> nodes_;
  GaugeSink& out_;
  const bool rank_series_;
  NodesById by_id_;        // into nodes_
  std::vector<int> used_;  // by position in nodes_: its slots the runs use
};

// Everything one scrape reads, for computing all rows at once (tests; the single-thread path).
struct RunMetricsInput {
  std::vector<const ActiveRun*> runs;  // the supervisor's runs, draining ones included
  StoredJobs jobs;                     // for every job in runs
  std::vector<v1::Node> nodes;
  ClusterSlots slots;
  bool rank_series = true;
};

// The samples of every family listed in the header comment but those the Controller keeps, as
// MetricRows (tests; a RunMetricsBuilder into a GaugeRowsCollector).
MetricRows ComputeRunMetrics(const RunMetricsInput& in);

// Reads the supervisor's runs and, per job that has one, its stored rows. `nodes`: the
// registered nodes (NodeTracker::List). The pointers in the result point into `supervisor`:
// use the input before the supervisor changes (on the loop thread).
RunMetricsInput GatherRunMetricsInput(const Supervisor& supervisor, Store& store,
                                      std::vector<v1::Node> nodes);

// The gauge families, registered on construction in a registry that outlives this object.
class RunMetrics {
 public:
  explicit RunMetrics(MetricsExposition& metrics);
  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;

  // Replaces every family's samples with those in `rows` (a family absent from rows is
  // emptied). A name not registered here is a programming error (crash).
  void Set(const MetricRows& rows);
  // The same with the rows written into `text`, which Writer() made.
  void Set(GaugeTextWriter&& text);
  GaugeTextWriter Writer() const;

  // The families, in registration order: a GaugeSink's family positions.
  static const std::vector<GaugeFamilyDef>& Families();

  // The names of the families this class registers, in registration order.
  static std::vector<std::string> FamilyNames();

 private:
  ComputedGauges& gauges_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_RUN_METRICS_H_
