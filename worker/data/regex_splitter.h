// Splits text into pre-tokens with a PCRE2 regular expression (UTF-8, Unicode properties), with
// the "Isolated" behaviour of Hugging Face tokenizers' Split pre-tokenizer: every match is a
// piece, and any text between matches is a piece too, so the pieces concatenate to the input.
//
// Thread-safety: immutable after Create(); Split() may be called from several threads (each call
// allocates its own match data).
#ifndef DHP_WORKER_DATA_REGEX_SPLITTER_H_
#define DHP_WORKER_DATA_REGEX_SPLITTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dhp {
namespace data {

// The Qwen2 pre-tokenizer pattern (letters with an optional leading non-letter, single digits,
// punctuation runs with trailing newlines, newline runs, spaces).
extern const char kQwen2SplitPattern[];

// GPT-2's pattern (ByteLevel pre-tokenizer with use_regex = true).
extern const char kGpt2SplitPattern[];

class RegexSplitter {
 public:
  // Compiles `pattern`; errors name the pattern and the offset of the problem.
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Pieces of `text` (views into it). Invalid UTF-8 is an error naming the byte offset.
  absl::StatusOr<std::vector<absl::string_view>> Split(absl::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  RegexSplitter(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}
  std::string pattern_;
  void* code_;  // pcre2_code_8*, kept opaque so that users need no PCRE2 headers
};

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_REGEX_SPLITTER_H_
