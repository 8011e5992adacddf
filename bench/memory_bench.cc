// memory_bench: the memory planner's per-rank estimate (common/memory_plan.h, PlanDevice::kCpu)
// next to the peak resident memory a real CPU training run of the same spec reaches (issue 13
// §6: aim within ±15%).
//
//   bazel run //bench:memory_bench -- [--steps 2] [--out-dir bench/results]
//
// Each case runs in a child process of its own (this binary with --child K), so that each has
// its own high-water mark (VmHWM): the ranks of the layout as threads over real Gloo build a
// DistTrainer shard-first from InitTensorSource (as dhp-rank does), then train --steps steps on
// a synthetic packed batch that fills the spec's limits: samples of one data.max_pixels image
// each, as many as data.max_seq_len tokens hold (Cases() says which are the planner's worst case). Measured per
// rank: (VmHWM - VmRSS before building) / ranks + VmRSS before building (the ranks share one
// process, so its runtime is counted once per rank, as the planner counts it).
// Not counted on either side: the data loader and the asynchronous checkpoint copies
// (checkpoint.async_write false in every case).
//
// Writes <out-dir>/memory.md (the table) and <out-dir>/memory.json (every number and the
// planner's lines).
#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "common/layout.h"
#include "common/memory_plan.h"
#include "common/mid_preset.h"
#include "common/model_presets.h"
#include "common/proc_status.h"
#include "common/spec_validate.h"
#include "nlohmann/json.hpp"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/model/param_init.h"
#include "worker/model/param_shapes.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/dist_test_util.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp::bench {
namespace {

using Json = nlohmann::json;

struct Case {
  std::string name;
  std::string preset;  // "tiny" or "mid" (below)
  int sv = 1, tt = 1;
  int64_t max_seq_len = 1024;
  int64_t max_pixels = 0;
  bool text_checkpointing = false;
};

// max_pixels of one image of side x side image tokens (merged 2x2 blocks of 14-pixel patches).
constexpr int64_t ImagePixels(int64_t side) { return side * side * 4 * 14 * 14; }

// Most cases hold one sample whose one image fills the sequence: the planner's worst case for
// both stages (a text attention segment of ~max_seq_len tokens, a vision full-attention segment
// of max_pixels). The last case packs many small samples: there the planner is a bound, not an
// estimate (it cannot know that samples are short).
std::vector<Case> Cases() {
  return {
      {"tiny sv1 tt1, 1024 tokens", "tiny", 1, 1, 1024, ImagePixels(31)},
      {"mid sv1 tt1, 1024 tokens", "mid", 1, 1, 1024, ImagePixels(31)},
      {"mid sv1 tt1, 2048 tokens", "mid", 1, 1, 2048, ImagePixels(44)},
      {"mid sv1 tt1, 2048 tokens, text ckpt", "mid", 1, 1, 2048, ImagePixels(44), true},
      {"mid sv2 tt2 collocated, 1024 tokens", "mid", 2, 2, 1024, ImagePixels(31)},
      {"mid sv1 tt1, 1024 tokens in 12 samples", "mid", 1, 1, 1024, ImagePixels(8)},
  };
}

ModelPreset Preset(const std::string& name) {
  return name == "tiny" ? *FindModelPreset("tiny") : MidSizePreset();
}

// max_seq_len: the tokens of the batch actually built (a few fewer than the case's limit, as
// whole samples fill it), so that the planner sizes what the run holds.
v1::JobSpec SpecOf(const Case& c, int64_t max_seq_len) {
  std::ostringstream y;
  y << "name: mem\nmodel: {preset: tiny}\n"
    << "vision: {parallelism: sequence, degree: " << c.sv << ", dtype: fp32}\n"
    << "text: {parallelism: tensor, degree: " << c.tt << ", dtype: fp32"
    << (c.text_checkpointing ? ", activation_checkpointing: true" : "") << "}\n"
    << "data: {datasets: [d], registry: {d: {annotation_path: a.jsonl}}, max_seq_len: "
    << max_seq_len << ", max_pixels: " << c.max_pixels << "}\n"
    << "training: {max_steps: 2}\ncheckpoint: {async_write: false}\n";
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(y.str(), {});
  if (!spec.ok()) {
    std::cerr << "memory_bench: " << c.name << ": " << spec.status() << "\n";
    std::exit(1);
  }
  return *spec;
}

// Samples of one max_pixels image each (square grids), as many as max_seq_len tokens hold.
std::vector<GridThw> Grids(const ModelPreset& p, const Case& c) {
  const int64_t patch = p.vision.patch_size, merge = p.vision.spatial_merge_size;
  int64_t side = 1;
  while ((side + 1) * (side + 1) * merge * merge * patch * patch <= c.max_pixels) ++side;
  const GridThw grid{1, side * merge, side * merge};
  const int64_t per_sample = side * side + 16;  // image tokens + the sample's text (< 16)
  return std::vector<GridThw>(std::max<int64_t>(1, c.max_seq_len / per_sample), grid);
}

// The child: trains the case and prints "DHP_MEM <per-rank bytes> <tokens>".
int RunChild(const Case& c, int steps) {
  const ModelPreset preset = Preset(c.name.substr(0, c.name.find(' ')));
  comm::Layout layout;
  layout.vision_degree = c.sv;
  layout.text_degree = c.tt;
  absl::StatusOr<PackedBatch> batch = MakePositionedSyntheticBatch(preset, Grids(preset, c), 0);
  if (!batch.ok()) {
    std::cerr << batch.status() << "\n";
    return 1;
  }
  const int64_t base = ProcSelfStatusBytes("VmRSS");
  InitTensorSource source(QwenParamShapes(preset), /*seed=*/1, 0.02);
  comm::InMemoryKvClient kv;
  std::atomic<bool> ok{true};
  const auto run_rank = [&](int rank) {
    absl::StatusOr<RankComms> comms = MakeRankComms(kv, layout, rank, {});
    DistTrainerOptions options;
    options.text_activation_checkpointing = c.text_checkpointing;
    absl::StatusOr<std::unique_ptr<DistTrainer>> t =
        comms.ok() ? DistTrainer::Create(preset, source, *comms->groups, comms->handoff.get(),
                                         options)
                   : absl::StatusOr<std::unique_ptr<DistTrainer>>(comms.status());
    for (int s = 0; t.ok() && s < steps; ++s) {
      absl::StatusOr<DistStepResult> r = (*t)->Step({*batch});
      if (!r.ok()) t = r.status();
    }
    if (!t.ok()) {
      std::cerr << "rank " << rank << ": " << t.status() << "\n";
      ok = false;
    }
  };
  std::vector<std::thread> ranks;
  for (int r = 0; r < layout.WorldSize(); ++r) ranks.emplace_back(run_rank, r);
  for (std::thread& t : ranks) t.join();
  const int64_t per_rank = (ProcSelfStatusBytes("VmHWM") - base) / layout.WorldSize() + base;
  std::printf("DHP_MEM %lld %lld\n", static_cast<long long>(per_rank),
              static_cast<long long>(batch->input_ids.numel()));
  return ok ? 0 : 1;
}

struct Measured {
  int64_t bytes = -1, tokens = 0;
};

Measured RunCase(int index, int steps) {
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return {};
  const std::string cmd = "'" + std::string(self) + "' --child " + std::to_string(index) +
                          " --steps " + std::to_string(steps);
  FILE* out = popen(cmd.c_str(), "r");
  if (out == nullptr) return {};
  Measured m;
  char line[256];
  while (std::fgets(line, sizeof line, out) != nullptr) {
    long long bytes = 0, tokens = 0;
    if (std::sscanf(line, "DHP_MEM %lld %lld", &bytes, &tokens) == 2) m = {bytes, tokens};
  }
  return pclose(out) == 0 ? m : Measured{};
}

Json LinesOf(const MemoryPlan& plan) {
  Json kinds = Json::array();
  for (const RankKindMemory& k : plan.kinds) {
    Json lines = Json::object();
    for (const MemoryLine& l : k.lines) lines[l.item] = l.bytes;
    kinds.push_back({{"kind", k.kind}, {"total", k.total}, {"lines", lines}});
  }
  return kinds;
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) {
  using namespace dhp;
  using namespace dhp::bench;
  int steps = 2, child = -1;
  std::string out_dir = "bench/results";
  CLI::App app{"memory_bench: the memory planner's CPU estimate vs measured peak RSS per rank"};
  app.add_option("--steps", steps, "Training steps per case")->check(CLI::PositiveNumber);
  app.add_option("--out-dir", out_dir, "Where memory.md and memory.json go");
  app.add_option("--child", child, "(internal) run case K and print its peak");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);
  const std::vector<Case> cases = Cases();
  if (child >= 0) return child < static_cast<int>(cases.size()) ? RunChild(cases[child], steps) : 2;

  Json rows = Json::array();
  std::ostringstream md;
  md << "# Memory planner vs measured peak RSS (CPU)\n\n"
     << "`bazel run //bench:memory_bench -- --steps " << steps << "`: the planner's per-rank "
     << "estimate (common/memory_plan.h, PlanDevice::kCpu, data.max_seq_len = the batch's "
     << "tokens) next to the peak RSS of " << steps << " real fp32 training steps of the same "
     << "layout (ranks as threads over Gloo in one child process per case; per rank: the rise "
     << "of VmHWM over the process's RSS before building, divided by the ranks, plus that RSS). "
     << "One sample whose one image fills the sequence is the planner's worst case; the last "
     << "case packs 12 short samples, where the planner is a bound. `mid`: 202M parameters "
     << "(12-layer 1024-wide decoder, vocabulary 32000, 2-block vision tower). Error = "
     << "(planner - measured) / measured.\n\n";
  md << "| case | tokens | planner (GiB) | measured peak RSS per rank (GiB) | planner error |\n"
     << "|---|---:|---:|---:|---:|\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Measured m = RunCase(static_cast<int>(i), steps);
    if (m.bytes <= 0) {
      std::cerr << "memory_bench: " << c.name << ": the child failed\n";
      return 1;
    }
    absl::StatusOr<MemoryPlan> plan = PlanMemory(
        SpecOf(c, m.tokens), Preset(c.name.substr(0, c.name.find(' '))), PlanDevice::kCpu);
    if (!plan.ok()) {
      std::cerr << "memory_bench: " << c.name << ": " << plan.status() << "\n";
      return 1;
    }
    const double error = 100.0 * (plan->PeakBytes() - m.bytes) / m.bytes;
    md << "| " << c.name << " | " << m.tokens << " | " << GiBText(plan->PeakBytes()) << " | "
       << GiBText(m.bytes) << " | " << (error >= 0 ? "+" : "") << Fixed(error, 1) << "% |\n";
    rows.push_back({{"case", c.name}, {"tokens", m.tokens}, {"planner_bytes", plan->PeakBytes()},
                    {"measured_bytes", m.bytes}, {"error_percent", error},
                    {"plan", LinesOf(*plan)}});
    std::cout << c.name << ": planner " << GiBText(plan->PeakBytes()) << " GiB, measured "
              << GiBText(m.bytes) << " GiB\n";
  }
  std::cout << "\n" << md.str();
  std::ofstream(out_dir + "/memory.md") << md.str();
  std::ofstream(out_dir + "/memory.json")
      << Json{{"machine", MachineInfo()}, {"steps", steps}, {"rows", rows}}.dump(2) << "\n";
  return 0;
}
