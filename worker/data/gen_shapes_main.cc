// dhp-gen-shapes: writes the synthetic shapes dataset (PNG images + LLaVA-style JSONL).
//
//   dhp-gen-shapes --out DIR [--count N] [--size PIXELS] [--seed S] [--annotations NAME]
//
// Writes DIR/images/NNNNNN.png and DIR/NAME (default train.jsonl), LLaVA-style JSONL.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "worker/data/shapes_generator.h"

namespace {

int Usage(const char* error) {
  if (error != nullptr) std::fprintf(stderr, "dhp-gen-shapes: %s\n", error);
  std::fprintf(stderr,
               "usage: dhp-gen-shapes --out DIR [--count N (100)] [--size PIXELS (112)] "
               "[--seed S (0)] [--annotations NAME (train.jsonl)]\n");
  return 2;
}

bool ParseInt(const char* s, long long* out) {
  char* end = nullptr;
  *out = std::strtoll(s, &end, 10);
  return end != s && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  dhp::data::ShapesDatasetOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      Usage(nullptr);
      return 0;
    }
    if (i + 1 >= argc) return Usage(("missing value for " + flag).c_str());
    const char* value = argv[++i];
    long long n = 0;
    if (flag == "--out") {
      options.out_dir = value;
    } else if (flag == "--annotations" && *value != '\0') {
      options.annotations_name = value;
    } else if (flag == "--count" && ParseInt(value, &n) && n >= 0) {
      options.count = n;
    } else if (flag == "--size" && ParseInt(value, &n) && n >= 28 && n <= 4096) {
      options.size = static_cast<int>(n);
    } else if (flag == "--seed" && ParseInt(value, &n)) {
      options.seed = static_cast<uint64_t>(n);
    } else {
      return Usage(("bad flag or value: " + flag + " " + value).c_str());
    }
  }
  if (options.out_dir.empty()) return Usage("--out is required");
  const absl::Status s = dhp::data::WriteShapesDataset(options);
  if (!s.ok()) {
    std::fprintf(stderr, "dhp-gen-shapes: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %lld samples (%dx%d) to %s/%s\n", static_cast<long long>(options.count),
              options.size, options.size, options.out_dir.c_str(),
              options.annotations_name.c_str());
  return 0;
}
