// dhp-data-check: validates a LLaVA-style dataset the way training will read it, printing every
// bad record with its file and line, then a summary. Exit status 1 if any record is bad.
//
//   dhp-data-check --annotations FILE --image-root DIR --tokenizer tokenizer.json
//                  [--max-seq-len N (4096)] [--min-pixels N] [--max-pixels N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker/data/chat_template.h"
#include "worker/data/llava_annotations.h"
#include "worker/data/sample_builder.h"

namespace {

int Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "dhp-data-check: %s\n", error.c_str());
  std::fprintf(stderr,
               "usage: dhp-data-check --annotations FILE --image-root DIR --tokenizer FILE "
               "[--max-seq-len N] [--min-pixels N] [--max-pixels N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dhp::data;
  std::string annotations, image_root, tokenizer_path;
  SampleBuilderOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage("missing value for " + flag);
    const std::string value = argv[++i];
    char* end = nullptr;
    const long long n = std::strtoll(value.c_str(), &end, 10);
    const bool is_number = !value.empty() && *end == '\0' && n > 0;
    if (flag == "--annotations") {
      annotations = value;
    } else if (flag == "--image-root") {
      image_root = value;
    } else if (flag == "--tokenizer") {
      tokenizer_path = value;
    } else if (flag == "--max-seq-len" && is_number) {
      options.max_seq_len = n;
    } else if (flag == "--min-pixels" && is_number) {
      options.preprocess.min_pixels = n;
    } else if (flag == "--max-pixels" && is_number) {
      options.preprocess.max_pixels = n;
    } else {
      return Usage("bad flag or value: " + flag + " " + value);
    }
  }
  if (annotations.empty() || tokenizer_path.empty()) {
    return Usage("--annotations and --tokenizer are required");
  }
  auto tokenizer = BpeTokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) return Usage(std::string(tokenizer.status().message()));
  auto chat = ChatTemplate::Create(**tokenizer);
  if (!chat.ok()) return Usage(std::string(chat.status().message()));

  std::vector<absl::Status> errors;
  auto records = LoadLlavaAnnotations(annotations, &errors);
  if (!records.ok()) {
    std::fprintf(stderr, "%s\n", std::string(records.status().message()).c_str());
    return 1;
  }
  SampleBuilder builder(*chat, options);
  int64_t tokens = 0, max_tokens = 0, images = 0, valid = 0;
  for (const LlavaRecord& r : *records) {
    auto sample = builder.Build(r, image_root);
    if (!sample.ok()) {
      errors.push_back(sample.status());
      continue;
    }
    ++valid;
    const int64_t n = static_cast<int64_t>(sample->input_ids.size());
    tokens += n;
    max_tokens = std::max(max_tokens, n);
    images += static_cast<int64_t>(sample->images.size());
  }
  for (const absl::Status& e : errors) std::printf("error: %s\n", std::string(e.message()).c_str());
  std::printf("%lld valid records, %zu bad; %lld images; tokens: %lld total, %lld max, %.1f mean\n",
              static_cast<long long>(valid), errors.size(), static_cast<long long>(images),
              static_cast<long long>(tokens), static_cast<long long>(max_tokens),
              valid > 0 ? static_cast<double>(tokens) / valid : 0.0);
  return errors.empty() ? 0 : 1;
}
