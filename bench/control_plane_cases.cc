#include "bench/control_plane_cases.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "bench/bench_util.h"
#include "bench/control_plane_fleet.h"
#include "bench/control_plane_probe.h"
#include "bench/control_plane_sampler.h"
#include "bench/controller_process.h"
#include "bench/http_load.h"
#include "bench/metrics_histogram.h"

namespace dhp::bench {

const char kEightRankJobSpec[] = R"(# control_plane_bench: 8 GPU ranks on one node
name: cp-bench
labels:
  purpose: control-plane-bench
model:
  preset: tiny
vision:
  parallelism: sequence
  degree: 2
  dtype: fp32
text:
  parallelism: tensor
  degree: 2
  dtype: fp32
data_parallel_size: 4
placement: collocate
training:
  batch_size: 8
  max_steps: 1000000
data:
  datasets: [shapes]
  registry:
    shapes:
      annotation_path: data/shapes/train.jsonl
      image_root: data/shapes
checkpoint:
  every_steps: 0
restart:
  max_restarts: 0
)";

namespace {

using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr int kQueryDeadlineMs = 20000;  // ListJobs pages, ListNodes, the event replay
constexpr int kSubmitDeadlineMs = 30000;
constexpr int kProbeDeadlineMs = 10000;
constexpr int kScrapeDeadlineMs = 30000;

double Since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json Pct(std::vector<int64_t> ns) {
  std::sort(ns.begin(), ns.end());
  return {{"count", ns.size()},
          {"p50_ms", PercentileMs(ns, 0.5)},
          {"p99_ms", PercentileMs(ns, 0.99)},
          {"max_ms", PercentileMs(ns, 1.0)}};
}

Json CallJson(const CallStats& s, double seconds) {
  Json j = Pct(s.ns);
  j["ok"] = s.ok;
  j["errors"] = s.errors;
  j["seconds"] = seconds;
  j["ok_per_s"] = seconds > 0 ? s.ok / seconds : 0;
  if (!s.first_error.empty()) j["first_error"] = s.first_error;
  return j;
}

Json ScrapeJson(const ScrapeStats& s, double every_s) {
  Json j = Pct(s.ns);
  j["every_s"] = every_s;
  j["ok"] = s.ok;
  j["failed"] = s.failed;
  j["bytes_max"] = s.bytes_max;
  if (!s.first_error.empty()) j["first_error"] = s.first_error;
  return j;
}

// The controller's /metrics page; empty when it cannot be read (a floor server has none).
std::string MetricsPage(const ControllerProcess& c) {
  if (c.http_port() <= 0) return "";
  absl::StatusOr<HttpResult> r =
      HttpFetch("127.0.0.1", static_cast<uint16_t>(c.http_port()), "GET", "/metrics",
                std::chrono::milliseconds(kScrapeDeadlineMs));
  return r.ok() && r->status == 200 ? r->body : "";
}

// Each phase of the controller's periodic work between two pages (dhp_controller_tick_seconds):
// {"beats": {"count": 300, "mean_ms": 1.2, "p99_le_ms": 2.5}, ...}; phases not run are left out.
Json TickPhasesJson(const std::string& before, const std::string& after) {
  Json phases = Json::object();
  for (const char* phase : {"beats", "progress", "nodes", "node_events", "stalls", "schedule",
                            "metrics_counts", "metrics_nodes", "metrics_compute"}) {
    const std::vector<std::string> label = {std::string("phase=\"") + phase + "\""};
    auto delta = [&](const char* suffix) {
      const std::string name = std::string("dhp_controller_tick_seconds") + suffix;
      const double b = SumSamples(before, name, label);
      const double a = SumSamples(after, name, label);
      return a < 0 ? -1.0 : a - std::max(0.0, b);
    };
    const double count = delta("_count");
    if (count <= 0) continue;
    const double b = QuantileBound(ParseHistogram(before, "dhp_controller_tick_seconds", label),
                                   ParseHistogram(after, "dhp_controller_tick_seconds", label),
                                   0.99);
    phases[phase] = {{"count", count},
                     {"mean_ms", 1000 * delta("_sum") / count},
                     {"p99_le_ms", std::isinf(b) ? Json("inf") : Json(1000 * b)}};
  }
  return phases;
}

// What the controller itself measured of the calls between two pages (bucket bounds, ms;
// null: none observed): each method's time in the controller and its wait for the loop
// (api/instrumented_service.h), and the loop's lag.
Json ServerSideJson(const std::string& before, const std::string& after) {
  auto p99 = [&](const char* name, const std::vector<std::string>& labels) -> Json {
    const double b = QuantileBound(ParseHistogram(before, name, labels),
                                   ParseHistogram(after, name, labels), 0.99);
    if (b < 0) return nullptr;
    return std::isinf(b) ? Json("inf") : Json(1000 * b);
  };
  Json j = Json::object();
  for (const char* m : {"Heartbeat", "HeartbeatBatch", "GetJob", "SubmitJob"}) {
    const std::vector<std::string> labels = {std::string("method=\"") + m + "\"",
                                             "transport=\"grpc\""};
    j[m] = {{"duration_p99_le_ms", p99("dhp_api_request_duration_seconds", labels)},
            {"loop_wait_p99_le_ms", p99("dhp_api_request_wait_seconds", labels)}};
  }
  j["loop_lag_p99_le_ms"] = p99("dhp_controller_loop_lag_seconds", {});
  Json causes = Json::object();
  Json busy = Json::object();
  for (const char* c : {"calls", "check", "persist", "scrape", "other", "unrecorded"}) {
    const std::string label = std::string("cause=\"") + c + "\"";
    causes[c] = p99("dhp_controller_loop_lag_cause_seconds", {label});
    const std::vector<std::string> work = {std::string("work=\"") + c + "\""};
    const double b = SumSamples(before, "dhp_controller_loop_busy_seconds_total", work);
    const double a = SumSamples(after, "dhp_controller_loop_busy_seconds_total", work);
    if (a >= 0 && b >= 0) busy[c] = a - b;
  }
  j["loop_lag_cause_p99_le_ms"] = causes;
  // The lag's whole distribution: probes observed between the pages, by bucket bound (ms).
  const HistogramBuckets lag_b = ParseHistogram(before, "dhp_controller_loop_lag_seconds", {});
  const HistogramBuckets lag_a = ParseHistogram(after, "dhp_controller_loop_lag_seconds", {});
  if (!lag_a.le.empty() && (lag_b.le.empty() || lag_b.le == lag_a.le)) {
    Json buckets = Json::array();
    for (size_t i = 0; i < lag_a.le.size(); ++i) {
      const double n = lag_a.count[i] - (lag_b.le.empty() ? 0 : lag_b.count[i]);
      buckets.push_back({std::isinf(lag_a.le[i]) ? Json("+Inf") : Json(1000 * lag_a.le[i]), n});
    }
    j["loop_lag_cumulative_by_le_ms"] = buckets;
  }
  j["loop_busy_s"] = busy;  // seconds of the loop's time between the pages, by work
  j["tick_phases"] = TickPhasesJson(before, after);
  return j;
}

Json TallyJson(const JobTally& t) {
  Json j = {{"ok", t.ok}, {"not_running", t.not_running}, {"by_state", t.by_state}};
  if (!t.error.empty()) j["error"] = t.error;
  return j;
}

std::vector<std::string> ControllerArgs(const BenchOptions& o) {
  std::vector<std::string> args;
  if (o.heartbeat_interval_ms > 0) {
    args.insert(args.end(), {"--heartbeat-interval-ms", std::to_string(o.heartbeat_interval_ms)});
  }
  if (o.heartbeat_timeout_ms > 0) {
    args.insert(args.end(), {"--heartbeat-timeout-ms", std::to_string(o.heartbeat_timeout_ms)});
  }
  return args;
}

// CPU readings at the start and the end of a window.
struct Mark {
  SteadyClock::time_point t;
  int64_t unix_us = 0;
  double controller = 0, generator = 0, machine = 0;
  std::map<pid_t, ControllerProcess::ThreadTimes> threads;
};

Mark TakeMark(const ControllerProcess& c) {
  Mark m;
  m.threads = c.ThreadCpuTimes();
  m.controller = c.CpuSeconds();
  m.generator = ProcessCpuSeconds();
  m.machine = MachineBusySeconds();
  m.t = SteadyClock::now();
  m.unix_us = UnixMicros();
  return m;
}

// Controller, loop thread, generator and other processes' CPU between two marks; "per" is the
// count of `what` (heartbeats, submits) the per-unit figures divide by.
Json CpuJson(const ControllerProcess& c, const Mark& a, const Mark& b, int64_t per,
             const std::string& what) {
  const double wall = std::chrono::duration<double>(b.t - a.t).count();
  const double ctl = b.controller - a.controller, gen = b.generator - a.generator;
  const LoopThread loop = FindLoopThread(c.pid(), a.threads, b.threads);
  auto per_unit = [&](double s) { return per > 0 ? Json(1e6 * s / per) : Json(nullptr); };
  return {{"wall_s", wall},
          {"controller_cpu_s", ctl},
          {"controller_cores", ctl / wall},
          {"controller_cpu_us_per_" + what, per_unit(ctl)},
          {"loop_thread",
           {{"tid", loop.tid},
            {"name", loop.name},
            {"found_by", loop.by_name ? "name" : "most CPU"},
            {"cpu_s", loop.cpu_s},
            {"busy_percent", 100 * loop.cpu_s / wall},
            {"runqueue_wait_percent",
             loop.runqueue_wait_s >= 0 ? Json(100 * loop.runqueue_wait_s / wall) : Json(nullptr)},
            {"cpu_us_per_" + what, per_unit(loop.cpu_s)}}},
          {"generator_cpu_s", gen},
          {"generator_cores", gen / wall},
          {"other_processes_cores", (b.machine - a.machine - ctl - gen) / wall}};
}

Json PeaksJson(const SamplePeaks& p) {
  return {{"threads_peak", p.threads_peak},
          {"threads_last", p.threads_last},
          {"rss_peak_mib", p.rss_peak_bytes / 1048576.0},
          {"samples", p.samples}};
}

Json StoreJson(const ControllerProcess& c, const ControllerSampler& sampler) {
  const std::string db = c.temp_dir() + "/data/dhp.db";
  return {{"db_bytes", FileBytes(db)},
          {"wal_bytes", FileBytes(db + "-wal")},
          {"vm_hwm_mib", sampler.VmHwmBytes() / 1048576.0}};
}

Json FleetJson(const FleetCounters& c) {
  Json j = {{"registered", c.registered},
            {"registrations", c.registrations},
            {"reregistrations", c.reregistrations},
            {"register_failures", c.register_failures},
            {"heartbeats_ok", c.heartbeats_ok},
            {"heartbeats_failed", c.heartbeats_failed},
            {"heartbeats_deadline_exceeded", c.heartbeats_deadline},
            {"progress_ok", c.progress_ok},
            {"progress_failed", c.progress_failed},
            {"progress_told_stop", c.progress_stop},
            {"ranks_running", c.ranks},
            {"runs_reporting", c.reporting_runs},
            {"calls_in_flight", c.in_flight},
            {"heartbeat_streams_opened", c.streams_opened},
            {"heartbeat_streams_open", c.streams_open},
            {"heartbeat_stream_fallbacks", c.stream_fallbacks}};
  if (!c.first_error.empty()) j["first_error"] = c.first_error;
  return j;
}

// Heartbeats, send lag and progress reports the fleet recorded over `wall` seconds.
Json SamplesJson(const FleetSamples& s, double wall) {
  Json j;
  j["heartbeats"] = Pct(s.heartbeat_ns);
  j["heartbeats"]["ok"] = s.heartbeats_ok;
  j["heartbeats"]["failed"] = s.heartbeats_failed;
  j["heartbeats"]["deadline_exceeded"] = s.heartbeats_deadline;
  j["heartbeats"]["ok_per_s"] = wall > 0 ? s.heartbeats_ok / wall : 0;
  if (!s.first_error.empty()) j["heartbeats"]["first_error"] = s.first_error;
  j["send_lag"] = Pct(s.lag_ns);
  j["send_lag"]["max_heartbeat_gap_ms"] = s.max_heartbeat_gap_ns / 1e6;
  j["progress"] = Pct(s.progress_ns);
  j["progress"]["ok"] = s.progress_ok;
  j["progress"]["failed"] = s.progress_failed;
  j["progress"]["ok_per_s"] = wall > 0 ? s.progress_ok / wall : 0;
  return j;
}

// Sleeps `seconds` in short steps; false (early) when the sampler trips.
bool Hold(double seconds, const ControllerSampler& sampler) {
  const auto end = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                            std::chrono::duration<double>(seconds));
  while (SteadyClock::now() < end) {
    if (!sampler.Tripped().empty()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

std::string Prefix(const std::string& label, const std::string& name) {
  return "control_plane_bench [" + label + " " + name + "] ";
}

// A case's controller: the child process, the sampler that stops the case past its limits
// (destroyed first), and the gRPC address.
struct CaseController {
  std::unique_ptr<ControllerProcess> process;
  std::unique_ptr<ControllerSampler> sampler;
  std::string target;
};

absl::StatusOr<CaseController> StartCaseController(const BenchOptions& o,
                                                   const std::string& binary) {
  absl::StatusOr<std::unique_ptr<ControllerProcess>> started =
      ControllerProcess::Start(binary, ControllerArgs(o));
  if (!started.ok()) return started.status();
  CaseController c;
  c.process = std::move(*started);
  if (o.keep_temp) c.process->keep_temp_dir();
  c.sampler = std::make_unique<ControllerSampler>(
      c.process->pid(), SamplerLimits{o.max_controller_threads, 0.6});
  c.target = "127.0.0.1:" + std::to_string(c.process->grpc_port());
  return c;
}

}  // namespace

bool HeartbeatStreamFor(const BenchOptions& o, const std::string& label) {
  return o.heartbeat_stream ||
         std::find(o.heartbeat_stream_for.begin(), o.heartbeat_stream_for.end(), label) !=
             o.heartbeat_stream_for.end();
}

int GeneratorRelaysFor(const BenchOptions& o, const std::string& label) {
  const auto& only = o.generator_relays_for;
  return only.empty() || std::find(only.begin(), only.end(), label) != only.end()
             ? o.generator_relays
             : 0;
}

bool RelayProgressFor(const BenchOptions& o, const std::string& label) {
  return o.relay_progress ||
         std::find(o.relay_progress_for.begin(), o.relay_progress_for.end(), label) !=
             o.relay_progress_for.end();
}

Json RunNodeCase(const BenchOptions& o, const std::string& label, const std::string& binary,
                 int nodes, bool full) {
  const std::string name = std::to_string(nodes) + (full ? " full" : " empty");
  const std::string log = Prefix(label, name);
  const bool stream = HeartbeatStreamFor(o, label);
  const int in_generator = GeneratorRelaysFor(o, label);
  const std::string heartbeats_on =
      stream ? "HeartbeatStream"
      : in_generator > 0
          ? "HeartbeatBatch from " + std::to_string(in_generator) + " relays in the generator (" +
                std::to_string(o.relay_window_ms) + " ms window)"
          : "Heartbeat";
  Json r = {{"controller", label},
            {"binary", binary},
            {"case", name},
            {"mode", full ? "full" : "empty"},
            {"nodes", nodes},
            {"jobs", full ? nodes : 0},
            {"heartbeats_on", heartbeats_on},
            {"progress_relayed", RelayProgressFor(o, label)}};
  absl::StatusOr<CaseController> started = StartCaseController(o, binary);
  if (!started.ok()) {
    r["error"] = std::string(started.status().message());
    return r;
  }
  ControllerProcess& controller = *started->process;
  ControllerSampler& sampler = *started->sampler;
  const std::string& target = started->target;
  std::cerr << log << "controller pid " << controller.pid() << " on " << target << " (REST on "
            << controller.http_port() << "), log "
            << controller.log_path() << "; heartbeats on "
            << heartbeats_on
            << (RelayProgressFor(o, label) ? ", progress relayed in them" : "") << "\n";
  auto keep_going = [&] { return sampler.Tripped().empty(); };

  std::vector<std::unique_ptr<ControllerProcess>> relays;
  for (int i = 0; i < o.relays; ++i) {
    auto relay = ControllerProcess::StartRelay(
        o.relay_binary, target, {"--window-ms", std::to_string(o.relay_window_ms)});
    if (!relay.ok()) {
      r["error"] = std::string(relay.status().message());
      return r;
    }
    std::cerr << log << "relay pid " << (*relay)->pid() << " on 127.0.0.1:"
              << (*relay)->grpc_port() << "\n";
    relays.push_back(std::move(*relay));
  }
  r["relays"] = o.relays;
  r["generator_relays"] = in_generator;
  if (o.relays > 0 || in_generator > 0) r["relay_window_ms"] = o.relay_window_ms;

  // ---- ramp-up ---------------------------------------------------------------------------------
  FleetOptions fo;
  fo.target = target;
  fo.nodes = nodes;
  fo.threads = o.threads;
  fo.channels = o.channels;
  fo.register_concurrency = o.register_concurrency;
  fo.progress_interval_ms = o.progress_interval_ms;
  fo.every_rank_reports = o.every_rank_reports;
  fo.rank_metrics = o.rank_metrics;
  for (const std::string& s : o.agent_channel_args) {
    absl::StatusOr<ChannelArg> arg = ParseChannelArg(s);  // checked when parsed
    if (arg.ok() && (arg->label.empty() || arg->label == label)) {
      fo.channel_args.emplace_back(arg->name, arg->value);
    }
  }
  fo.heartbeat_stream = stream;
  fo.relay_progress = RelayProgressFor(o, label);
  for (const auto& relay : relays) {
    fo.heartbeat_targets.push_back("127.0.0.1:" + std::to_string(relay->grpc_port()));
  }
  fo.controller_channels = o.controller_channels;
  fo.in_process_relays = in_generator;
  fo.relay_window_ms = o.relay_window_ms;
  fo.start_spread_ms = o.heartbeat_interval_ms > 0 ? o.heartbeat_interval_ms : 2000;
  AgentFleet fleet(fo);
  ControllerStubs stubs = ConnectStubs(target);
  const auto t0 = SteadyClock::now();
  const auto ramp_end = t0 + std::chrono::duration_cast<SteadyClock::duration>(
                                 std::chrono::duration<double>(o.ramp_timeout_s));
  Json ramp;
  std::vector<std::string> ids;
  auto submit_all = [&] {
    const auto s0 = SteadyClock::now();
    CallStats submits = SubmitMany(target, kEightRankJobSpec, nodes, o.submitters, ramp_end,
                                   kSubmitDeadlineMs, &ids, keep_going);
    ramp["submit_s"] = Since(s0);
    ramp["submit"] = CallJson(submits, Since(s0));
    ramp["jobs_submitted"] = ids.size();
    std::cerr << log << "submitted " << ids.size() << "/" << nodes << " jobs in "
              << Fixed(Since(s0), 1) << " s\n";
  };
  // jobs-first: they queue ("waiting for nodes") while no agent loads the controller, and each
  // node that registers gets one placed on it.
  if (full && o.jobs_first) submit_all();
  const auto r0 = SteadyClock::now();
  fleet.SetRecording(true);  // ramp-up figures too, for a case that never gets to its window
  fleet.Start();
  auto last_log = r0;
  while (fleet.Registered() < nodes && SteadyClock::now() < ramp_end && keep_going()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (SteadyClock::now() - last_log > std::chrono::seconds(5)) {
      last_log = SteadyClock::now();
      std::cerr << log << "registered " << fleet.Registered() << "/" << nodes << " after "
                << Fixed(Since(r0), 0) << " s\n";
    }
  }
  ramp["register_s"] = Since(r0);
  ramp["nodes_registered"] = fleet.Registered();
  bool complete = fleet.Registered() == nodes;
  if (full && !o.jobs_first && keep_going()) submit_all();
  if (full) {
    const auto w0 = SteadyClock::now();
    JobTally tally;
    while (keep_going()) {
      tally = TallyJobsNotRunning(stubs, kQueryDeadlineMs);
      const FleetCounters fc = fleet.Counters();
      std::cerr << log
                << "not RUNNING: " << (tally.ok ? std::to_string(tally.not_running) : tally.error)
                << "; agents run " << fc.ranks << " ranks, " << fc.reporting_runs
                << " ranks report progress\n";
      if (tally.ok && tally.not_running == 0) break;
      if (SteadyClock::now() + std::chrono::seconds(2) >= ramp_end) break;
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    ramp["running_wait_s"] = Since(w0);
    ramp["jobs_not_running"] = TallyJson(tally);
    complete =
        complete && static_cast<int>(ids.size()) == nodes && tally.ok && tally.not_running == 0;
  }
  ramp["seconds"] = Since(t0);
  ramp["complete"] = complete;
  fleet.SetRecording(false);
  ramp.update(SamplesJson(fleet.TakeSamples(), Since(t0)));
  ramp["fleet"] = FleetJson(fleet.Counters());
  ramp["controller"] = PeaksJson(sampler.TakePeaks());
  r["ramp"] = ramp;
  std::cerr << log << "ramp-up " << (complete ? "complete" : "INCOMPLETE") << " after "
            << Fixed(Since(t0), 1) << " s\n";

  // ---- the window ------------------------------------------------------------------------------
  std::pair<int64_t, int64_t> window_us = {0, 0};  // Unix microseconds
  if (keep_going() && Hold(o.settle_s, sampler)) {
    fleet.TakeSamples();
    const std::string page_before = o.server_metrics ? MetricsPage(controller) : "";
    fleet.SetRecording(true);
    const Mark a = TakeMark(controller);
    double relays_cpu = 0;
    for (const auto& relay : relays) relays_cpu -= relay->CpuSeconds();
    Prober::Options po;
    po.target = target;
    po.get_per_s = o.probe_get_per_s;
    po.submit_per_s = o.probe_submit_per_s;
    po.spec_text = kEightRankJobSpec;
    po.deadline_ms = kProbeDeadlineMs;
    Prober prober(po, ids);
    Scraper::Options so;
    so.http_port = controller.http_port();
    so.every_s = o.scrape_every_s;
    so.deadline_ms = kScrapeDeadlineMs;
    Scraper scraper(so);
    prober.Start();
    scraper.Start();
    const bool held = Hold(o.window_s, sampler);
    fleet.SetRecording(false);
    const Mark b = TakeMark(controller);
    for (const auto& relay : relays) relays_cpu += relay->CpuSeconds();
    prober.Stop();
    scraper.Stop();
    const std::string page_after = o.server_metrics ? MetricsPage(controller) : "";
    FleetSamples s = fleet.TakeSamples();
    const double wall = std::chrono::duration<double>(b.t - a.t).count();
    Json w = CpuJson(controller, a, b, s.heartbeats_ok, "heartbeat");
    if (!relays.empty()) {
      w["relays_cpu_s"] = relays_cpu;
      w["relays_cpu_us_per_heartbeat"] =
          s.heartbeats_ok > 0 ? Json(1e6 * relays_cpu / s.heartbeats_ok) : Json(nullptr);
    }
    w["complete"] = held;
    w.update(SamplesJson(s, wall));
    w["probe_get"] = CallJson(prober.gets(), prober.gets().seconds);
    w["probe_submit"] = CallJson(prober.submits(), prober.submits().seconds);
    if (o.scrape_every_s > 0) w["scrapes"] = ScrapeJson(scraper.stats(), o.scrape_every_s);
    w["controller"] = PeaksJson(sampler.TakePeaks());
    if (o.server_metrics) w["server_side"] = ServerSideJson(page_before, page_after);
    w["window_unix_us"] = {a.unix_us, b.unix_us};
    r["window"] = w;
    std::cerr << log << "window " << Fixed(wall, 1) << " s: " << s.heartbeats_ok
              << " heartbeats, p99 " << Fixed(w["heartbeats"]["p99_ms"].get<double>(), 1)
              << " ms\n";

    window_us = {a.unix_us, b.unix_us};
  }

  // ---- what the controller reached -------------------------------------------------------------
  if (!sampler.Tripped().empty()) {
    r["aborted"] = sampler.Tripped();
    std::cerr << log << "ABORTED: " << sampler.Tripped() << "\n";
  }
  Json end;
  if (r.contains("window") && keep_going()) {
    const NodeTally nt = CountNodes(stubs, kQueryDeadlineMs);  // while the agents still beat
    end["nodes"] = {{"ok", nt.ok}, {"total", nt.total}, {"ready", nt.ready}, {"lost", nt.lost}};
    if (!nt.ok) end["nodes"]["error"] = nt.error;
  }
  end["fleet"] = FleetJson(fleet.Counters());
  // The history is read with the agents stopped, so that the controller works off its backlog
  // instead of answering behind seconds of heartbeats; nodes go LOST for good reason only a
  // heartbeat timeout after that, and such events are not counted.
  const int64_t agents_stopped_us = UnixMicros();
  fleet.Stop();
  const LostEvents le = CountLostEvents(stubs, window_us.first, window_us.second, agents_stopped_us,
                                        3 * kQueryDeadlineMs);
  end["lost_events"] = {{"ok", le.ok},
                        {"events_read", le.events_read},
                        {"lost", le.lost},
                        {"lost_in_window", le.lost_in_window},
                        {"nodes", le.nodes}};
  if (!le.ok) end["lost_events"]["error"] = le.error;
  if (full) end["jobs_not_running"] = TallyJson(TallyJobsNotRunning(stubs, kQueryDeadlineMs));
  end["store"] = StoreJson(controller, sampler);
  r["end"] = end;
  r["controller_exit"] = controller.Stop();
  r["case_seconds"] = Since(t0);
  return r;
}

Json RunQueuedCase(const BenchOptions& o, const std::string& label, const std::string& binary) {
  const std::string name = std::to_string(o.queued_jobs) + " queued";
  const std::string log = Prefix(label, name);
  Json r = {{"controller", label}, {"binary", binary}, {"case", name},
            {"mode", "queued"},    {"nodes", 0},       {"jobs", o.queued_jobs}};
  absl::StatusOr<CaseController> started = StartCaseController(o, binary);
  if (!started.ok()) {
    r["error"] = std::string(started.status().message());
    return r;
  }
  ControllerProcess& controller = *started->process;
  ControllerSampler& sampler = *started->sampler;
  const std::string& target = started->target;
  auto keep_going = [&] { return sampler.Tripped().empty(); };
  const auto t0 = SteadyClock::now();

  // Fill the queue (no node ever registers, so every job stays QUEUED).
  std::vector<std::string> ids;
  CallStats fill = SubmitMany(target, kEightRankJobSpec, o.queued_jobs, o.submitters,
                              t0 + std::chrono::duration_cast<SteadyClock::duration>(
                                       std::chrono::duration<double>(o.fill_timeout_s)),
                              kSubmitDeadlineMs, &ids, keep_going);
  r["fill"] = CallJson(fill, fill.seconds);
  r["fill"]["complete"] = static_cast<int>(ids.size()) >= o.queued_jobs;
  r["fill"]["controller"] = PeaksJson(sampler.TakePeaks());
  std::cerr << log << "queued " << ids.size() << " jobs in " << Fixed(fill.seconds, 1) << " s\n";

  if (keep_going()) {
    const Mark a = TakeMark(controller);
    Prober::Options po;
    po.target = target;
    po.get_per_s = o.probe_get_per_s;
    po.submit_per_s = 0;  // the submitters below are the measured load
    po.deadline_ms = kProbeDeadlineMs;
    Prober prober(po, ids);
    prober.Start();
    CallStats more =
        SubmitMany(target, kEightRankJobSpec, int64_t{1} << 40, o.submitters,
                   SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                            std::chrono::duration<double>(o.window_s)),
                   kSubmitDeadlineMs, nullptr, keep_going);
    const Mark b = TakeMark(controller);
    prober.Stop();
    Json w = CpuJson(controller, a, b, more.ok, "submit");
    w["submit"] = CallJson(more, more.seconds);
    w["probe_get"] = CallJson(prober.gets(), prober.gets().seconds);
    w["controller"] = PeaksJson(sampler.TakePeaks());
    r["window"] = w;
    std::cerr << log << "window: " << more.ok << " submits, "
              << Fixed(w["submit"]["ok_per_s"].get<double>(), 0) << " jobs/s, p99 "
              << Fixed(w["submit"]["p99_ms"].get<double>(), 1) << " ms\n";
  }
  r["end"] = {{"store", StoreJson(controller, sampler)}};
  if (!sampler.Tripped().empty()) r["aborted"] = sampler.Tripped();
  r["controller_exit"] = controller.Stop();
  r["case_seconds"] = Since(t0);
  return r;
}

}  // namespace dhp::bench
