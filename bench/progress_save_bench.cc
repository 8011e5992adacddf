// progress_save_bench: what the controller's loop pays to write running runs' step figures
// (Supervisor::SaveProgress, the persist tick's `progress` phase), per run, on a real SQLite
// file in WAL mode as dhp-controller keeps it.
//
//   bazel run -c opt //bench:progress_save_bench -- [--runs 2000] [--rounds 5] [--labels 4]
//
// --runs jobs of the tiny model (2 ranks, one CPU node each, --labels labels each) are
// submitted, placed, launched and reported at step 1 through the Supervisor's own entry points,
// as the controller drives it. Each round then moves the fake clock past
// SupervisorOptions::progress_save_micros, reports every run one step further (rank 0), and
// calls SaveProgress (at most progress_save_batch runs a call, as each persist tick does) until
// none is due, timing each call. Reported: µs per run saved (the mean over all calls), the calls'
// p50 / p99 / max, and, for the same runs, the store's read alone (GetJob + ListRuns, what
// SaveProgress loads per run). Checks that every job's stored latest_step is the last one
// reported, or fails. Prints a Markdown table last and writes
// bench/results/progress_save.{md,json}.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/clock.h"
#include "common/proto_utf8.h"
#include "controller/job_manager.h"
#include "controller/store.h"
#include "controller/supervisor.h"
#include "nlohmann/json.hpp"

namespace dhp::bench {
namespace {

using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
namespace ctl = dhp::controller;

constexpr char kRoot[] = "/data/ckpt";

int64_t NanosSince(SteadyClock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - t0).count();
}

// The tiny model on 2 CPU slots with `labels` labels, as a user's spec would carry them.
std::string SpecText(int i, int labels) {
  std::string text = absl::StrCat(
      "name: run-", i, "\nmodel: {preset: tiny}\n",
      "vision: {parallelism: sequence, degree: 2}\ntext: {parallelism: tensor, degree: 2}\n",
      "training: {max_steps: 1000000}\ncheckpoint: {every_steps: 500, keep_latest: 2}\n",
      "data: {datasets: [shapes], registry: {shapes: {annotation_path: data/train.jsonl}}}\n");
  if (labels > 0) {
    text += "labels: {";
    for (int l = 0; l < labels; ++l) {
      absl::StrAppend(&text, l ? ", " : "", "key", l, ": value-", l, "-of-job-", i);
    }
    text += "}\n";
  }
  return text;
}

// Drives a Supervisor the way the controller's loop does; every call must succeed.
class Cluster {
 public:
  Cluster(ctl::Store& store, FakeClock& clock)
      : store_(store),
        jobs_(store, clock, SpecOptions{kRoot}),
        sup_(store, clock, ctl::SupervisorOptions{kRoot}) {}

  // Node i and job i, placed there, launched and reported at step 1 (RUNNING).
  absl::Status AddRunning(int i, int labels) {
    const std::string node_id = absl::StrCat("node-", i);
    v1::Node node;
    node.set_id(node_id);
    node.set_state(v1::NODE_STATE_READY);
    node.mutable_resources()->set_cpu_slots(2);
    if (auto put = store_.PutNode(node, {}); !put.ok()) return put.status();
    sup_.OnNodeChanged(node);
    v1::SubmitJobRequest req;
    req.set_spec_text(SpecText(i, labels));
    absl::StatusOr<v1::JobSpec> spec = jobs_.ValidateSubmission(req);
    if (!spec.ok()) return spec.status();
    if (absl::Status s = sup_.CheckAdmission(*spec); !s.ok()) return s;
    v1::SubmitJobResponse resp;
    std::vector<v1::Event> events;
    if (absl::Status s = jobs_.SubmitValidated(*spec, false, &resp, &events); !s.ok()) return s;
    sup_.OnJobQueued(resp.job());
    if (absl::Status s = sup_.Schedule(&events); !s.ok()) return s;
    v1::HeartbeatRequest beat;
    beat.set_node_id(node_id);
    v1::HeartbeatResponse told;
    if (absl::Status s = sup_.OnHeartbeat(beat, &told, &events); !s.ok()) return s;
    if (told.ranks_size() != 2) return absl::InternalError(node_id + " was not told 2 ranks");
    for (int rank = 0; rank < 2; ++rank) {
      v1::RankStatus* st = beat.add_ranks();
      st->set_job_id(resp.job().id());
      st->set_attempt(1);
      st->set_world_rank(rank);
      st->set_state(v1::RANK_PROCESS_STATE_RUNNING);
    }
    if (absl::Status s = sup_.OnHeartbeat(beat, &told, &events); !s.ok()) return s;
    ids_.push_back(resp.job().id());
    return Report(ids_.back(), 1);  // RUNNING: written at once
  }

  absl::Status Report(const std::string& job_id, int64_t step) {
    v1::ReportProgressRequest req;
    req.set_job_id(job_id);
    req.set_attempt(1);
    req.set_rank(0);
    req.set_step(step);
    req.set_loss(5.0 - 1e-6 * static_cast<double>(step));
    req.set_total_steps(1000000);
    req.set_tokens_per_second(1234.5);
    req.set_step_seconds(0.8);
    v1::ReportProgressResponse resp;
    std::vector<v1::Event> events;
    return sup_.OnProgress(req, &resp, &events);
  }

  ctl::Supervisor& sup() { return sup_; }
  const std::vector<std::string>& ids() const { return ids_; }

 private:
  ctl::Store& store_;
  ctl::JobManager jobs_;
  ctl::Supervisor sup_;
  std::vector<std::string> ids_;
};

struct Round {
  std::vector<int64_t> call_ns;  // each SaveProgress call
  int64_t saved = 0;             // runs written
  int64_t save_ns = 0;           // all calls
  int64_t read_ns = 0;           // GetJob + ListRuns of the same runs
  int64_t utf8_ns = 0;           // InvalidUtf8Field of the rows read (the store's check)
};

// Reports every run at `step`, then SaveProgress until nothing is due; then times the reads.
absl::StatusOr<Round> RunRound(Cluster& cluster, ctl::Store& store, FakeClock& clock,
                               int64_t step) {
  clock.AdvanceMicros(ctl::SupervisorOptions{kRoot}.progress_save_micros + 1000000);
  for (const std::string& id : cluster.ids()) {
    if (absl::Status s = cluster.Report(id, step); !s.ok()) return s;
  }
  Round round;
  const int64_t due = static_cast<int64_t>(cluster.ids().size());
  const int64_t visited_before = cluster.sup().progress_runs_visited();
  while (true) {
    std::vector<v1::Event> events;
    const auto t0 = SteadyClock::now();
    if (absl::Status s = cluster.sup().SaveProgress(&events); !s.ok()) return s;
    const int64_t ns = NanosSince(t0);
    const int64_t visited = cluster.sup().progress_runs_visited() - visited_before;
    if (visited == round.saved) break;  // nothing was due: this call is not counted
    round.saved = visited;
    round.call_ns.push_back(ns);
    round.save_ns += ns;
  }
  if (round.saved != due) {
    return absl::InternalError(absl::StrCat("SaveProgress looked at ", round.saved, " runs of ",
                                            due, " due"));
  }
  for (const std::string& id : cluster.ids()) {
    const auto t0 = SteadyClock::now();
    absl::StatusOr<v1::Job> job = store.GetJob(id);
    if (!job.ok()) return job.status();
    const std::vector<v1::Run> runs = store.ListRuns(id);
    round.read_ns += NanosSince(t0);
    if (runs.size() != 1) return absl::InternalError(id + ": not one run");
    if (job->latest_step() != step) {
      return absl::InternalError(absl::StrCat(id, " stored step ", job->latest_step(),
                                              ", reported ", step));
    }
    const auto t1 = SteadyClock::now();
    const std::string bad = InvalidUtf8Field(*job) + InvalidUtf8Field(runs[0]);
    round.utf8_ns += NanosSince(t1);
    if (!bad.empty()) return absl::InternalError(id + ": " + bad);
  }
  return round;
}

// Prints the table and writes progress_save.{md,json}.
int Report(const std::vector<Round>& done, const Json& machine, int runs, int rounds, int labels,
           const std::string& out_dir) {
  std::vector<int64_t> calls;
  int64_t saved = 0, save_ns = 0, read_ns = 0, utf8_ns = 0;
  for (const Round& r : done) {
    calls.insert(calls.end(), r.call_ns.begin(), r.call_ns.end());
    saved += r.saved;
    save_ns += r.save_ns;
    read_ns += r.read_ns;
    utf8_ns += r.utf8_ns;
  }
  std::sort(calls.begin(), calls.end());
  const double us_per_run = 1e-3 * static_cast<double>(save_ns) / static_cast<double>(saved);
  const double read_us = 1e-3 * static_cast<double>(read_ns) / static_cast<double>(saved);
  const double utf8_us = 1e-3 * static_cast<double>(utf8_ns) / static_cast<double>(saved);
  const int batch = ctl::SupervisorOptions{kRoot}.progress_save_batch;
  const std::string load_end = Trim(ReadFile("/proc/loadavg"));
  std::ostringstream md;
  md << "## progress_save_bench: the loop's cost of writing running runs' step figures\n\n"
     << machine["date_utc"].get<std::string>() << ", " << machine["nproc"].get<int>()
     << " CPUs (" << machine["cpu_model"].get<std::string>() << "), load average "
     << machine["loadavg_at_start"].get<std::string>() << " at start, " << load_end
     << " at end. `bazel run -c opt //bench:progress_save_bench -- --runs " << runs
     << " --rounds " << rounds << " --labels " << labels << "`.\n\n"
     << runs << " running jobs (tiny model, 2 ranks, " << labels
     << " labels each) in a SQLite file in WAL mode, driven through the Supervisor's entry "
        "points. Each round reports every run one step on and calls SaveProgress (at most "
     << batch << " runs a call, one transaction) until none is due. The read column is "
        "GetJob + ListRuns of the same runs, what SaveProgress loads per run; the UTF-8 column is "
        "the store's check of the job and run rows before it writes them (InvalidUtf8Field).\n\n"
     << "| runs saved | calls | µs per run saved | call p50 / p99 / max ms | of it, µs per "
        "run: reading the rows / checking UTF-8 |\n|---:|---:|---:|---:|---:|\n"
     << "| " << saved << " | " << calls.size() << " | " << Fixed(us_per_run, 1) << " | "
     << Fixed(PercentileMs(calls, 0.5), 2) << " / " << Fixed(PercentileMs(calls, 0.99), 2)
     << " / " << Fixed(PercentileMs(calls, 1.0), 2) << " | " << Fixed(read_us, 1) << " / "
     << Fixed(utf8_us, 1) << " |\n";
  Json j;
  j["benchmark"] = "progress_save_bench";
  j["machine"] = machine;
  j["machine"]["loadavg_at_end"] = load_end;
  j["options"] = {{"runs", runs}, {"rounds", rounds}, {"labels", labels}, {"batch", batch}};
  j["results"] = {{"runs_saved", saved},
                  {"calls", calls.size()},
                  {"us_per_run_saved", us_per_run},
                  {"call_ms_p50", PercentileMs(calls, 0.5)},
                  {"call_ms_p99", PercentileMs(calls, 0.99)},
                  {"call_ms_max", PercentileMs(calls, 1.0)},
                  {"read_us_per_run", read_us},
                  {"utf8_check_us_per_run", utf8_us}};
  const std::string dir = InWorkspace(out_dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/progress_save.md") << md.str();
  std::ofstream(dir + "/progress_save.json") << j.dump(2) << "\n";
  std::cout << md.str();
  return 0;
}

int Main(int argc, char** argv) {
  int runs = 2000;
  int rounds = 5;
  int labels = 4;
  std::string out_dir = "bench/results";
  std::string db_dir = "/tmp";
  CLI::App app{"progress_save_bench: the loop's cost of writing running runs' step figures"};
  app.add_option("--runs", runs, "Running jobs (one node each)")->check(CLI::Range(1, 100000));
  app.add_option("--rounds", rounds, "Rounds (every run saved once a round)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--labels", labels, "Labels per job")->check(CLI::Range(0, 64));
  app.add_option("--db-dir", db_dir, "Where the SQLite file is made (and removed)");
  app.add_option("--out-dir", out_dir, "Where progress_save.md and .json go (relative: workspace)");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);
  const Json machine = MachineInfo();

  const std::string path = absl::StrCat(db_dir, "/progress_save_bench-", getpid(), ".db");
  auto remove_db = [&] {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  };
  remove_db();
  std::vector<Round> done;
  {
    absl::StatusOr<std::unique_ptr<ctl::Store>> store = ctl::Store::Open(path);
    if (!store.ok()) {
      std::cerr << "progress_save_bench: " << store.status() << "\n";
      return 1;
    }
    FakeClock clock;
    Cluster cluster(**store, clock);
    for (int i = 0; i < runs; ++i) {
      if (absl::Status s = cluster.AddRunning(i, labels); !s.ok()) {
        std::cerr << "progress_save_bench: setting up run " << i << ": " << s << "\n";
        remove_db();
        return 1;
      }
    }
    for (int r = 0; r < rounds; ++r) {
      absl::StatusOr<Round> round = RunRound(cluster, **store, clock, 2 + r);
      if (!round.ok()) {
        std::cerr << "progress_save_bench: round " << r << ": " << round.status() << "\n";
        remove_db();
        return 1;
      }
      done.push_back(*std::move(round));
    }
  }
  remove_db();
  return Report(done, machine, runs, rounds, labels, out_dir);
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) { return dhp::bench::Main(argc, argv); }
