#include "worker/data/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "worker/data/byte_level.h"

namespace dhp {
namespace data {

const char kQwen2SplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return "unknown PCRE2 error";
  return reinterpret_cast<char*>(buffer);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex ", pattern,
                                                   ": error at offset ", offset, ": ",
                                                   Pcre2Message(error)));
  }
  // JIT is an optimisation only; the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<RegexSplitter>(new RegexSplitter(pattern, code));
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::StatusOr<std::vector<absl::string_view>> RegexSplitter::Split(absl::string_view text) const {
  std::vector<absl::string_view> pieces;
  if (text.empty()) return pieces;
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code, nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // Validate once here (PCRE2's own check would repeat on every call and is skipped below).
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    if (!NextUtf8(text, &i, &cp)) {
      return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", i));
    }
  }
  size_t pos = 0;      // where the next search starts
  size_t emitted = 0;  // end of the last piece
  while (pos < text.size()) {
    const int rc =
        pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return absl::InternalError(absl::StrCat("PCRE2 match failed: ", Pcre2Message(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    if (start > emitted) pieces.push_back(text.substr(emitted, start - emitted));
    if (end > start) {
      pieces.push_back(text.substr(start, end - start));
      emitted = end;
      pos = end;
    } else {
      // An empty match: step over one UTF-8 character so the loop makes progress.
      pos = start + 1;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  if (emitted < text.size()) pieces.push_back(text.substr(emitted));
  return pieces;
}

}  // namespace data
}  // namespace dhp
