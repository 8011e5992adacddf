// dhp-train: trains a job spec's model on one rank (this process, one device), printing a table
// of per-step metrics and the mean loss of the first and last steps. Generates nothing itself:
// the spec's datasets must exist under --data-root (e.g. from dhp-gen-shapes).
//
//   dhp-train -f configs/tiny-cpu.yaml --data-root DIR [--steps N] [--tokenizer PATH]
//             [--log-every K] [--save PATH.safetensors] [--device cpu|cuda] [--threads N]
//             [--metrics-out FILE.jsonl] [--save-first-grads PATH.safetensors]
//
// --metrics-out writes one JSON object per step, every step, with full precision:
//   {"step": 1, "loss": 6.9323766371783089, "lr": 0.001, "grad_norm": 3.47..., "samples": 4,
//    "tokens": 168, "loss_tokens": 40, "seconds": 0.05}
//
// Under `bazel run`, relative paths are taken relative to the directory bazel was run from.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/command_line.h"
#include "common/logging.h"
#include "common/spec_validate.h"
#include "worker/model/weights.h"
#include "worker/rank/model_init.h"
#include "worker/rank/trainer.h"

namespace {

std::string FromUserDir(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  return dir != nullptr && *dir ? std::string(dir) + "/" + path : path;
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return end > begin ? s / static_cast<double>(end - begin) : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dhp-train: train a job spec's model on one rank"};
  std::string spec_path, data_root = ".", tokenizer, save, dump_batch, device = "cpu";
  std::string metrics_out, first_grads;
  int64_t steps = 0;
  int log_every = 10, threads = 0;
  app.add_option("-f,--file", spec_path, "Job spec (YAML or JSON)")->required();
  app.add_option("--data-root", data_root,
                 "Directory that the spec's relative dataset (and weights) paths start from");
  app.add_option("--steps", steps, "Override training.max_steps (the schedule spans these)")
      ->check(dhp::WholeNumber() & CLI::PositiveNumber);
  app.add_option("--tokenizer", tokenizer,
                 "tokenizer.json (default: configs/tiny-tokenizer.json for the tiny preset, "
                 "else <model.weights_path>/tokenizer.json)");
  app.add_option("--log-every", log_every, "Print every K-th step (and the last)")
      ->check(CLI::PositiveNumber);
  app.add_option("--save", save, "Write the trained weights to this .safetensors file");
  app.add_option("--dump-first-batch", dump_batch,
                 "Write the first step's batch and loss to this .safetensors file (what "
                 "tests/hf_model_parity.py compares with transformers)");
  app.add_option("--save-first-grads", first_grads,
                 "Write the first step's gradients (before clipping) to this .safetensors file");
  app.add_option("--metrics-out", metrics_out,
                 "Write every step's metrics (loss with 17 digits) as JSON lines to this file");
  app.add_option("--device", device, "cpu, cuda or cuda:N");
  app.add_option("--threads", threads, "LibTorch intra-op threads (0: LibTorch's default)")
      ->check(CLI::NonNegativeNumber);
  if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;

  std::ifstream in(FromUserDir(spec_path));
  if (!in) {
    std::fprintf(stderr, "dhp-train: cannot read %s\n", spec_path.c_str());
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  // model.weights_path (a Hugging Face model directory) may name the model without a preset.
  absl::StatusOr<dhp::v1::JobSpec> spec =
      dhp::ParseJobSpec(text.str(), dhp::RankSpecOptions(FromUserDir(data_root)));
  if (!spec.ok()) {
    std::fprintf(stderr, "dhp-train: %s: %s\n", spec_path.c_str(),
                 std::string(spec.status().message()).c_str());
    return 2;
  }
  if (steps > 0) {
    spec->mutable_training()->set_max_steps(steps);
    spec->mutable_training()->set_epochs(0);
  }
  if (threads > 0) at::set_num_threads(threads);

  dhp::TrainerOptions options;
  options.data_root = FromUserDir(data_root);
  options.tokenizer_path = FromUserDir(tokenizer);
  options.device = device;
  options.dump_first_batch = FromUserDir(dump_batch);
  options.save_first_grads = FromUserDir(first_grads);
  absl::StatusOr<std::unique_ptr<dhp::SingleRankTrainer>> trainer =
      dhp::SingleRankTrainer::Create(*spec, options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "dhp-train: %s\n", trainer.status().ToString().c_str());
    return 1;
  }
  dhp::SingleRankTrainer& t = **trainer;
  for (const std::string& note : t.notes()) DHP_LOG(INFO) << note;
  DHP_LOG(INFO) << "training " << spec->name() << " (" << t.preset().name << ") for "
                << t.max_steps() << " steps, batch " << spec->training().batch_size() << ", "
                << at::get_num_threads() << " intra-op threads";

  std::printf("%6s %9s %10s %10s %6s %9s %6s\n", "step", "loss", "lr", "grad_norm", "tokens",
              "tokens/s", "ms");
  std::FILE* metrics = nullptr;
  if (!metrics_out.empty()) {
    metrics = std::fopen(FromUserDir(metrics_out).c_str(), "w");
    if (metrics == nullptr) {
      std::fprintf(stderr, "dhp-train: cannot write --metrics-out %s\n", metrics_out.c_str());
      return 2;
    }
  }
  std::vector<double> losses;
  double seconds = 0;
  int64_t tokens = 0;
  while (t.step() < t.max_steps()) {
    absl::StatusOr<dhp::StepStats> st = t.Step();
    if (!st.ok()) {
      std::fprintf(stderr, "dhp-train: %s\n", st.status().ToString().c_str());
      return 1;
    }
    losses.push_back(st->loss);
    if (metrics != nullptr) {
      std::fprintf(metrics,
                   "{\"step\": %lld, \"loss\": %.17g, \"lr\": %.17g, \"grad_norm\": %.17g, "
                   "\"samples\": %lld, \"tokens\": %lld, \"loss_tokens\": %lld, "
                   "\"seconds\": %.6f}\n",
                   static_cast<long long>(st->step), st->loss, st->lr, st->grad_norm,
                   static_cast<long long>(st->samples), static_cast<long long>(st->tokens),
                   static_cast<long long>(st->loss_tokens), st->seconds);
      std::fflush(metrics);
    }
    seconds += st->seconds;
    tokens += st->tokens;
    if (st->step % log_every == 0 || st->step == 1 || st->step == t.max_steps()) {
      std::printf("%6lld %9.4f %10.3e %10.4f %6lld %9.0f %6.0f\n",
                  static_cast<long long>(st->step), st->loss, st->lr, st->grad_norm,
                  static_cast<long long>(st->tokens), st->tokens / st->seconds,
                  st->seconds * 1e3);
      std::fflush(stdout);
    }
  }
  if (metrics != nullptr && std::fclose(metrics) != 0) {
    std::fprintf(stderr, "dhp-train: writing --metrics-out %s failed\n", metrics_out.c_str());
    return 1;
  }
  if (!save.empty()) {
    absl::Status s = dhp::SaveWeights(
        FromUserDir(save), t.NamedParameters(),
        {{"preset", t.preset().name}, {"step", std::to_string(t.step())}});
    if (!s.ok()) {
      std::fprintf(stderr, "dhp-train: --save: %s\n", s.ToString().c_str());
      return 1;
    }
    DHP_LOG(INFO) << "weights written to " << save;
  }
  const size_t n = losses.size();
  const size_t w = std::max<size_t>(1, std::min<size_t>(20, n / 2));
  const double first = Mean(losses, 0, std::min(w, n)), last = Mean(losses, n - std::min(w, n), n);
  std::printf("done: %zu steps in %.1f s (%.0f tokens/s, %lld samples skipped); mean loss of the "
              "first %zu steps %.4f, of the last %zu steps %.4f (ratio %.3f)\n",
              n, seconds, seconds > 0 ? tokens / seconds : 0.0,
              static_cast<long long>(t.loader().skipped()), w, first, w, last,
              first > 0 ? last / first : 0.0);
  return 0;
}
