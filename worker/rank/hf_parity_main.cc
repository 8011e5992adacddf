// dhp-hf-parity CASE_DIR...: compares dhp with the transformers reference of each case directory
// (hf_parity.h; tests/hf_model_parity.py writes them) and prints one table per case. Exit status
// 0 when every element of every case is within its bound, 1 when one is not, 2 on an error.
//
// dhp-hf-parity --bench STEPS [--threads N] [--bf16] CASE_DIR: times one training step instead
// (TimeHfStep; --bf16: under CPU bf16 autocast) and prints "bench: forward F ms backward B ms
// optimizer O ms total T ms tokens S parameters P" (bench/hf_step.py reads it).
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"
#include "worker/rank/hf_parity.h"

namespace {

int BenchUsage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --bench STEPS [--threads N] [--bf16] CASE_DIR (STEPS, N: 1 to 1000000)\n",
               argv0);
  return 2;
}

// --bench STEPS [--threads N] [--bf16] CASE_DIR, both numbers in 1..1000000.
int Bench(int argc, char** argv) {
  const auto number = [](const char* text, int* out) {
    return absl::SimpleAtoi(text, out) && *out >= 1 && *out <= 1000000;
  };
  int steps = 0, threads = 0;
  bool bf16 = false;
  if (argc < 4 || !number(argv[2], &steps)) return BenchUsage(argv[0]);
  for (int i = 3; i < argc - 1; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc - 1 &&
        number(argv[i + 1], &threads)) {
      ++i;
    } else if (std::strcmp(argv[i], "--bf16") == 0) {
      bf16 = true;
    } else {
      return BenchUsage(argv[0]);
    }
  }
  if (threads > 0) at::set_num_threads(threads);
  const char* dir = argv[argc - 1];
  absl::StatusOr<dhp::HfStepTiming> t = dhp::TimeHfStep(dir, steps, bf16);
  if (!t.ok()) {
    std::fprintf(stderr, "%s: %s\n", dir, t.status().ToString().c_str());
    return 2;
  }
  std::printf(
      "bench: forward %.3f ms backward %.3f ms optimizer %.3f ms total %.3f ms tokens %lld "
      "parameters %lld threads %d dtype %s\n",
      t->forward_ms, t->backward_ms, t->optimizer_ms, t->total_ms,
      static_cast<long long>(t->tokens), static_cast<long long>(t->parameters),
      at::get_num_threads(), bf16 ? "bf16" : "fp32");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr,
                 "usage: %s CASE_DIR...\n       %s --bench STEPS [--threads N] [--bf16] CASE_DIR\n",
                 argv[0], argv[0]);
    return 2;
  }
  if (std::strcmp(argv[1], "--bench") == 0) return Bench(argc, argv);
  int failed = 0;
  for (int i = 1; i < argc; ++i) {
    absl::StatusOr<dhp::ParityReport> report = dhp::RunHfParity(argv[i]);
    if (!report.ok()) {
      std::fprintf(stderr, "%s: %s\n", argv[i], report.status().ToString().c_str());
      return 2;
    }
    std::printf("%s\n", report->Table().c_str());
    failed += report->ok() ? 0 : 1;
  }
  std::printf("%d of %d cases within bounds\n", argc - 1 - failed, argc - 1);
  return failed == 0 ? 0 : 1;
}
