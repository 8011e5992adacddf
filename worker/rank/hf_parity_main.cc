// dhp-hf-parity CASE_DIR...: compares dhp with the transformers reference of each case directory
// (hf_parity.h; tests/hf_model_parity.py writes them) and prints one table per case. Exit status
// 0 when every element of every case is within its bound, 1 when one is not, 2 on an error.
#include <cstdio>
#include <cstring>

#include "worker/rank/hf_parity.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: %s CASE_DIR...\n", argv[0]);
    return 2;
  }
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
