// dhp-data-check: validates a LLaVA-style dataset the way training will read it, printing every
// bad record with its file and line, then a summary. Exit status 1 if any record is bad.
//
//   dhp-data-check --annotations FILE --image-root DIR --tokenizer tokenizer.json
//                  [--max-seq-len N (4096)] [--min-pixels N] [--max-pixels N] [--dump FILE]
//
// --dump writes what training sees of each valid record, one JSON object per line:
//   {"location", "id", "text" (the rendered chat template, special tokens spelled out),
//    "input_ids", "labels", "image_grid_thw": [[t, h, w], ...]}
// tests/hf_chat_template_parity.py compares it with transformers' apply_chat_template.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "worker/data/chat_template.h"
#include "worker/data/llava_annotations.h"
#include "worker/data/sample_builder.h"

namespace {

int Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "dhp-data-check: %s\n", error.c_str());
  std::fprintf(stderr,
               "usage: dhp-data-check --annotations FILE --image-root DIR --tokenizer FILE "
               "[--max-seq-len N] [--min-pixels N] [--max-pixels N] [--dump FILE]\n");
  return 2;
}

// One line of --dump (see the file comment).
std::string DumpLine(const dhp::data::ChatTemplate& chat, const dhp::data::LlavaRecord& record,
                     const dhp::data::TrainingSample& sample, int merge_size) {
  nlohmann::json grids = nlohmann::json::array();
  std::vector<int64_t> counts;
  for (const dhp::data::ImagePatches& image : sample.images) {
    grids.push_back(image.grid_thw);
    counts.push_back(dhp::data::NumImageTokens(image.grid_thw, merge_size));
  }
  const nlohmann::json line = {{"location", record.location},
                               {"id", record.id},
                               {"text", chat.Render(record.messages, counts)},
                               {"input_ids", sample.input_ids},
                               {"labels", sample.labels},
                               {"image_grid_thw", grids}};
  // Replace: text from the data that is not UTF-8 must not abort the dump.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dhp::data;
  std::string annotations, image_root, tokenizer_path, dump_path;
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
    } else if (flag == "--dump") {
      dump_path = value;
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
  std::ofstream dump;
  if (!dump_path.empty()) {
    dump.open(dump_path, std::ios::binary | std::ios::trunc);
    if (!dump) {
      std::fprintf(stderr, "dhp-data-check: cannot write %s\n", dump_path.c_str());
      return 1;
    }
  }
  int64_t tokens = 0, max_tokens = 0, images = 0, valid = 0;
  for (const LlavaRecord& r : *records) {
    auto sample = builder.Build(r, image_root);
    if (!sample.ok()) {
      errors.push_back(sample.status());
      continue;
    }
    ++valid;
    if (dump.is_open()) dump << DumpLine(*chat, r, *sample, options.preprocess.merge_size);
    const int64_t n = static_cast<int64_t>(sample->input_ids.size());
    tokens += n;
    max_tokens = std::max(max_tokens, n);
    images += static_cast<int64_t>(sample->images.size());
  }
  if (dump.is_open() && !dump.flush()) {
    std::fprintf(stderr, "dhp-data-check: writing %s failed\n", dump_path.c_str());
    return 1;
  }
  for (const absl::Status& e : errors) std::printf("error: %s\n", std::string(e.message()).c_str());
  std::printf("%lld valid records, %zu bad; %lld images; tokens: %lld total, %lld max, %.1f mean\n",
              static_cast<long long>(valid), errors.size(), static_cast<long long>(images),
              static_cast<long long>(tokens), static_cast<long long>(max_tokens),
              valid > 0 ? static_cast<double>(tokens) / valid : 0.0);
  return errors.empty() ? 0 : 1;
}
