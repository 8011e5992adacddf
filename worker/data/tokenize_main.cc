// dhp-tokenize: encodes and decodes text with a tokenizer.json the way training does, one JSON
// value per line, so that any text round-trips and the ids can be compared with another
// tokenizer (tests/hf_tokenizer_parity.py compares them with Hugging Face tokenizers).
//
//   dhp-tokenize --tokenizer FILE [--input FILE (stdin)] [--output FILE (stdout)]
//                [--no-added-tokens]
//
// Each input line is one of
//   "text"                                       -> {"ids": [...], "decoded": Decode(ids)}
//   {"decode": [ids], "skip_special_tokens": b}  -> {"decoded": Decode(ids)}
// and gives one output line. Decoded bytes that are not valid UTF-8 (ids that cut a character)
// are written as {"decoded_hex": "..."} instead of "decoded". A line that fails gives
// {"error": "..."}; the exit status is then 1 (2 for bad flags or an unreadable tokenizer).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "worker/data/bpe_tokenizer.h"
#include "worker/data/byte_level.h"

namespace {

using dhp::data::BpeTokenizer;
using Json = nlohmann::json;

int Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "dhp-tokenize: %s\n", error.c_str());
  std::fprintf(stderr,
               "usage: dhp-tokenize --tokenizer FILE [--input FILE] [--output FILE] "
               "[--no-added-tokens]\n");
  return 2;
}

bool IsUtf8(const std::string& s) {
  char32_t cp;
  for (size_t i = 0; i < s.size();) {
    if (!dhp::data::NextUtf8(s, &i, &cp)) return false;
  }
  return true;
}

void PutDecoded(const std::string& bytes, Json* out) {
  if (IsUtf8(bytes)) {
    (*out)["decoded"] = bytes;
    return;
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  (*out)["decoded_hex"] = hex;
}

Json Encode(const BpeTokenizer& tok, const std::string& text, bool allow_added) {
  absl::StatusOr<std::vector<int64_t>> ids = tok.Encode(text, allow_added);
  if (!ids.ok()) return {{"error", std::string(ids.status().message())}};
  absl::StatusOr<std::string> decoded = tok.Decode(*ids);
  if (!decoded.ok()) return {{"error", std::string(decoded.status().message())}};
  Json out = {{"ids", *ids}};
  PutDecoded(*decoded, &out);
  return out;
}

Json Decode(const BpeTokenizer& tok, const Json& request) {
  const Json& ids = request["decode"];
  std::vector<int64_t> list;
  for (const Json& id : ids) {
    if (!id.is_number_integer()) return {{"error", "decode: ids must be integers"}};
    list.push_back(id.get<int64_t>());
  }
  const Json skip = request.value("skip_special_tokens", Json(false));
  if (!skip.is_boolean()) return {{"error", "skip_special_tokens must be true or false"}};
  absl::StatusOr<std::string> decoded = tok.Decode(list, skip.get<bool>());
  if (!decoded.ok()) return {{"error", std::string(decoded.status().message())}};
  Json out = Json::object();
  PutDecoded(*decoded, &out);
  return out;
}

// The answer to one input line.
Json HandleLine(const BpeTokenizer& tok, const std::string& line, bool allow_added) {
  Json request;
  try {
    request = Json::parse(line);
  } catch (const Json::exception& e) {
    return {{"error", std::string("invalid JSON: ") + e.what()}};
  }
  if (request.is_string()) return Encode(tok, request.get<std::string>(), allow_added);
  if (request.is_object() && request.contains("decode") && request["decode"].is_array()) {
    return Decode(tok, request);
  }
  return {{"error", "expected a JSON string or {\"decode\": [ids]}"}};
}

struct Flags {
  std::string tokenizer, input, output;
  bool allow_added_tokens = true;
};

// Fills *flags; returns -1 to go on, otherwise the exit status.
int ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      Usage("");
      return 0;
    }
    if (flag == "--no-added-tokens") {
      flags->allow_added_tokens = false;
      continue;
    }
    if (i + 1 >= argc) return Usage("missing value for " + flag);
    const std::string value = argv[++i];
    if (flag == "--tokenizer") {
      flags->tokenizer = value;
    } else if (flag == "--input") {
      flags->input = value;
    } else if (flag == "--output") {
      flags->output = value;
    } else {
      return Usage("unknown flag " + flag);
    }
  }
  if (flags->tokenizer.empty()) return Usage("--tokenizer is required");
  return -1;
}

// Answers every line of `in`; returns the number of lines that failed.
int Run(const BpeTokenizer& tok, bool allow_added, std::istream& in, std::ostream& out) {
  int errors = 0;
  for (std::string line; std::getline(in, line);) {
    const Json answer = HandleLine(tok, line, allow_added);
    errors += answer.contains("error");
    out << answer.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  return errors;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (int status = ParseFlags(argc, argv, &flags); status >= 0) return status;
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromFile(flags.tokenizer);
  if (!tok.ok()) return Usage(std::string(tok.status().message()));
  std::ifstream input_file;
  if (!flags.input.empty()) {
    input_file.open(flags.input, std::ios::binary);
    if (!input_file) return Usage("cannot read " + flags.input);
  }
  std::ofstream output_file;
  if (!flags.output.empty()) {
    output_file.open(flags.output, std::ios::binary | std::ios::trunc);
    if (!output_file) return Usage("cannot write " + flags.output);
  }
  std::istream& in = flags.input.empty() ? std::cin : input_file;
  std::ostream& out = flags.output.empty() ? std::cout : output_file;
  const int errors = Run(**tok, flags.allow_added_tokens, in, out);
  if (!out.flush()) {
    std::fprintf(stderr, "dhp-tokenize: writing the output failed\n");
    return 1;
  }
  if (errors > 0) std::fprintf(stderr, "dhp-tokenize: %d lines failed\n", errors);
  return errors > 0 ? 1 : 0;
}
