// model_bench: forward+backward step time of Qwen2.5-VL models on the CPU, the FLOPs of that
// step counted analytically (worker/rank/step_flops.h), the FLOP/s achieved, and next to it the
// FLOP/s of a large fp32 matmul measured in the same run. The figure is their ratio: how much of
// what this machine's BLAS can do the model step gets (small models lose to attention, norms,
// rotary, softmax and framework overhead; larger ones approach the matmul rate).
//
//   bazel run //bench:model_bench -- [--rounds 7] [--warmup 2] [--matmul-n 1024]
//
// Models: `tiny` (the preset) and `wide` (vision hidden 256 / 4 heads / depth 4, text hidden
// 512 / 4 layers / 8 heads / 2 KV heads, vocabulary 4096), both fp32, on one synthetic packed
// batch: 8 samples, each one 112x112 image (64 patches, 16 image tokens) and 36 text tokens
// (28 of them labelled).
//
// Threads: LibTorch's intra-op (OpenMP) threads and OpenBLAS's own pthreads pool are separate
// (LibTorch 1.13's set_num_threads does not reach the pthreads build of OpenBLAS, which Debian
// ships; openblas_set_num_threads is looked up at run time). Configurations (intra-op, BLAS):
// (1, 1); (N, N) with N = all cores, what a LibTorch program gets by asking for N threads; and
// (N, 1). With both pools at N, OpenMP's and OpenBLAS's spin-waiting threads take the cores
// from each other (and from other processes on a shared machine): the model step, thousands of
// small parallel regions, collapses while the single large matmul does not. Each configuration
// has its own matmul measurement.
//
// Measurement: per thread count, after --warmup steps of every model and matmuls, --rounds
// rounds each time one step of every model and one N^3 matmul back to back, so that model and
// matmul see the same machine load; reported: medians over rounds, and the median of the
// per-round ratios. Prints a Markdown table last and writes it to <out-dir>/model.md, with every
// number and the machine's description in <out-dir>/model.json.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "common/model_presets.h"
#include "nlohmann/json.hpp"
#include "worker/model/layers.h"
#include "worker/model/param_count.h"
#include "worker/model/param_init.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/rank/step_flops.h"

namespace dhp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// LibTorch's intra-op threads and, when the BLAS is OpenBLAS, its own thread pool. Returns
// whether OpenBLAS was found.
bool SetThreads(int intra_op, int blas) {
  at::set_num_threads(intra_op);
  using SetFn = void (*)(int);
  auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (fn != nullptr) fn(blas);
  return fn != nullptr;
}

ModelPreset WidePreset() {
  ModelPreset p = *FindModelPreset("tiny");  // its special token ids
  p.name = "wide";
  p.vision.depth = 4;
  p.vision.hidden_size = 256;
  p.vision.num_heads = 4;
  p.vision.intermediate_size = 768;
  p.vision.fullatt_block_indexes = {1, 3};
  p.vision.out_hidden_size = 512;
  p.text.hidden_size = 512;
  p.text.num_layers = 4;
  p.text.num_heads = 8;
  p.text.num_kv_heads = 2;
  p.text.intermediate_size = 1536;
  p.text.vocab_size = 4096;
  p.text.mrope_section = {8, 12, 12};  // head_dim 64
  p.text.rope_theta = 1000000.0;
  return p;
}

struct SyntheticBatch {
  PackedBatch batch;
  std::vector<int64_t> sample_lengths;
};

// `samples` samples of: <|im_start|> 4 text, <|vision_start|> 16 x <|image_pad|> <|vision_end|>,
// 28 labelled text tokens, <|im_end|> 3 text (52 tokens), each with one 8x8-patch image.
SyntheticBatch MakeBatch(const ModelPreset& p, int samples) {
  const SpecialTokens& tk = p.tokens;
  std::vector<int64_t> ids, labels, cu = {0};
  std::vector<GridThw> grids;
  at::manual_seed(1);
  at::Tensor text = at::randint(0, 1000, {samples, 35}, at::kLong);
  SyntheticBatch out;
  for (int s = 0; s < samples; ++s) {
    const auto t = [&](int i) { return text[s][i].item<int64_t>(); };
    ids.push_back(tk.im_start);
    labels.push_back(-100);
    for (int i = 0; i < 4; ++i) ids.push_back(t(i)), labels.push_back(-100);
    ids.push_back(tk.vision_start), labels.push_back(-100);
    for (int i = 0; i < 16; ++i) ids.push_back(tk.image_pad), labels.push_back(-100);
    ids.push_back(tk.vision_end), labels.push_back(-100);
    for (int i = 4; i < 32; ++i) ids.push_back(t(i)), labels.push_back(t(i));
    ids.push_back(tk.im_end), labels.push_back(tk.im_end);
    for (int i = 32; i < 35; ++i) ids.push_back(t(i)), labels.push_back(-100);
    cu.push_back(static_cast<int64_t>(ids.size()));
    out.sample_lengths.push_back(cu.back() - cu[cu.size() - 2]);
    grids.push_back({1, 8, 8});
  }
  PackedBatch& b = out.batch;
  b.input_ids = at::tensor(ids, at::kLong);
  b.labels = at::tensor(labels, at::kLong);
  b.cu_seqlens = cu;
  b.image_grids = grids;
  b.pixel_values = at::randn({samples * 64, 1176});
  b.position_ids = *ComputePositionIds(b, p);
  return out;
}

struct Case {
  std::string name;
  ModelPreset preset;
  Qwen2_5_VL model{nullptr};
  SyntheticBatch data;
  int64_t params = 0;
  StepFlops flops;
};

// Reading one element back to the host waits for the device's queued work (CUDA); on the CPU
// the work is already done.
void Sync(const at::Tensor& t) { (void)t.reshape(-1)[0].item<float>(); }

double TimeStep(Case& c) {
  for (auto& p : c.model->parameters()) p.mutable_grad() = at::Tensor();
  const Clock::time_point t0 = Clock::now();
  c.model->Loss(c.data.batch).backward();
  Sync(c.model->parameters()[0].grad());
  return Since(t0);
}

double TimeMatmul(const at::Tensor& a, const at::Tensor& b) {
  const Clock::time_point t0 = Clock::now();
  Sync(at::mm(a, b));
  return Since(t0);
}

// The batch's tensors on `device`.
void MoveBatch(PackedBatch& b, const at::Device& device) {
  b.input_ids = b.input_ids.to(device);
  b.labels = b.labels.to(device);
  b.pixel_values = b.pixel_values.to(device);
  b.position_ids = b.position_ids.to(device);
}

struct Row {
  std::string model;
  int threads = 0;       // LibTorch intra-op
  int blas_threads = 0;
  double step_ms = 0;
  double gflops_step = 0;
  double achieved = 0;  // GFLOP/s
  double matmul = 0;    // GFLOP/s
  double ratio = 0;     // median of per-round ratios
  std::vector<double> step_s, matmul_s, ratios;
};

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) {
  using namespace dhp;
  using namespace dhp::bench;
  int rounds = 7, warmup = 2, matmul_n = 1024, samples = 8;
  std::string out_dir = "bench/results";
  std::string device_name = "cpu";
  CLI::App app{"model_bench: Qwen2.5-VL fwd+bwd step time and FLOP/s vs a large matmul, CPU"};
  app.add_option("--rounds", rounds, "Timed rounds per thread count")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Untimed steps per model before the rounds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--matmul-n", matmul_n, "Size N of the N x N x N fp32 matmul")
      ->check(CLI::PositiveNumber);
  app.add_option("--samples", samples, "Samples (images) in the packed batch")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", device_name,
                 "cpu, or cuda (tools/gpu-check.sh): results go to model_<device>.md then")
      ->capture_default_str();
  app.add_option("--out-dir", out_dir, "Where model.md and model.json go (relative: workspace)");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);

  at::Device device = at::kCPU;
  try {
    device = at::Device(device_name);
  } catch (const c10::Error& e) {
    std::cerr << "model_bench: --device " << device_name << ": " << e.what_without_backtrace()
              << "\n";
    return 2;
  }
  const std::string suffix =
      device.is_cpu() ? "" : "_" + device_name.substr(0, device_name.find(':'));
  Json machine = MachineInfo();
  const int all_threads = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));

  std::vector<Case> cases;
  for (const ModelPreset& preset : {*FindModelPreset("tiny"), WidePreset()}) {
    Case c;
    c.name = preset.name;
    c.preset = preset;
    at::manual_seed(0);
    c.model = Qwen2_5_VL(preset);
    InitQwenWeights(*c.model);
    c.model->train();
    c.data = MakeBatch(preset, samples);
    c.model->to(device);
    MoveBatch(c.data.batch, device);
    c.params = CountParams(preset.vision, preset.text).total;
    absl::StatusOr<StepFlops> f = CountStepFlops(preset, c.data.batch.image_grids,
                                                 c.data.sample_lengths);
    if (!f.ok()) {
      std::cerr << "model_bench: " << f.status() << "\n";
      return 1;
    }
    c.flops = *f;
    cases.push_back(std::move(c));
  }
  const int64_t tokens = cases[0].data.batch.input_ids.numel();
  const int64_t patches = cases[0].data.batch.pixel_values.size(0);
  const double matmul_flops = 2.0 * matmul_n * matmul_n * matmul_n;
  at::manual_seed(2);
  const at::Tensor ma = at::randn({matmul_n, matmul_n}).to(device);
  const at::Tensor mb = at::randn({matmul_n, matmul_n}).to(device);

  std::vector<std::pair<int, int>> configs = {{1, 1}};  // (intra-op, BLAS) threads
  if (all_threads > 1 && device.is_cpu()) {
    configs.push_back({all_threads, all_threads});
    configs.push_back({all_threads, 1});
  }
  std::vector<Row> rows;
  bool openblas = false;
  for (const auto& [threads, blas_threads] : configs) {
    openblas = SetThreads(threads, blas_threads);
    for (int i = 0; i < warmup; ++i) {
      for (Case& c : cases) TimeStep(c);
      TimeMatmul(ma, mb);
    }
    std::vector<Row> these(cases.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < cases.size(); ++k) {
        const double s = TimeStep(cases[k]);
        const double m = TimeMatmul(ma, mb);
        these[k].step_s.push_back(s);
        these[k].matmul_s.push_back(m);
        these[k].ratios.push_back((cases[k].flops.training() / s) / (matmul_flops / m));
      }
    }
    for (size_t k = 0; k < cases.size(); ++k) {
      Row& row = these[k];
      row.model = cases[k].name;
      row.threads = threads;
      row.blas_threads = openblas ? blas_threads : 0;
      const double step = Median(row.step_s), mm = Median(row.matmul_s);
      row.step_ms = step * 1e3;
      row.gflops_step = cases[k].flops.training() / 1e9;
      row.achieved = row.gflops_step / step;
      row.matmul = matmul_flops / mm / 1e9;
      row.ratio = Median(row.ratios);
      rows.push_back(row);
    }
  }

  // ---- report ---------------------------------------------------------------------------
  const std::string load_end = Trim(ReadFile("/proc/loadavg"));
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  const std::string omp_wait = wait_policy != nullptr ? wait_policy : "unset";
  std::ostringstream md;
  md << "## model_bench: Qwen2.5-VL forward+backward on "
     << (device.is_cpu() ? "the CPU" : device.str()) << " vs a " << matmul_n << "^3 fp32 "
     << "matmul\n\n"
     << machine["date_utc"].get<std::string>() << ", " << all_threads << " CPUs ("
     << machine["cpu_model"].get<std::string>() << "), shared: load average "
     << machine["loadavg_at_start"].get<std::string>() << " at start, " << load_end
     << " at end. LibTorch " << TORCH_VERSION << ", BLAS threads "
     << (openblas ? "set through OpenBLAS" : "not settable (not OpenBLAS)")
     << ", OMP_WAIT_POLICY " << omp_wait
     << ". Batch: one packed sequence of " << samples << " samples, " << tokens << " tokens ("
     << samples * 16 << " image tokens), " << patches << " patches. fp32, " << rounds
     << " rounds after " << warmup << " warm-up steps; step and matmul times are medians over "
     << "rounds; ratio = median of per-round (achieved / matmul) with the two timed back to "
     << "back.\n\n";
  md << "FLOPs of one fwd+bwd step, in GFLOP (3 x the forward matmul FLOPs, "
     << "worker/rank/step_flops.h):\n\n"
     << "| model | params | vision linear GF | vision attn GF | text linear GF | text attn GF "
        "| fwd+bwd GF |\n|---|---:|---:|---:|---:|---:|---:|\n";
  for (const Case& c : cases) {
    md << "| " << c.name << " | " << Fixed(c.params / 1e6, 2) << " M | "
       << Fixed(3 * c.flops.vision_linear / 1e9, 3) << " | "
       << Fixed(3 * c.flops.vision_attention / 1e9, 3) << " | "
       << Fixed(3 * c.flops.text_linear / 1e9, 3) << " | "
       << Fixed(3 * c.flops.text_attention / 1e9, 3) << " | "
       << Fixed(c.flops.training() / 1e9, 3) << " |\n";
  }
  md << "\n| model | intra-op threads | BLAS threads | fwd+bwd ms | GFLOP/step "
        "| achieved GFLOP/s | matmul GFLOP/s | achieved / matmul |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    md << "| " << r.model << " | " << r.threads << " | "
       << (r.blas_threads > 0 ? std::to_string(r.blas_threads) : "?") << " | "
       << Fixed(r.step_ms, 1) << " | "
       << Fixed(r.gflops_step, 3) << " | " << Fixed(r.achieved, 1) << " | "
       << Fixed(r.matmul, 1) << " | " << Fixed(r.ratio, 3) << " |\n";
  }

  Json j;
  j["benchmark"] = "model_bench";
  j["machine"] = machine;
  j["machine"]["loadavg_at_end"] = load_end;
  j["omp_wait_policy"] = omp_wait;
  j["torch_version"] = TORCH_VERSION;
  j["device"] = device.str();
  j["openblas_threads_set"] = openblas;
  j["options"] = {{"rounds", rounds}, {"warmup", warmup}, {"matmul_n", matmul_n},
                  {"samples", samples}};
  j["batch"] = {{"tokens", tokens}, {"image_tokens", samples * 16}, {"patches", patches}};
  for (const Case& c : cases) {
    j["models"][c.name] = {{"params", c.params},
                           {"forward_flops",
                            {{"vision_linear", c.flops.vision_linear},
                             {"vision_attention", c.flops.vision_attention},
                             {"text_linear", c.flops.text_linear},
                             {"text_attention", c.flops.text_attention}}},
                           {"training_flops", c.flops.training()}};
  }
  for (const Row& r : rows) {
    j["rows"].push_back({{"model", r.model},
                         {"intra_op_threads", r.threads},
                         {"blas_threads", r.blas_threads},
                         {"step_ms_median", r.step_ms},
                         {"gflop_per_step", r.gflops_step},
                         {"achieved_gflops", r.achieved},
                         {"matmul_gflops", r.matmul},
                         {"ratio_median", r.ratio},
                         {"step_s", r.step_s},
                         {"matmul_s", r.matmul_s},
                         {"ratios", r.ratios}});
  }
  const std::string dir = InWorkspace(out_dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/model" + suffix + ".md") << md.str();
  std::ofstream(dir + "/model" + suffix + ".json") << j.dump(2) << "\n";
  std::cout << md.str();
  return 0;
}
