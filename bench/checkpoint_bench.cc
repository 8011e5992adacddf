// checkpoint_bench: the step-time overhead of a rank's checkpoints (issue 15 §4: below 2% of
// step time at one checkpoint per 100 steps), synchronous vs asynchronous vs none, side by side
// in one run, through the rank's real code path: a DistTrainer (a world of one rank over real
// Gloo, synthetic batches), DistTrainer::LiveState, SnapshotToHost and the CheckpointWriter
// with MakeRankCheckpointTask (ckpt::WriteTensorShard: temporary file, fsync, CRC-32C, rename,
// directory fsync) and a fake controller that accepts every report.
//
// Two models: the tiny preset, and "mid" (text hidden 384 x 6 layers, vocabulary 8192; vision
// hidden 192 x 4 blocks: about 20 M parameters, a few hundred MB of checkpoint state, a step of
// a few tenths of a second on one CPU core). LibTorch runs one intra-op thread, so that the
// writer's thread has the second core of a 2-core machine, as a GPU rank's host has idle cores.
//
// For each model and each N (--every, default 10 and 100) a round runs one phase of N steps
// per mode, in an order that rotates from round to round: "none" (no checkpoint), "sync" (the
// step boundary writes and reports: checkpoint.async_write false) and "async" (the boundary
// snapshots to host memory; the writer's thread writes and reports while the next steps run).
// A checkpointing phase checkpoints after its first step, and waits for the writer at its end
// (Drain), so a phase holds exactly one checkpoint and all of its cost: the boundary's stall
// and the slowdown of the steps that ran beside the write. Per round, cost = phase time - the
// "none" phase's time in the same round; overhead = cost / the "none" phase's time (i.e. as a
// share of the step time at one checkpoint per N steps). Medians over rounds.
//
//   bazel run //bench:checkpoint_bench -- [--rounds 9] [--rounds-100 2] [--dir /tmp/...]
//
// Prints a Markdown table last and writes bench/results/checkpoint.{md,json}.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/layout.h"
#include "common/model_presets.h"
#include "nlohmann/json.hpp"
#include "worker/ckpt/rank_state_format.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"
#include "worker/model/layers.h"
#include "worker/model/param_init.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/rank/checkpoint_writer.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/rank_checkpoint.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

ModelPreset Mid() {
  ModelPreset p = *FindModelPreset("tiny");
  p.name = "mid";
  p.vision.depth = 4;
  p.vision.hidden_size = 192;
  p.vision.num_heads = 3;
  p.vision.intermediate_size = 768;
  p.vision.fullatt_block_indexes = {1, 3};
  p.vision.out_hidden_size = 384;
  p.text.hidden_size = 384;
  p.text.num_layers = 6;
  p.text.num_heads = 6;
  p.text.num_kv_heads = 2;
  p.text.intermediate_size = 1024;
  p.text.vocab_size = 8192;
  p.text.mrope_section = {8, 12, 12};  // head_dim 64
  return p;
}

struct Mode {
  std::string name;
  bool checkpoint = false;
  bool async = false;
};

// What the fake controller heard.
struct Reports {
  std::mutex mu;  // guards the vectors (the writer's thread appends)
  std::vector<double> write_seconds;
  std::vector<int64_t> file_bytes;
};

struct Phase {
  double seconds = 0;   // the whole phase: N steps, the checkpoint, the final drain
  double boundary = 0;  // the training thread's stall at the checkpoint's step boundary
  double drain = 0;     // the wait for the writer at the phase's end
};

class Runner {
 public:
  Runner(DistTrainer& trainer, std::vector<PackedBatch> batches, std::string dir)
      : trainer_(trainer), batches_(std::move(batches)), dir_(std::move(dir)) {}

  absl::StatusOr<Phase> Run(const Mode& mode, int steps, Reports& reports) {
    CheckpointWriterOptions wo;
    wo.async = mode.async;
    CheckpointWriter writer(
        [&reports](const v1::ReportCheckpointRequest& r) {
          std::lock_guard<std::mutex> lock(reports.mu);
          reports.write_seconds.push_back(r.write_seconds());
          reports.file_bytes.push_back(r.shard().size_bytes());
          return absl::OkStatus();
        },
        wo);
    Phase p;
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      absl::StatusOr<DistStepResult> r = trainer_.Step(batches_);
      if (!r.ok()) return r.status();
      if (!mode.checkpoint || i != 0) continue;
      const Clock::time_point b0 = Clock::now();
      absl::StatusOr<NamedTensors> state = trainer_.LiveState();
      if (state.ok() && mode.async) state = SnapshotToHost(*state);
      if (!state.ok()) return state.status();
      state_bytes_ = TensorBytes(*state);
      ckpt::RankStateMeta meta;
      meta.job_id = "bench";
      meta.step = trainer_.steps_done();
      meta.world_size = 1;
      meta.layout = "vision 1 x text 1 x dp 1, collocated";
      const RankCheckpointTarget target{"bench", 1, 1, 0, dir_};
      absl::Status s = writer.Submit(MakeRankCheckpointTask(target, trainer_.steps_done(),
                                                            *std::move(state), meta.ToMetadata()));
      if (!s.ok()) return s;
      p.boundary = Since(b0);
    }
    const Clock::time_point d0 = Clock::now();
    if (absl::Status s = writer.Drain(); !s.ok()) return s;
    p.drain = Since(d0);
    p.seconds = Since(t0);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // untimed: the controller's keep_latest
    return p;
  }
  int64_t state_bytes() const { return state_bytes_; }

 private:
  DistTrainer& trainer_;
  const std::vector<PackedBatch> batches_;
  const std::string dir_;
  int64_t state_bytes_ = 0;
};

struct Cell {  // one model, one N, one mode: per round
  std::vector<double> seconds, cost, overhead, boundary, drain;
  std::vector<double> waited;  // (stall + drain) / the none phase, %
};

struct ModelResult {
  std::string name;
  int64_t parameters = 0;
  int64_t state_bytes = 0;
  int64_t file_bytes = 0;
  double step_seconds = 0;  // median step of the "none" phases
  double write_gbps = 0;    // file bytes / write_seconds, median
  double snapshot_gbps = 0;  // state bytes / async boundary stall, median
  std::map<int, std::map<std::string, Cell>> cells;  // [N][mode]
};

absl::StatusOr<ModelResult> BenchModel(const ModelPreset& preset, const std::vector<int>& every,
                                       const std::map<int, int>& rounds, const std::string& dir) {
  at::manual_seed(3);
  Qwen2_5_VL model(preset);
  InitQwenWeights(*model);
  ModelResult out;
  out.name = preset.name;
  for (const auto& p : model->parameters()) out.parameters += p.numel();
  const int64_t merge = preset.vision.spatial_merge_size;
  std::vector<PackedBatch> batches = {MakeSyntheticBatch(
      preset, {{1, 4 * merge, 4 * merge}, {1, 4 * merge, 3 * merge}, {1, 2 * merge, 4 * merge}},
      1)};
  comm::InMemoryKvClient kv;
  comm::ProcessGroupsOptions po;
  po.arrival_timeout = po.store_timeout = po.collective_timeout = std::chrono::seconds(60);
  absl::StatusOr<std::unique_ptr<comm::ProcessGroups>> groups =
      comm::ProcessGroups::Create(kv, comm::Layout(), 0, po);
  if (!groups.ok()) return groups.status();
  DistTrainerOptions to;
  to.schedule.max_steps = 1000000;
  to.optimizer.learning_rate = 1e-5;
  absl::StatusOr<std::unique_ptr<DistTrainer>> trainer =
      DistTrainer::Create(preset, model, **groups, nullptr, to);
  if (!trainer.ok()) return trainer.status();
  Runner runner(**trainer, batches, dir);
  Reports reports;
  const std::vector<Mode> modes = {{"none", false, false}, {"sync", true, false},
                                   {"async", true, true}};
  std::vector<double> step_seconds, snapshot_gbps;
  // Warm-up: the first steps allocate (optimizer state) and the first writes create files.
  if (absl::StatusOr<Phase> w = runner.Run(modes[2], 3, reports); !w.ok()) return w.status();
  if (absl::StatusOr<Phase> w = runner.Run(modes[1], 2, reports); !w.ok()) return w.status();
  {
    std::lock_guard<std::mutex> lock(reports.mu);
    reports.write_seconds.clear();
    reports.file_bytes.clear();
  }
  for (int n : every) {
    for (int round = 0; round < rounds.at(n); ++round) {
      std::map<std::string, Phase> phase;
      for (size_t k = 0; k < modes.size(); ++k) {
        const Mode& m = modes[(k + round) % modes.size()];
        absl::StatusOr<Phase> p = runner.Run(m, n, reports);
        if (!p.ok()) return p.status();
        phase[m.name] = *p;
        std::cerr << "checkpoint_bench: " << preset.name << " N " << n << " round " << round
                  << " " << m.name << ": " << Fixed(p->seconds, 3) << " s\n";
      }
      const double base = phase["none"].seconds;
      step_seconds.push_back(base / n);
      for (const Mode& m : modes) {
        Cell& c = out.cells[n][m.name];
        const Phase& p = phase[m.name];
        c.seconds.push_back(p.seconds);
        c.cost.push_back(p.seconds - base);
        c.overhead.push_back(100 * (p.seconds - base) / base);
        c.boundary.push_back(p.boundary);
        c.drain.push_back(p.drain);
        c.waited.push_back(100 * (p.boundary + p.drain) / base);
        if (m.async) snapshot_gbps.push_back(runner.state_bytes() / p.boundary * 1e-9);
      }
    }
  }
  out.state_bytes = runner.state_bytes();
  out.step_seconds = Median(step_seconds);
  out.snapshot_gbps = Median(snapshot_gbps);
  std::lock_guard<std::mutex> lock(reports.mu);
  std::vector<double> gbps;
  for (size_t i = 0; i < reports.write_seconds.size(); ++i) {
    gbps.push_back(reports.file_bytes[i] / reports.write_seconds[i] * 1e-9);
  }
  out.write_gbps = Median(gbps);
  out.file_bytes = reports.file_bytes.empty() ? 0 : reports.file_bytes.back();
  return out;
}

std::string Mb(int64_t bytes) { return Fixed(bytes / 1e6, 1) + " MB"; }

int Main(int argc, char** argv) {
  std::vector<int> every = {10, 100};
  int rounds = 9;
  int rounds_100 = 2;
  std::string dir = "/tmp/dhp-checkpoint-bench";
  std::string out_dir = "bench/results";
  std::vector<std::string> models = {"tiny", "mid"};
  CLI::App app{"checkpoint_bench: step-time overhead of sync vs async checkpoints"};
  app.add_option("--every", every, "Checkpoint every N steps (one phase of N steps per mode)");
  app.add_option("--rounds", rounds, "Rounds for N < 100")->check(CLI::PositiveNumber);
  app.add_option("--rounds-100", rounds_100, "Rounds for N >= 100")->check(CLI::PositiveNumber);
  app.add_option("--models", models, "tiny and/or mid");
  app.add_option("--dir", dir, "Where checkpoints are written (deleted after each phase)");
  app.add_option("--out-dir", out_dir, "Where checkpoint.md and .json go (relative: workspace)");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(1);
  const Json machine = MachineInfo();
  std::map<int, int> rounds_of;
  for (int n : every) rounds_of[n] = n >= 100 ? rounds_100 : rounds;

  std::vector<ModelResult> results;
  for (const std::string& name : models) {
    const ModelPreset preset = name == "mid" ? Mid() : *FindModelPreset(name);
    absl::StatusOr<ModelResult> r = BenchModel(preset, every, rounds_of, dir);
    if (!r.ok()) {
      std::cerr << "checkpoint_bench: " << name << ": " << r.status() << "\n";
      return 1;
    }
    results.push_back(*std::move(r));
  }

  // ---- report -----------------------------------------------------------------------------
  std::ostringstream md;
  md << "## checkpoint_bench: step-time overhead of checkpoints, synchronous vs asynchronous\n\n"
     << machine["date_utc"].get<std::string>() << ", " << machine["nproc"].get<int>()
     << " CPUs (" << machine["cpu_model"].get<std::string>() << "), shared with other work: "
     << "load average " << machine["loadavg_at_start"].get<std::string>() << " at start, "
     << Trim(ReadFile("/proc/loadavg")) << " at end. LibTorch " << at::get_num_threads()
     << " intra-op thread (the writer's thread gets the other core). Checkpoints to `" << dir
     << "` (ext4 on a virtual disk; fsync included). `bazel run //bench:checkpoint_bench"
     << "`.\n\n"
     << "The real path: DistTrainer (a world of 1 rank over Gloo, fp32 on the CPU), LiveState, "
        "SnapshotToHost (async), CheckpointWriter + MakeRankCheckpointTask (WriteTensorShard: "
        "temp file, fsync, CRC-32C, rename, dir fsync), a fake controller that accepts "
        "reports. Per round, one phase of N steps per mode (order rotating): none, sync "
        "(checkpoint.async_write: false), async; a checkpointing phase checkpoints after its "
        "first step and waits for the writer at its end. cost = phase - none phase of the "
        "same round; overhead = cost / none phase = share of step time at 1 checkpoint per N "
        "steps. stall = the training thread's wait at the checkpoint's boundary (sync: the "
        "write and report; async: the snapshot); drain = the wait at the phase end for a write "
        "still running; waited % = (stall + drain) / none phase: the training thread's own wait, without the slowdown of the steps that ran beside an asynchronous write (which only the noisier overhead % includes). Medians over rounds. Aim (issue 15 §4): < 2% at N = 100.\n\n";
  md << "| model | params | state / file per checkpoint | step (none) | write GB/s | snapshot "
        "GB/s |\n|---|---:|---:|---:|---:|---:|\n";
  Json jmodels = Json::array();
  for (const ModelResult& r : results) {
    md << "| " << r.name << " | " << Fixed(r.parameters / 1e6, 2) << " M | " << Mb(r.state_bytes)
       << " / " << Mb(r.file_bytes) << " | " << Fixed(r.step_seconds * 1e3, 1) << " ms | "
       << Fixed(r.write_gbps, 2) << " | " << Fixed(r.snapshot_gbps, 2) << " |\n";
  }
  md << "\n| model | N | mode | rounds | phase s | cost ms | stall ms | drain ms | waited % | "
        "overhead % | min-max % |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const ModelResult& r : results) {
    Json jcells = Json::array();
    for (const auto& [n, by_mode] : r.cells) {
      for (const char* mode : {"none", "sync", "async"}) {
        const Cell& c = by_mode.at(mode);
        const auto [lo, hi] = std::minmax_element(c.overhead.begin(), c.overhead.end());
        md << "| " << r.name << " | " << n << " | " << mode << " | " << c.seconds.size() << " | "
           << Fixed(Median(c.seconds), 3) << " | " << Fixed(Median(c.cost) * 1e3, 1) << " | "
           << Fixed(Median(c.boundary) * 1e3, 1) << " | " << Fixed(Median(c.drain) * 1e3, 1)
           << " | " << Fixed(Median(c.waited), 2) << " | " << Fixed(Median(c.overhead), 2) << " | " << Fixed(*lo, 2) << " to "
           << Fixed(*hi, 2) << " |\n";
        jcells.push_back({{"every", n}, {"mode", mode}, {"rounds", c.seconds.size()},
                          {"phase_seconds", c.seconds}, {"cost_seconds", c.cost},
                          {"overhead_percent", c.overhead}, {"stall_seconds", c.boundary},
                          {"drain_seconds", c.drain}, {"waited_percent", c.waited},
                          {"overhead_percent_median", Median(c.overhead)}});
      }
    }
    jmodels.push_back({{"model", r.name}, {"parameters", r.parameters},
                       {"state_bytes", r.state_bytes}, {"file_bytes", r.file_bytes},
                       {"step_seconds_median", r.step_seconds}, {"write_gbps", r.write_gbps},
                       {"snapshot_gbps", r.snapshot_gbps}, {"cells", jcells}});
  }
  const std::string text = md.str();
  std::cout << text;
  const std::string out = InWorkspace(out_dir);
  std::filesystem::create_directories(out);
  std::ofstream(out + "/checkpoint.md") << text;
  Json j = {{"bench", "checkpoint_bench"}, {"machine", machine}, {"models", jmodels},
            {"threads", at::get_num_threads()}, {"dir", dir}};
  std::ofstream(out + "/checkpoint.json") << j.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) { return dhp::bench::Main(argc, argv); }
