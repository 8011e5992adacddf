// parallel_bench: bytes moved per training step per stage, by layout, counted from the
// collectives (CommStats: bytes by tensor size, not bytes on the wire; comm_wire_bench measures
// those) and compared with the analytic volumes (vision_comm_volume.h, text_tp_model.h), plus
// CPU step times per layout side by side in one run.
//
// Three parts, one process:
//   1. MEASURED (exact check): the Qwen2.5-VL-7B vision WIDTH (hidden 1280, 16 heads, MLP 3420,
//      out 3584) at depth 2 (block 0 window attention, block 1 full attention), fp32, on 1k and
//      2k patches, for Ulysses SP 2/4 and vision TP 2/4: one forward + backward per layout over
//      real Gloo groups (ranks as threads), CommStats read per rank and compared op by op with
//      UlyssesStepVolume / VisionTpStepVolume for the same shapes. The tiny text decoder under
//      TP 2 is checked the same way against the text_tp_model.h formula (in part 3's runs).
//   2. ANALYTIC at full size: the same formulas for the full 7B tower (32 blocks, 4 full
//      attention) at 4k and 16k vision tokens, SP and TP 2/4/8, bf16 (2 bytes on the wire, as
//      NCCL moves it), and the 7B text decoder's TP all-reduces for 4k+512 and 16k+512 tokens.
//      "Vision tokens" = merged tokens fed to the LLM (<|image_pad|> slots) = patches / 4.
//   3. CPU step times (tiny preset) for vision SP 1/2/4, vision TP 2, text TP 1/2, round-robin
//      over layouts in one run; medians of the per-step wall times of rank 0 (steps fenced by
//      barriers). LibTorch 1 intra-op thread, OpenBLAS 1 thread, OMP_WAIT_POLICY=PASSIVE (the
//      binary re-executes itself once to set the environment before libgomp/OpenBLAS load).
//
// bazel run //bench:parallel_bench -- [--rounds 5] [--steps 3] [--out-dir bench/results]
// Prints Markdown tables last and writes bench/results/parallel.{md,json}.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/model_presets.h"
#include "nlohmann/json.hpp"
#include "worker/comm/comm_stats.h"
#include "worker/comm/communicator.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"
#include "worker/model/layers.h"
#include "worker/model/param_count.h"
#include "worker/model/param_init.h"
#include "worker/model/text_model.h"
#include "worker/model/torch_status.h"
#include "worker/model/vision_model.h"
#include "worker/model/vision_window.h"
#include "worker/parallel/text_tp_model.h"
#include "worker/parallel/ulysses_vision.h"
#include "worker/parallel/vision_comm_volume.h"
#include "worker/parallel/vision_sequence_split.h"
#include "worker/parallel/vision_tp.h"

namespace dhp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// ---- ranks as threads over real Gloo (the worker/comm test pattern) ---------------------------

using RankBody =
    std::function<absl::Status(int rank, comm::Communicator& comm, comm::CommStats& stats)>;

// Runs body on `size` threads, each with its own communicator of `group` (Gloo; size 1: local)
// and its own CommStats, over one InMemoryKvClient. Returns the first failure by rank.
absl::Status RunRanks(int size, const std::string& group, const RankBody& body) {
  comm::InMemoryKvClient kv;
  comm::GroupSpec spec;
  spec.name = group;
  for (int r = 0; r < size; ++r) spec.world_ranks.push_back(r);
  comm::ProcessGroupsOptions options;
  options.ns = absl::StrCat("bench/", group, "/");
  options.arrival_timeout = options.store_timeout = std::chrono::seconds(120);
  options.collective_timeout = std::chrono::seconds(300);
  std::vector<comm::CommStats> stats(size);
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto c = comm::CreateCommunicator(kv, spec, r, options, &stats[r]);
      if (!c.ok()) {
        results[r] = c.status();
        return;
      }
      try {
        results[r] = body(r, **c, stats[r]);
        if (results[r].ok()) results[r] = (*c)->Barrier();  // nobody leaves while peers talk
      } catch (const c10::Error& e) {
        results[r] = TorchErrorToStatus(e, absl::StrCat("rank ", r));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void Check(const absl::Status& s, const std::string& what) {
  if (s.ok()) return;
  std::cerr << "parallel_bench: " << what << ": " << s << "\n";
  std::exit(1);
}

// op -> counters of one rank, for one group.
OpVolumes CountersOf(const comm::CommStats& stats) {
  OpVolumes out;
  for (const auto& [key, counters] : stats.Snapshot()) out[key.second] += counters;
  return out;
}

bool SameVolumes(const OpVolumes& a, const OpVolumes& b) {
  auto nonzero = [](const OpVolumes& v) {
    OpVolumes o;
    for (const auto& [op, c] : v) {
      if (c.calls != 0 || c.tensor_bytes_sent != 0 || c.tensor_bytes_received != 0) o[op] = c;
    }
    return o;
  };
  const OpVolumes x = nonzero(a), y = nonzero(b);
  if (x.size() != y.size()) return false;
  for (const auto& [op, c] : x) {
    auto it = y.find(op);
    if (it == y.end() || !(it->second == c)) return false;
  }
  return true;
}

std::string Ops(const OpVolumes& v) {
  std::string s;
  for (const auto& [op, c] : v) {
    if (c.calls == 0) continue;
    absl::StrAppend(&s, s.empty() ? "" : ", ", op, " x", c.calls);
  }
  return s.empty() ? "none" : s;
}

double MiB(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
double GiB(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); }

VisionTransformer CloneVision(const VisionTransformer& src) {
  VisionTransformer dst(src->config());
  at::NoGradGuard no_grad;
  auto from = src->named_parameters(/*recurse=*/true);
  for (auto& item : dst->named_parameters(/*recurse=*/true)) item.value().copy_(from[item.key()]);
  return dst;
}

VisionWindowPlan PlanOf(const std::vector<GridThw>& grids, const VisionConfig& c) {
  auto plan = MakeVisionWindowPlan(grids, c);
  Check(plan.status(), "window plan");
  return *std::move(plan);
}

at::Tensor PixelsOf(const VisionConfig& c, int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  const int64_t dim = int64_t{c.in_channels} * c.temporal_patch_size * c.patch_size * c.patch_size;
  return at::randn({n, dim});
}

// `count` images of side x side patches (side multiple of 8: whole 112 px windows).
std::vector<GridThw> Images(int count, int64_t side) {
  return std::vector<GridThw>(count, GridThw{1, side, side});
}

// ---- part 1: measured vision bytes at 7B width ------------------------------------------------

struct MeasuredRow {
  std::string layout;  // "SP 2", "TP 4"
  int degree = 0;
  int64_t patches = 0;
  std::string ops;
  int64_t rank0_sent = 0, rank0_analytic = 0;
  int64_t group_sent = 0, group_analytic = 0;  // summed over ranks
  bool exact = true;                           // every rank, every op
  double seconds = 0;                          // wall time of the run (one step, incl. setup)
};

// kind: "SP" or "TP".
MeasuredRow MeasureVision(const std::string& kind, int degree, const VisionConfig& c,
                          const VisionTransformer& ref, const std::vector<GridThw>& grids) {
  const VisionWindowPlan plan = PlanOf(grids, c);
  const at::Tensor pixels = PixelsOf(c, plan.num_patches, 21);
  at::manual_seed(23);
  const at::Tensor upstream = at::randn({plan.num_units, c.out_hidden_size});  // complete grad
  MeasuredRow row;
  row.layout = kind + " " + std::to_string(degree);
  row.degree = degree;
  row.patches = plan.num_patches;
  std::vector<OpVolumes> got(degree), want(degree);
  std::vector<VisionTransformer> replicas;
  if (kind == "SP") {
    for (int r = 0; r < degree; ++r) replicas.push_back(CloneVision(ref));
  }
  const auto t0 = Clock::now();
  absl::Status s = RunRanks(
      degree, "vision." + kind + std::to_string(degree),
      [&](int r, comm::Communicator& comm, comm::CommStats& stats) -> absl::Status {
        if (kind == "SP") {
          auto uv = UlyssesVisionTransformer::Create(replicas[r], comm);
          if (!uv.ok()) return uv.status();
          auto split = (*uv)->Split(plan);
          if (!split.ok()) return split.status();
          at::Tensor out = (*uv)->Forward(pixels, plan, *split);
          out.backward(upstream);
          got[r] = CountersOf(stats);
          want[r] = UlyssesStepVolume(c, *split, r, 4, UlyssesOutputGrad::kReplicated);
        } else {
          auto tp = VisionTpTransformer::Create(ref, comm);
          if (!tp.ok()) return tp.status();
          at::Tensor out = (*tp)->Forward(pixels, plan);
          out.backward(upstream);
          got[r] = CountersOf(stats);
          want[r] = VisionTpStepVolume(c, plan.num_patches, degree, 4);
        }
        return absl::OkStatus();
      });
  Check(s, "vision " + row.layout);
  row.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int r = 0; r < degree; ++r) {
    row.exact = row.exact && SameVolumes(got[r], want[r]);
    row.group_sent += TotalOf(got[r]).tensor_bytes_sent;
    row.group_analytic += TotalOf(want[r]).tensor_bytes_sent;
  }
  row.rank0_sent = TotalOf(got[0]).tensor_bytes_sent;
  row.rank0_analytic = TotalOf(want[0]).tensor_bytes_sent;
  row.ops = Ops(got[0]);
  return row;
}

// ---- part 2: analytic full size --------------------------------------------------------------

struct AnalyticVisionRow {
  int64_t tokens = 0, patches = 0;
  int degree = 0;
  int64_t sp = 0, tp = 0;  // bytes sent per rank per step (activations)
  int64_t sp_grad = 0;     // + ZeRO-1 gradient reduce-scatter + parameter all-gather, per rank
};

AnalyticVisionRow AnalyticVision(const VisionConfig& c, int64_t tokens, int degree,
                                 int64_t param_count, int64_t b) {
  // 896 x 896 px images: 64 x 64 patches = 4096 patches = 1024 tokens, 64 whole windows each.
  const int images = static_cast<int>(tokens / 1024);
  const VisionWindowPlan plan = PlanOf(Images(images, 64), c);
  auto split = SplitVisionSequence(plan, degree, int64_t{c.spatial_merge_size} *
                                                     c.spatial_merge_size);
  Check(split.status(), "split");
  AnalyticVisionRow row;
  row.tokens = tokens;
  row.patches = plan.num_patches;
  row.degree = degree;
  for (int r = 0; r < degree; ++r) {  // the most loaded rank (even split: all equal)
    row.sp =
        std::max(row.sp, TotalOf(UlyssesStepVolume(c, *split, r, b, UlyssesOutputGrad::kReplicated))
                             .tensor_bytes_sent);
  }
  row.tp = TotalOf(VisionTpStepVolume(c, plan.num_patches, degree, b)).tensor_bytes_sent;
  row.sp_grad = comm::ReduceScatterVolume(param_count * b, degree).sent +
                comm::AllGatherVolume(param_count * b / degree, degree).sent;
  return row;
}

// text_tp_model.h: per step (4L+2) all-reduces of [S, H] + one of [S] fp32 + one of [S, 2] fp32
// (+ the KV-gradient sum when T > Hkv). Bytes sent per rank.
comm::CommCounters TextTpVolume(const TextConfig& c, int t, int64_t s, int64_t b) {
  comm::CommCounters v;
  if (t <= 1) return v;
  auto add = [&](int64_t bytes, int times) {
    const comm::Volume x = comm::AllReduceVolume(bytes, t);
    v.calls += times;
    v.tensor_bytes_sent += times * x.sent;
    v.tensor_bytes_received += times * x.received;
  };
  add(s * c.hidden_size * b, 4 * c.num_layers + 2);
  add(s * 4, 1);
  add(2 * s * 4, 1);
  if (t > c.num_kv_heads) {
    const int64_t d = c.hidden_size / c.num_heads;
    add(int64_t{c.num_layers} * 2 * c.num_kv_heads * d * (c.hidden_size + 1) * b, 1);
  }
  return v;
}

// ---- part 3: CPU step times, tiny preset ------------------------------------------------------

struct TimedLayout {
  std::string stage, layout;
  std::string kind;  // "SP", "TP", "text"
  int degree = 1;
  std::vector<double> step_ms;
  OpVolumes rank0;  // counters of one step on rank 0
  bool exact = true;
  int64_t analytic_sent = 0;
};

// One call: `warmup` + `steps` steps; appends the timed steps' wall time (rank 0, barrier-fenced).
void TimeVision(TimedLayout& L, const VisionConfig& c, const VisionTransformer& ref,
                const VisionWindowPlan& plan, const at::Tensor& pixels, const at::Tensor& upstream,
                int warmup, int steps) {
  std::vector<VisionTransformer> replicas;
  if (L.kind == "SP") {
    for (int r = 0; r < L.degree; ++r) replicas.push_back(CloneVision(ref));
  }
  std::vector<double> times;
  std::atomic<bool> exact{true};
  absl::Status s = RunRanks(
      L.degree, "tiny.vision." + L.layout,
      [&](int r, comm::Communicator& comm, comm::CommStats& stats) -> absl::Status {
        std::unique_ptr<UlyssesVisionTransformer> uv;
        std::unique_ptr<VisionTpTransformer> tp;
        VisionSequenceSplit split;
        if (L.kind == "SP") {
          auto made = UlyssesVisionTransformer::Create(replicas[r], comm);
          if (!made.ok()) return made.status();
          uv = *std::move(made);
          auto sp = uv->Split(plan);
          if (!sp.ok()) return sp.status();
          split = *sp;
        } else {
          auto made = VisionTpTransformer::Create(ref, comm);
          if (!made.ok()) return made.status();
          tp = *std::move(made);
        }
        for (int i = 0; i < warmup + steps; ++i) {
          if (absl::Status b = comm.Barrier(); !b.ok()) return b;
          stats.Reset();
          const auto t0 = Clock::now();
          at::Tensor out = uv ? uv->Forward(pixels, plan, split) : tp->Forward(pixels, plan);
          out.backward(upstream);
          const OpVolumes got = CountersOf(stats);  // before the fencing barrier
          if (absl::Status b = comm.Barrier(); !b.ok()) return b;
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          const OpVolumes want =
              uv ? UlyssesStepVolume(c, split, r, 4, UlyssesOutputGrad::kReplicated)
                 : VisionTpStepVolume(c, plan.num_patches, L.degree, 4);
          if (!SameVolumes(got, want)) exact = false;
          if (r == 0) {
            L.rank0 = got;
            L.analytic_sent = TotalOf(want).tensor_bytes_sent;
            if (i >= warmup) times.push_back(ms);
          }
          // Gradients accumulate across steps; irrelevant for timing and bytes.
        }
        return absl::OkStatus();
      });
  Check(s, "timed vision " + L.layout);
  L.exact = L.exact && exact.load();
  L.step_ms.insert(L.step_ms.end(), times.begin(), times.end());
}

struct TextBatch {
  at::Tensor ids, labels, positions;
  std::vector<int64_t> cu;
};

void TimeText(TimedLayout& L, const TextConfig& c, TextForCausalLM& ref, const TextBatch& batch,
              int warmup, int steps) {
  std::vector<double> times;
  std::atomic<bool> exact{true};
  const int64_t s_len = batch.ids.size(0);
  absl::Status s = RunRanks(
      L.degree, "tiny.text." + L.layout,
      [&](int r, comm::Communicator& comm, comm::CommStats& stats) -> absl::Status {
        auto made = tp::CreateTextTpModel(c, ModuleTensorSource(*ref), comm);
        if (!made.ok()) return made.status();
        tp::TextTpModel m = *made;
        for (int i = 0; i < warmup + steps; ++i) {
          if (absl::Status b = comm.Barrier(); !b.ok()) return b;
          stats.Reset();
          const auto t0 = Clock::now();
          at::Tensor embeds = m->Embed(batch.ids);
          auto [sum, count] = m->forward(embeds, batch.positions, batch.labels, batch.cu);
          (sum / count.to(at::kFloat)).backward();
          const OpVolumes got = CountersOf(stats);
          if (absl::Status b = comm.Barrier(); !b.ok()) return b;
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          OpVolumes want;
          const comm::CommCounters v = TextTpVolume(c, L.degree, s_len, 4);
          if (v.calls > 0) want[comm::kOpAllReduce] = v;
          if (!SameVolumes(got, want)) exact = false;
          if (r == 0) {
            L.rank0 = got;
            L.analytic_sent = v.tensor_bytes_sent;
            if (i >= warmup) times.push_back(ms);
          }
        }
        return absl::OkStatus();
      });
  Check(s, "timed text " + L.layout);
  L.exact = L.exact && exact.load();
  L.step_ms.insert(L.step_ms.end(), times.begin(), times.end());
}

bool SetBlasThreads(int n) {
  using SetFn = void (*)(int);
  auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (fn != nullptr) fn(n);
  return fn != nullptr;
}

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return Fixed(GiB(b), 2) + " GiB";
  return Fixed(MiB(b), 1) + " MiB";
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) {
  using namespace dhp;
  using namespace dhp::bench;
  // libgomp and OpenBLAS read their environment when they load: set it, then start again.
  if (std::getenv("DHP_PARALLEL_BENCH_REEXEC") == nullptr) {
    setenv("DHP_PARALLEL_BENCH_REEXEC", "1", 1);
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    execv("/proc/self/exe", argv);  // on failure: go on in this process
  }
  int rounds = 5, steps = 3, warmup = 1;
  bool skip_measured = false;
  std::string out_dir = "bench/results";
  CLI::App app{"parallel_bench: bytes per step per stage by layout (counted vs analytic), and "
               "CPU step times per layout"};
  app.add_option("--rounds", rounds, "Round-robin rounds over the timed layouts")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "Timed steps per layout per round")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Untimed steps per layout per round")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--skip-measured", skip_measured, "Skip part 1 (7B-width measured bytes)");
  app.add_option("--out-dir", out_dir, "Where parallel.md and parallel.json go");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);

  at::set_num_threads(1);
  const bool openblas = SetBlasThreads(1);
  const Json machine = MachineInfo();
  const auto t_start = Clock::now();

  // ---- part 1 ----
  const ModelPreset& q7 = *FindModelPreset("qwen2_5_vl_7b");
  VisionConfig wide = q7.vision;  // 7B width
  wide.depth = 2;
  wide.fullatt_block_indexes = {1};
  std::vector<MeasuredRow> measured;
  if (!skip_measured) {
    at::manual_seed(5);
    VisionTransformer ref(wide);
    InitQwenWeights(*ref, 0.02);
    // 1k patches: one 448 x 448 px image (32 x 32 patches, 16 windows of 8 x 8 patches);
    // 2k patches: two of them (two frames: full attention stays within each).
    for (int images : {1, 2}) {
      for (const char* kind : {"SP", "TP"}) {
        for (int d : {2, 4}) {
          measured.push_back(MeasureVision(kind, d, wide, ref, Images(images, 32)));
          const MeasuredRow& m = measured.back();
          std::fprintf(stderr,
                       "[measured] %s, %lld patches: %lld B sent rank 0 (analytic %lld) %s, "
                       "%.1f s\n",
                       m.layout.c_str(), static_cast<long long>(m.patches),
                       static_cast<long long>(m.rank0_sent),
                       static_cast<long long>(m.rank0_analytic), m.exact ? "exact" : "MISMATCH",
                       m.seconds);
        }
      }
    }
  }

  // ---- part 2 ----
  const int64_t b = 2;  // bf16 on the wire
  const ParamCount pc = CountParams(q7.vision, q7.text);
  std::vector<AnalyticVisionRow> analytic;
  for (int64_t tokens : {4096, 16384}) {
    for (int d : {2, 4, 8}) {
      analytic.push_back(AnalyticVision(q7.vision, tokens, d, pc.vision_total, b));
    }
  }
  struct TextRow {
    int64_t seq;
    int t;
    comm::CommCounters v;
  };
  std::vector<TextRow> text_rows;
  for (int64_t vt : {4096, 16384}) {
    for (int t : {2, 4}) text_rows.push_back({vt + 512, t, TextTpVolume(q7.text, t, vt + 512, b)});
  }

  // ---- part 3 ----
  const ModelPreset& tiny = *FindModelPreset("tiny");
  const VisionConfig& tv = tiny.vision;
  at::manual_seed(7);
  VisionTransformer tiny_vision(tv);
  InitQwenWeights(*tiny_vision, 0.05);
  // 4 images of 224 x 224 px: 1024 patches, 256 vision tokens, 64 windows.
  const VisionWindowPlan tplan = PlanOf(Images(4, 16), tv);
  const at::Tensor tpixels = PixelsOf(tv, tplan.num_patches, 9);
  at::manual_seed(10);
  const at::Tensor tupstream = at::randn({tplan.num_units, tv.out_hidden_size});
  const TextConfig& tt = tiny.text;
  at::manual_seed(11);
  TextForCausalLM tiny_text(tt);
  InitQwenWeights(*tiny_text, 0.05);
  TextBatch tb;
  const int64_t text_len = tplan.num_units + 256;  // 256 vision tokens + 256 text tokens
  at::manual_seed(12);
  tb.ids = at::randint(0, 1000, {text_len}, at::kLong);
  tb.labels = tb.ids.clone();
  tb.positions = at::arange(text_len).unsqueeze(0).expand({3, -1}).contiguous();
  tb.cu = {0, text_len};

  std::vector<TimedLayout> timed = {
      {"vision", "SP 1", "SP", 1}, {"vision", "SP 2", "SP", 2}, {"vision", "SP 4", "SP", 4},
      {"vision", "TP 2", "TP", 2}, {"text", "TP 1", "text", 1}, {"text", "TP 2", "text", 2},
  };
  for (int round = 0; round < rounds; ++round) {
    for (TimedLayout& L : timed) {
      if (L.kind == "text") {
        TimeText(L, tt, tiny_text, tb, warmup, steps);
      } else {
        TimeVision(L, tv, tiny_vision, tplan, tpixels, tupstream, warmup, steps);
      }
    }
    std::fprintf(stderr, "[timed] round %d done\n", round + 1);
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();

  // ---- report ----
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  std::ostringstream md;
  md << "## parallel_bench: bytes per step per stage by layout (counted vs analytic), CPU step "
        "times\n\n"
     << machine["date_utc"].get<std::string>() << ", " << machine["nproc"] << " CPUs ("
     << machine["cpu_model"].get<std::string>() << "), shared: load average "
     << machine["loadavg_at_start"].get<std::string>() << " at start, "
     << Trim(ReadFile("/proc/loadavg")) << " at end; run " << Fixed(total_s, 0)
     << " s. LibTorch " << TORCH_VERSION << ", 1 intra-op thread, OpenBLAS threads "
     << (openblas ? "1" : "n/a") << ", OMP_WAIT_POLICY " << (wait_policy ? wait_policy : "unset")
     << ". Ranks are threads of one process over real Gloo groups. Bytes are per rank per step "
        "(forward + backward) as CommStats counts them: bytes by tensor size SENT (the "
        "collectives' formula volume, not bytes on the wire: bench/results/comm_wire.md); "
        "received is symmetric; MiB = 2^20 B. **Vision tokens** = merged tokens fed to the LLM (<|image_pad|> slots) = "
        "patches / 4.\n\n";

  Json j;
  j["machine"] = machine;
  j["run_seconds"] = total_s;
  j["vision_tokens_definition"] = "merged tokens fed to the LLM = patches / 4";

  if (!measured.empty()) {
    md << "### 1. Measured vs analytic, 7B vision width at depth 2, fp32\n\n"
       << "hidden 1280, 16 heads, MLP 3420, out 3584; block 0 window attention, block 1 full "
          "attention (the 7B tower has 28 + 4; SP bytes scale with the full-attention blocks, TP "
          "bytes with all blocks, so part 2 evaluates the verified formulas at depth 32). "
          "Images of 448 x 448 px (32 x 32 patches, 16 windows of 64 patches each). Output "
          "gradient complete on every rank (kReplicated). Exact = every rank's counters equal the "
          "analytic ones op by op.\n\n"
       << "| patches | vision tokens | layout | collectives (rank 0) | rank 0 sent | analytic | "
          "group sent | exact | run s |\n|---|---|---|---|---|---|---|---|---|\n";
    Json arr = Json::array();
    for (const MeasuredRow& m : measured) {
      md << "| " << m.patches << " | " << m.patches / 4 << " | " << m.layout << " | " << m.ops
         << " | " << Fixed(MiB(m.rank0_sent), 2) << " MiB | " << Fixed(MiB(m.rank0_analytic), 2)
         << " MiB | " << Fixed(MiB(m.group_sent), 2) << " MiB | " << (m.exact ? "yes" : "**NO**")
         << " | " << Fixed(m.seconds, 1) << " |\n";
      arr.push_back({{"patches", m.patches}, {"vision_tokens", m.patches / 4},
                     {"layout", m.layout}, {"collectives_rank0", m.ops},
                     {"rank0_bytes_sent", m.rank0_sent}, {"rank0_bytes_analytic", m.rank0_analytic},
                     {"group_bytes_sent", m.group_sent}, {"group_bytes_analytic", m.group_analytic},
                     {"exact", m.exact}, {"run_seconds", m.seconds}});
    }
    md << "\nMeasured TP/SP ratio (rank 0 bytes, same shapes): ";
    for (size_t i = 0; i + 3 < measured.size(); i += 4) {
      md << measured[i].patches << " patches: degree 2 "
         << Fixed(double(measured[i + 2].rank0_sent) / measured[i].rank0_sent, 1) << "x, degree 4 "
         << Fixed(double(measured[i + 3].rank0_sent) / measured[i + 1].rank0_sent, 1) << "x; ";
    }
    md << "the same at both lengths (both volumes are linear in patches). At depth 2, half the "
          "blocks are full attention (1/8 in the 7B tower), which makes SP relatively costlier "
          "here than at full depth; part 2 gives the full-depth ratio.\n\n";
    j["measured_vision_7b_width_depth2"] = arr;
  }

  md << "### 2. Analytic, full Qwen2.5-VL-7B vision encoder (32 blocks, 4 full attention), bf16\n\n"
     << "Per rank per step, bytes sent. Images of 896 x 896 px (1024 vision tokens each). SP = "
        "Ulysses activations (all-to-all x4 per full block, output all-gather); TP = Megatron "
        "all-reduces (4 per block + merger). SP+grad adds the ZeRO-1 gradient reduce-scatter and "
        "parameter all-gather over the SP group ("
     << Fixed(pc.vision_total / 1e6, 1)
     << " M vision parameters, bf16), which TP does not need within its group and which does not "
        "grow with tokens.\n\n"
     << "| vision tokens | patches | degree | SP | TP | **TP / SP** | SP + grad sync | TP / "
        "(SP + grad) |\n|---|---|---|---|---|---|---|---|\n";
  Json arr2 = Json::array();
  for (const AnalyticVisionRow& a : analytic) {
    md << "| " << a.tokens << " | " << a.patches << " | " << a.degree << " | " << Bytes(a.sp)
       << " | " << Bytes(a.tp) << " | **" << Fixed(double(a.tp) / a.sp, 1) << "x** | "
       << Bytes(a.sp + a.sp_grad) << " | " << Fixed(double(a.tp) / (a.sp + a.sp_grad), 2)
       << "x |\n";
    arr2.push_back({{"vision_tokens", a.tokens}, {"patches", a.patches}, {"degree", a.degree},
                    {"sp_bytes", a.sp}, {"tp_bytes", a.tp}, {"tp_over_sp", double(a.tp) / a.sp},
                    {"sp_zero1_grad_sync_bytes", a.sp_grad}});
  }
  j["analytic_vision_7b_bf16"] = arr2;
  md << "\nScaling: both volumes are linear in tokens (16k / 4k = 4.00x for SP and TP); per rank "
        "SP falls about as (P-1)/P^2 (all-to-all) while TP rises as (P-1)/P, so TP/SP grows with "
        "the degree and does not depend on the token count.\n\n";

  md << "### 2b. Analytic, 7B text decoder under TP (28 layers, hidden 3584), bf16\n\n"
     << "Sequence = vision tokens + 512 text tokens; (4L+2) all-reduces of [S, 3584] + 2 small "
        "fp32 loss all-reduces per step (text_tp_model.h; T <= 4 KV heads: no KV-gradient sum).\n\n"
     << "| tokens | TP | all-reduces | bytes sent per rank |\n|---|---|---|---|\n";
  Json arr3 = Json::array();
  for (const TextRow& t : text_rows) {
    md << "| " << t.seq << " | " << t.t << " | " << t.v.calls << " | "
       << Bytes(t.v.tensor_bytes_sent) << " |\n";
    arr3.push_back({{"tokens", t.seq},
                    {"tp", t.t},
                    {"calls", t.v.calls},
                    {"bytes_sent", t.v.tensor_bytes_sent}});
  }
  j["analytic_text_7b_bf16"] = arr3;

  md << "\n### 3. CPU step times, tiny preset, side by side (one run, round-robin)\n\n"
     << "Vision: 4 images of 224 x 224 px (" << tplan.num_patches << " patches, "
     << tplan.num_units << " vision tokens); text: " << text_len
     << " tokens. Forward + backward, fp32. Median over " << rounds * steps
     << " steps (" << rounds << " rounds x " << steps << ", " << warmup
     << " warm-up per round) of rank 0's barrier-fenced step, p25-p75 beside it. All ranks "
        "share this machine's " << machine["nproc"].dump()
     << " cores (which other jobs also load): 2 ranks can use both cores, 4 ranks oversubscribe "
        "them, so ratios show overhead and partitioning on a tiny model, not GPU speed-up. Bytes = "
        "rank 0 per step, counted (the text TP 2 row is the measured check of the text formula); "
        "exact = every rank, every step equals the formula.\n\n"
     << "| stage | layout | median ms | p25-p75 ms | vs 1 rank | rank 0 sent | analytic | exact "
        "|\n|---|---|---|---|---|---|---|---|\n";
  Json arr4 = Json::array();
  std::map<std::string, double> base;
  for (const TimedLayout& L : timed) {
    if (L.degree == 1) base[L.stage] = Median(L.step_ms);
  }
  for (const TimedLayout& L : timed) {
    const double med = Median(L.step_ms);
    const int64_t sent = TotalOf(L.rank0).tensor_bytes_sent;
    std::vector<double> v = L.step_ms;
    std::sort(v.begin(), v.end());
    auto q = [&](double f) {  // nearest rank
      return v.empty() ? 0.0 : v[static_cast<size_t>(f * (v.size() - 1) + 0.5)];
    };
    md << "| " << L.stage << " | " << L.layout << " | " << Fixed(med, 1) << " | "
       << Fixed(q(0.25), 1) << "-" << Fixed(q(0.75), 1) << " | "
       << Fixed(med / base[L.stage], 2) << "x | " << Fixed(MiB(sent), 3) << " MiB | "
       << Fixed(MiB(L.analytic_sent), 3) << " MiB | " << (L.exact ? "yes" : "**NO**") << " |\n";
    arr4.push_back({{"stage", L.stage}, {"layout", L.layout}, {"median_ms", med},
                    {"vs_one_rank", med / base[L.stage]}, {"step_ms", L.step_ms},
                    {"rank0_bytes_sent", sent}, {"rank0_bytes_analytic", L.analytic_sent},
                    {"exact", L.exact}});
  }
  j["timed_tiny"] = arr4;
  md << "\n";

  const std::string dir = InWorkspace(out_dir);
  std::ofstream(dir + "/parallel.md") << md.str();
  std::ofstream(dir + "/parallel.json") << j.dump(2) << "\n";
  std::cout << md.str();
  return 0;
}
