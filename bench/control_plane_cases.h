// The control-plane benchmark's cases, each against a fresh dhp-controller child process:
//
//   RunNodeCase   N simulated agents (bench/control_plane_fleet.h), the cluster "empty" (no
//                 jobs) or "full" (N jobs of 8 GPU ranks, one per node). Ramp-up: every node
//                 registered and, when full, every job submitted (once the nodes registered, or
//                 with jobs_first before the agents start) and RUNNING, bounded by
//                 ramp_timeout_s (on timeout the case goes on and reports what it reached).
//                 Then, after settle_s, a window of window_s seconds with the light prober
//                 (GetJob, SubmitJob) on top, and /metrics scraped every scrape_every_s
//                 seconds when that is above 0.
//   RunQueuedCase no nodes: `queued_jobs` jobs submitted by `submitters` closed-loop threads
//                 (fill, bounded by fill_timeout_s), then window_s seconds more of the same
//                 submitters on top of that queue, with the GetJob prober.
//
// Both return every figure as JSON (bench/control_plane_report.h prints and writes it). A case
// never waits unboundedly: every RPC has a deadline, every phase a time limit, and the case stops
// early when the controller's thread count endangers the machine (ControllerSampler).
#ifndef DHP_BENCH_CONTROL_PLANE_CASES_H_
#define DHP_BENCH_CONTROL_PLANE_CASES_H_

#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace dhp::bench {

struct BenchOptions {
  std::vector<std::pair<std::string, std::string>> controllers;  // (label, binary)
  std::vector<int> nodes = {1000, 4000, 10000};
  std::vector<std::string> modes = {"empty", "full"};
  int queued_jobs = 10000;  // 0: no queued case
  double window_s = 20;
  double ramp_timeout_s = 180;
  double settle_s = 4;  // after ramp-up, before the window: two heartbeats per agent
  double fill_timeout_s = 300;
  int submitters = 4;
  bool jobs_first = false;  // full: submit the jobs before the agents start
  // Generator.
  int threads = 2;
  int channels = 8;
  int register_concurrency = 64;
  int progress_interval_ms = 5000;
  bool every_rank_reports = false;
  bool rank_metrics = false;  // reports carry the metrics a dhp-rank on a GPU sends
  // gRPC channel arguments of the agents' channels: NAME=INT for every controller's cases, or
  // LABEL:NAME=INT for that controller's only.
  std::vector<std::string> agent_channel_args;
  // Heartbeats on one HeartbeatStream per agent: for every controller, or for those labels.
  bool heartbeat_stream = false;
  std::vector<std::string> heartbeat_stream_for;
  // The ranks' progress relayed in heartbeats: for every controller, or for those labels.
  bool relay_progress = false;
  std::vector<std::string> relay_progress_for;
  // Heartbeat relays: `relays` dhp-relay processes (relay_binary) per node case, between the
  // agents and the controller, each batching over relay_window_ms; the agents' own
  // connections to the controller (registration, progress) are then controller_channels.
  int relays = 0;
  std::string relay_binary = "bazel-bin/worker/relay/dhp-relay";
  int relay_window_ms = 20;
  int controller_channels = 0;
  // Relays inside the generator (FleetOptions::in_process_relays): `generator_relays`
  // worker::HeartbeatBatchers between the agents and the controller, for every controller or
  // for those labels, each batching over relay_window_ms. What the controller receives is what
  // it would from that many dhp-relay processes on hosts of their own.
  int generator_relays = 0;
  std::vector<std::string> generator_relays_for;
  // Prober.
  double probe_get_per_s = 20;
  double probe_submit_per_s = 2;
  // Node cases' windows: GET /metrics every this many seconds, as Prometheus would (0: never).
  double scrape_every_s = 0;
  // Node cases: read the controller's /metrics right before and after the window, for its own
  // p99s (call time, wait for the loop, loop lag). At 10,000 full nodes the page is ~19 MB and
  // building it raised the controller's RSS peak from ~370 to ~630 MiB, so off by default.
  bool server_metrics = false;
  // Controller flags (0: the controller's default).
  int heartbeat_interval_ms = 0;
  int heartbeat_timeout_ms = 0;
  int max_controller_threads = 12000;
  std::string out_dir = "bench/results";
  bool keep_temp = false;
};

// The job every case submits: the tiny model of configs/tiny-cpu.yaml laid out as Ulysses 2 x
// TP 2, collocated, times 4 data-parallel replicas = 8 ranks, all of which the scheduler packs
// onto one 8-GPU node (same-node TP groups, best fit).
extern const char kEightRankJobSpec[];

// Whether the agents heartbeat on HeartbeatStream against the controller labelled `label`.
bool HeartbeatStreamFor(const BenchOptions& o, const std::string& label);
// Whether the agents relay their ranks' progress in heartbeats against that controller.
bool RelayProgressFor(const BenchOptions& o, const std::string& label);
// How many relays inside the generator the agents' heartbeats go through against that
// controller (0: none).
int GeneratorRelaysFor(const BenchOptions& o, const std::string& label);

nlohmann::json RunNodeCase(const BenchOptions& o, const std::string& label,
                           const std::string& binary, int nodes, bool full);
nlohmann::json RunQueuedCase(const BenchOptions& o, const std::string& label,
                             const std::string& binary);

}  // namespace dhp::bench

#endif  // DHP_BENCH_CONTROL_PLANE_CASES_H_
