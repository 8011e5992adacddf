// dhp-preprocess: runs dhp's image pipeline (decode, smart resize, bicubic, normalise,
// patchify: preprocess.h) on image files and writes each result, so that other tools can compare
// it with theirs (tests/hf_preprocess_parity.py compares with Hugging Face's processor).
//
//   dhp-preprocess [--min-pixels N] [--max-pixels N] OUT_DIR IMAGE...
//
// For each IMAGE it writes OUT_DIR/<file name>.f32 (the patches, [num_patches, 1176] float32,
// little-endian, row-major) and prints one line: "<file name> <t> <h> <w>" (the grid). Exit
// status 1 if any image fails (its error is printed to stderr), 2 on bad usage.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "worker/data/image_io.h"
#include "worker/data/preprocess.h"

namespace {

int Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "dhp-preprocess: %s\n", error.c_str());
  std::fprintf(stderr,
               "usage: dhp-preprocess [--min-pixels N] [--max-pixels N] OUT_DIR IMAGE...\n");
  return 2;
}

bool ParsePixels(const char* text, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v <= 0) return false;
  *out = v;
  return true;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int main(int argc, char** argv) {
  dhp::data::PreprocessConfig config;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--min-pixels" || a == "--max-pixels") {
      if (i + 1 >= argc) return Usage(a + " needs a value");
      int64_t* target = a == "--min-pixels" ? &config.min_pixels : &config.max_pixels;
      if (!ParsePixels(argv[++i], target)) return Usage(a + ": expected a positive integer");
    } else if (a.rfind("--", 0) == 0) {
      return Usage("unknown flag " + a);
    } else {
      args.push_back(a);
    }
  }
  if (args.size() < 2) return Usage("need OUT_DIR and at least one IMAGE");
  int failures = 0;
  for (size_t k = 1; k < args.size(); ++k) {
    absl::StatusOr<dhp::data::RgbImage> image = dhp::data::ReadImageFile(args[k]);
    absl::StatusOr<dhp::data::ImagePatches> patches =
        image.ok() ? dhp::data::PreprocessImage(*image, config) : image.status();
    if (!patches.ok()) {
      std::fprintf(stderr, "%s\n", patches.status().ToString().c_str());
      ++failures;
      continue;
    }
    const std::string name = BaseName(args[k]);
    std::ofstream out(args[0] + "/" + name + ".f32", std::ios::binary);
    out.write(reinterpret_cast<const char*>(patches->values.data()),
              static_cast<std::streamsize>(patches->values.size() * sizeof(float)));
    if (!out) {
      std::fprintf(stderr, "%s: cannot write %s/%s.f32\n", name.c_str(), args[0].c_str(),
                   name.c_str());
      ++failures;
      continue;
    }
    std::printf("%s %lld %lld %lld\n", name.c_str(),
                static_cast<long long>(patches->grid_thw[0]),
                static_cast<long long>(patches->grid_thw[1]),
                static_cast<long long>(patches->grid_thw[2]));
  }
  return failures > 0 ? 1 : 0;
}
