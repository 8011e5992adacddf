// dhp-train-tokenizer: trains the tiny preset's byte-level BPE tokenizer and writes its
// tokenizer.json (see worker/data/tiny_tokenizer.h).
//
//   dhp-train-tokenizer --out FILE [--vocab-size N (1000)] [--corpus TEXTFILE]...
//
// Each --corpus file is added to the built-in corpus as one text, newlines included, so that the
// trainer sees the pre-tokens the encoder will see: newline runs ("\n\n") and punctuation with
// its newlines (".\n", "}\n\n") become pieces whose merges it can learn (splitting the file
// into lines would drop every newline). The special tokens get ids N..N+6.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "worker/data/file_util.h"
#include "worker/data/tiny_tokenizer.h"

namespace {

int Usage(const char* error) {
  if (error != nullptr) std::fprintf(stderr, "dhp-train-tokenizer: %s\n", error);
  std::fprintf(stderr,
               "usage: dhp-train-tokenizer --out FILE [--vocab-size N (1000)] "
               "[--corpus TEXTFILE]...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  long long vocab_size = dhp::data::kTinyTokenizerRegularVocab;
  std::vector<std::string> extra;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      Usage(nullptr);
      return 0;
    }
    if (i + 1 >= argc) return Usage(("missing value for " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--out") {
      out = value;
    } else if (flag == "--vocab-size") {
      char* end = nullptr;
      vocab_size = std::strtoll(value.c_str(), &end, 10);
      if (*end != '\0' || vocab_size < 256) return Usage("--vocab-size must be >= 256");
    } else if (flag == "--corpus") {
      absl::StatusOr<std::string> text = dhp::data::ReadFileToString(value);
      if (!text.ok()) return Usage(std::string(text.status().message()).c_str());
      extra.push_back(std::move(*text));
    } else {
      return Usage(("unknown flag " + flag).c_str());
    }
  }
  if (out.empty()) return Usage("--out is required");
  absl::StatusOr<std::string> json = dhp::data::TrainTinyTokenizerJson(extra, vocab_size);
  absl::Status s = json.ok() ? dhp::data::WriteStringToFile(*json, out) : json.status();
  if (!s.ok()) {
    std::fprintf(stderr, "dhp-train-tokenizer: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
