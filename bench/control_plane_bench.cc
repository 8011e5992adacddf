// control_plane_bench: control-plane scale of dhp-controller. N simulated worker agents
// (register, heartbeat every interval reporting their ranks, progress reports from each run's
// rank 0) against a real dhp-controller child process on loopback, over real gRPC.
//
//   bazel run //bench:control_plane_bench -- --controller before:/work/before/dhp-controller
//       --controller after:bazel-bin/controller/dhp-controller       (one command line)
//   bazel run //bench:control_plane_bench -- --nodes 200 --window-s 10 --queued-jobs 0   # quick
//   bazel run //bench:control_plane_bench -- --scrape-every-s 10   # with Prometheus scrapes
//   bazel run //bench:control_plane_bench -- --heartbeat-stream    # heartbeats on streams
//   bazel run //bench:control_plane_bench -- --controller calls:bazel-bin/controller/dhp-controller
//       --controller relay:bazel-bin/controller/dhp-controller --relay-progress-for relay
//       --every-rank-reports --progress-interval-ms 2000   # progress relayed in heartbeats
//   bazel run //bench:control_plane_bench -- --controller unary:bazel-bin/controller/dhp-controller
//       --controller stream:bazel-bin/controller/dhp-controller --heartbeat-stream-for stream
//                                         # one binary, unary vs stream heartbeats side by side
//
// Cases (bench/control_plane_cases.h), each with a fresh controller, the binaries side by side
// case by case: N nodes (--nodes) with the cluster empty or full (--modes; full: one 8-GPU job
// per node, all RUNNING), measured for --window-s after ramp-up; then --queued-jobs jobs queued
// with no node, and SubmitJob throughput on top of them. Figures per case: heartbeat latency,
// spurious node LOST events, controller CPU per heartbeat (process and loop thread), threads and
// RSS, database and WAL size, GetJob/SubmitJob p99 from a light prober, and the generator's own
// CPU and send lag (bench/control_plane_report.h). With --scrape-every-s S, node cases' windows
// also GET the controller's /metrics every S seconds, as a Prometheus server would, so that the
// heartbeat figures include what scrapes cost; the scrapes' own times and page size are noted
// under the table.
//
// The generator is this one process: the agents run on --threads completion-queue threads over
// --channels HTTP/2 connections (bench/control_plane_fleet.h). They heartbeat with unary
// Heartbeat calls, or, as dhp-worker does now, on one HeartbeatStream each: against every
// controller with --heartbeat-stream, against those labelled LABEL with --heartbeat-stream-for
// LABEL (repeatable), so that the same binary given twice under two labels compares the two.
//
// Prints the Markdown tables last and writes <out-dir>/control_plane.md and .json (also after
// every case, so that an interrupted run keeps what it measured).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "bench/control_plane_cases.h"
#include "bench/control_plane_report.h"
#include "nlohmann/json.hpp"

namespace dhp::bench {
namespace {

using Json = nlohmann::json;

// "label:path" -> (label, path); a bare path gets the label "c<index>".
std::pair<std::string, std::string> ParseController(const std::string& flag, size_t index) {
  const size_t colon = flag.find(':');
  if (colon != std::string::npos && flag.substr(0, colon).find('/') == std::string::npos) {
    return {flag.substr(0, colon), InWorkspace(flag.substr(colon + 1))};
  }
  return {"c" + std::to_string(index + 1), InWorkspace(flag)};
}

std::string Quote(const std::string& s) {
  if (s.find_first_of(" '\"$\\") == std::string::npos && !s.empty()) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The run description's sentence on the /metrics scraper; empty when there is none.
std::string ScraperText(double every_s) {
  if (every_s <= 0) return "";
  std::ostringstream s;
  s << "Scraper (node cases): GET /metrics every " << every_s
    << " s in the window, the first half an interval in, one at a time on a fresh connection, "
       "30 s deadline. ";
  return s.str();
}

int Main(int argc, char** argv) {
  CLI::App app{"control_plane_bench: simulated agents against a real dhp-controller"};
  BenchOptions o;
  std::vector<std::string> controllers;
  app.add_option("--controller", controllers,
                 "LABEL:PATH of a dhp-controller binary (repeatable; run side by side), e.g. "
                 "before:/work/before/dhp-controller (default: current:bazel-bin/controller/"
                 "dhp-controller)");
  app.add_option("--nodes", o.nodes, "Node counts, one case per count and mode")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--modes", o.modes, "empty (no jobs) and/or full (one 8-GPU job per node)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"empty", "full"}));
  app.add_option("--queued-jobs", o.queued_jobs,
                 "Jobs queued (no nodes) before measuring SubmitJob throughput; 0: no such case")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--window-s", o.window_s, "Measured seconds per case, after ramp-up")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--ramp-timeout-s", o.ramp_timeout_s,
                 "Limit on ramp-up (registration, submits, all RUNNING) per case")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--settle-s", o.settle_s, "Seconds between ramp-up and the window")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--fill-timeout-s", o.fill_timeout_s, "Limit on filling the queue")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--jobs-first", o.jobs_first,
               "Full cases: submit the N jobs before the agents start (they queue, and each node "
               "gets one as it registers) instead of after every node registered");
  app.add_option("--submitters", o.submitters, "Concurrent closed-loop SubmitJob threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--threads", o.threads, "Generator completion-queue threads (agent shards)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--channels", o.channels, "Generator HTTP/2 connections in all")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  app.add_option("--register-concurrency", o.register_concurrency,
                 "RegisterNode calls in flight at once during ramp-up")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  app.add_option("--progress-interval-ms", o.progress_interval_ms,
                 "ReportProgress period per reporting rank, or longer when the controller "
                 "asks (next_report_ms)")
      ->capture_default_str()
      ->check(CLI::Range(100, 600000));
  app.add_flag("--every-rank-reports", o.every_rank_reports,
               "Every rank sends ReportProgress, as dhp-rank does (default: only each run's "
               "rank 0, one reporter per run)");
  app.add_flag("--rank-metrics", o.rank_metrics,
               "Reports carry the 24 metrics a dhp-rank on a GPU sends (two stages' throughput "
               "and MFU, four phases, four memory figures, bytes on five process groups, "
               "gradient norm, learning rate, batch counts): ~28 /metrics series per rank "
               "(default: none, 3 per rank)");
  app.add_option("--agent-channel-arg", o.agent_channel_args,
                 "[LABEL:]NAME=INT gRPC channel argument on the agents' channels, against "
                 "every --controller or only LABEL (repeatable), e.g. grpc.http2.bdp_probe=0")
      ->check([](const std::string& s) {
        absl::StatusOr<ChannelArg> arg = ParseChannelArg(s);
        return arg.ok() ? std::string() : std::string(arg.status().message());
      });
  app.add_flag("--heartbeat-stream", o.heartbeat_stream,
               "Agents heartbeat on one WorkerService.HeartbeatStream each, as dhp-worker does, "
               "instead of unary Heartbeat calls (every controller)");
  app.add_option("--heartbeat-stream-for", o.heartbeat_stream_for,
                 "LABEL of a --controller whose cases use HeartbeatStream (repeatable; the "
                 "others unary): e.g. --controller unary:PATH --controller stream:PATH "
                 "--heartbeat-stream-for stream compares both against one binary");
  app.add_flag("--relay-progress", o.relay_progress,
               "The ranks' progress reports go in their agent's heartbeats, as dhp-worker "
               "relays them, instead of a ReportProgress call each (every controller)");
  app.add_option("--relay-progress-for", o.relay_progress_for,
                 "LABEL of a --controller whose cases relay progress in heartbeats (repeatable; "
                 "the others: a call per report)");
  app.add_option("--relays", o.relays,
                 "dhp-relay processes between the agents and each controller (0: none); the "
                 "agents' heartbeats go to them, over --channels connections")
      ->check(CLI::Range(0, 64));
  app.add_option("--generator-relays", o.generator_relays,
                 "Relays inside this process between the agents and each controller (0: none): "
                 "dhp-relay's batching (worker::HeartbeatBatcher), each with its own connection "
                 "to the controller, so that the controller gets what N relays on their own hosts "
                 "would send while this machine pays for neither their CPU nor a call per agent "
                 "heartbeat; excludes --relays and HeartbeatStream")
      ->check(CLI::Range(0, 64));
  app.add_option("--generator-relays-for", o.generator_relays_for,
                 "LABEL of a --controller whose cases use --generator-relays (repeatable; the "
                 "others: the agents call the controller directly)");
  app.add_option("--relay-binary", o.relay_binary, "The dhp-relay to run")->capture_default_str();
  app.add_option("--relay-window-ms", o.relay_window_ms, "dhp-relay --window-ms")
      ->capture_default_str();
  app.add_option("--controller-channels", o.controller_channels,
                 "With --relays or --generator-relays: the agents' connections to the controller "
                 "itself (0: --channels)");
  app.add_option("--probe-get-per-s", o.probe_get_per_s, "Prober GetJob calls per second")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--probe-submit-per-s", o.probe_submit_per_s,
                 "Prober SubmitJob calls per second (node cases)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--scrape-every-s", o.scrape_every_s,
                 "Node cases: GET /metrics every S seconds in the window (first at S/2, 30 s "
                 "deadline), as Prometheus would; 0: no scrapes")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));  // bounds the interval's conversion to a clock duration
  app.add_flag("--server-metrics", o.server_metrics,
               "Node cases: read the controller's /metrics right before and after the window and "
               "report its own p99s (each call's time in it, its wait for the loop, the loop's "
               "lag); raises its RSS peak (the page is ~19 MB at 10,000 full nodes)");
  app.add_option("--heartbeat-interval-ms", o.heartbeat_interval_ms,
                 "Passed to the controller when > 0 (else its default, 2000)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--heartbeat-timeout-ms", o.heartbeat_timeout_ms,
                 "Passed to the controller when > 0 (else its default, 10000)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-controller-threads", o.max_controller_threads,
                 "Stop a case early when the controller has more threads than this")
      ->capture_default_str()
      ->check(CLI::Range(100, 1000000));
  app.add_option("--out-dir", o.out_dir, "Where control_plane.md and .json go")
      ->capture_default_str();
  app.add_flag("--keep-temp", o.keep_temp, "Keep the controllers' data dirs and logs");
  bool rewrite = false;
  app.add_flag("--rewrite-report", rewrite,
               "Run nothing: remake <out-dir>/control_plane.md from its control_plane.json");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);
  if (rewrite) {
    const std::string dir = InWorkspace(o.out_dir);
    const Json saved = Json::parse(ReadFile(dir + "/control_plane.json"), nullptr, false);
    if (!saved.is_object() || !saved.contains("cases")) {
      std::cerr << "control_plane_bench: no results in " << dir << "/control_plane.json\n";
      return 1;
    }
    if (!WriteControlPlaneResults(dir, saved)) return 1;
    std::cout << ControlPlaneMarkdown(saved) << std::flush;
    return 0;
  }

  if (controllers.empty()) controllers.push_back("current:bazel-bin/controller/dhp-controller");
  for (size_t i = 0; i < controllers.size(); ++i) {
    o.controllers.push_back(ParseController(controllers[i], i));
    const std::string& path = o.controllers.back().second;
    if (::access(path.c_str(), X_OK) != 0) {
      std::cerr << "control_plane_bench: " << path << " is not an executable (--controller)\n";
      return 1;
    }
  }
  std::vector<std::string> channel_arg_labels;
  for (const std::string& s : o.agent_channel_args) {
    absl::StatusOr<ChannelArg> arg = ParseChannelArg(s);
    if (arg.ok() && !arg->label.empty()) channel_arg_labels.push_back(arg->label);
  }
  for (const auto& [flag, labels] :
       {std::pair{"--heartbeat-stream-for", &o.heartbeat_stream_for},
        std::pair{"--relay-progress-for", &o.relay_progress_for},
        std::pair{"--generator-relays-for", &o.generator_relays_for},
        std::pair{"--agent-channel-arg", &channel_arg_labels}}) {
    for (const std::string& label : *labels) {
      bool known = false;
      for (const auto& c : o.controllers) known = known || c.first == label;
      if (!known) {
        std::cerr << "control_plane_bench: " << flag << " " << label
                  << " names no --controller label\n";
        return 1;
      }
    }
  }
  if (o.generator_relays > 0 &&
      (o.relays > 0 || o.heartbeat_stream || !o.heartbeat_stream_for.empty())) {
    std::cerr << "control_plane_bench: --generator-relays excludes --relays and HeartbeatStream\n";
    return 1;
  }
  const std::string out_dir = InWorkspace(o.out_dir);

  // The heartbeats' transport, for the run's description.
  std::string transport = "unary Heartbeat calls";
  if (o.heartbeat_stream) {
    transport = "one HeartbeatStream per agent (a request and its answer per heartbeat)";
  } else if (!o.heartbeat_stream_for.empty()) {
    transport = "one HeartbeatStream per agent (a request and its answer per heartbeat) against";
    for (size_t i = 0; i < o.heartbeat_stream_for.size(); ++i) {
      transport += (i == 0 ? " " : ", ") + o.heartbeat_stream_for[i];
    }
    transport += ", unary Heartbeat calls against the others";
  }
  if (o.generator_relays > 0) {
    transport += " to " + std::to_string(o.generator_relays) +
                 " relays inside this process (dhp-relay's HeartbeatBatcher, a " +
                 std::to_string(o.relay_window_ms) +
                 " ms window, each with its own connection to the controller) that send them "
                 "on as HeartbeatBatch calls" +
                 (o.generator_relays_for.empty()
                      ? std::string()
                      : ", against " + absl::StrJoin(o.generator_relays_for, ", ") +
                            " (directly against the others)");
  }

  std::string command = "bazel run //bench:control_plane_bench --";
  for (int i = 1; i < argc; ++i) command += " " + Quote(argv[i]);
  Json options = {{"nodes", o.nodes},
                  {"modes", o.modes},
                  {"queued_jobs", o.queued_jobs},
                  {"window_s", o.window_s},
                  {"ramp_timeout_s", o.ramp_timeout_s},
                  {"settle_s", o.settle_s},
                  {"fill_timeout_s", o.fill_timeout_s},
                  {"submitters", o.submitters},
                  {"jobs_first", o.jobs_first},
                  {"threads", o.threads},
                  {"channels", o.channels},
                  {"register_concurrency", o.register_concurrency},
                  {"progress_interval_ms", o.progress_interval_ms},
                  {"every_rank_reports", o.every_rank_reports},
                  {"rank_metrics", o.rank_metrics},
                  {"agent_channel_args", o.agent_channel_args},
                  {"heartbeat_stream", o.heartbeat_stream},
                  {"heartbeat_stream_for", o.heartbeat_stream_for},
                  {"relay_progress", o.relay_progress},
                  {"relay_progress_for", o.relay_progress_for},
                  {"relays", o.relays},
                  {"generator_relays", o.generator_relays},
                  {"generator_relays_for", o.generator_relays_for},
                  {"relay_window_ms", o.relay_window_ms},
                  {"controller_channels", o.controller_channels},
                  {"probe_get_per_s", o.probe_get_per_s},
                  {"probe_submit_per_s", o.probe_submit_per_s},
                  {"scrape_every_s", o.scrape_every_s},
                  {"server_metrics", o.server_metrics},
                  {"heartbeat_interval_ms", o.heartbeat_interval_ms},
                  {"heartbeat_timeout_ms", o.heartbeat_timeout_ms},
                  {"max_controller_threads", o.max_controller_threads}};
  Json run = {
      {"benchmark", "control_plane_bench"},
      {"machine", MachineInfo()},
      {"command", command},
      {"options", options},
      {"job_spec", std::string(kEightRankJobSpec)},
      {"generator",
       "Generator: 1 process (no fork), " + std::to_string(o.threads) +
           " gRPC completion-queue threads, " + std::to_string(o.channels) +
           " HTTP/2 connections, the agents spread over them (a real cluster has one per "
           "agent: --channels as many as --nodes). Agents start at random moments over one "
           "heartbeat interval, register with 8 GPUs of 80 GB, heartbeat at the interval the "
           "controller returns (after the previous answer, 5 s deadline, as dhp-worker) on " +
           transport +
           ", report their ranks RUNNING, and " +
           (o.every_rank_reports ? "every rank" : "each run's rank 0") +
           " reports progress" +
           (o.rank_metrics ? " with a GPU rank's 24 metrics (FillProgressRequest)" : "") +
           " every " + std::to_string(o.progress_interval_ms) +
           " ms, or as seldom as the controller asks (next_report_ms), " +
           (o.relay_progress ? std::string("relayed in the agent's next heartbeat")
            : o.relay_progress_for.empty()
                ? std::string("a ReportProgress call each")
                : "relayed in the agent's next heartbeat (against the controllers labelled " +
                      absl::StrJoin(o.relay_progress_for, ", ") +
                      ") or a ReportProgress call each") +
           ". Full cases: the N jobs are "
           "submitted " +
           (o.jobs_first ? "before the agents start" : "once every node has registered") + ", by " +
           std::to_string(o.submitters) + " closed-loop submitters. Prober: " +
           Fixed(o.probe_get_per_s, 0) + " GetJob/s and " + Fixed(o.probe_submit_per_s, 0) +
           " SubmitJob/s, paced, one thread and connection each (its jobs run in the empty case "
           "and queue in the full one). " + ScraperText(o.scrape_every_s) +
           "Queued case: no nodes, " +
           std::to_string(o.submitters) + " closed-loop submitters."},
      {"cases", Json::array()}};

  auto record = [&](Json c) {
    run["cases"].push_back(std::move(c));
    run["machine"]["loadavg_at_end"] = Trim(ReadFile("/proc/loadavg"));
    WriteControlPlaneResults(out_dir, run);
  };
  for (int n : o.nodes) {
    for (const std::string& mode : o.modes) {
      for (const auto& [label, binary] : o.controllers) {
        record(RunNodeCase(o, label, binary, n, mode == "full"));
      }
    }
  }
  if (o.queued_jobs > 0) {
    for (const auto& [label, binary] : o.controllers) record(RunQueuedCase(o, label, binary));
  }
  std::cerr << "control_plane_bench: wrote " << out_dir << "/control_plane.md and .json\n\n";
  std::cout << ControlPlaneMarkdown(run) << std::flush;
  return 0;
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) { return dhp::bench::Main(argc, argv); }
