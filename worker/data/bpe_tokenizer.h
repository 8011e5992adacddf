// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the format of Qwen2 /
// Qwen2.5-VL and of configs/tiny-tokenizer.json).
//
// Encoding, in Hugging Face tokenizers' order: added tokens (`added_tokens`, longest match first)
// are split out of the raw text first; each remaining span is normalised (NFC, when the
// tokenizer.json asks for it), split by the pre-tokenizer regex (the `Split` pattern, Qwen2's by
// default), and each piece is mapped to GPT-2's byte-level alphabet and merged by BPE merge rank.
// Decoding maps the vocabulary strings back to bytes; added tokens decode to their content.
//
// Supported tokenizer.json subset: model type BPE with `vocab` and `merges` (either "a b" strings
// or ["a", "b"] pairs), optional `ignore_merges`; pre_tokenizer Split (Regex, Isolated) and/or
// ByteLevel (add_prefix_space false) inside an optional Sequence; normalizer null, NFC, or a
// Sequence of NFC. NFC uses ICU's tables (see unicode_nfc.h) and costs nothing on ASCII or
// already-NFC text. Added tokens with `normalized: false` (all of Qwen's) are matched in the raw
// text, those with `normalized: true` in the normalised text, as Hugging Face does; `lstrip`,
// `rstrip` and `single_word` must be false. Anything else is a load error naming the field.
// tests/hf_tokenizer_parity.py checks ids and decoded text against Hugging Face tokenizers.
//
// Thread-safety: immutable after loading; all methods are const and safe to call concurrently.
#ifndef DHP_WORKER_DATA_BPE_TOKENIZER_H_
#define DHP_WORKER_DATA_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"
#include "worker/data/regex_splitter.h"

namespace dhp {
namespace data {

struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;
  // Matched in the normalised text (Hugging Face's `normalized`) rather than in the raw text.
  bool normalized = false;
};

class BpeTokenizer {
 public:
  // Parses tokenizer.json text; `source` names it in errors (usually the path).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJson(absl::string_view json,
                                                                absl::string_view source);
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromFile(const std::string& path);

  // Token ids of `text`. With `allow_added_tokens` false, text such as "<|im_end|>" is encoded
  // as ordinary characters (use this for untrusted data inside a chat template). Errors: invalid
  // UTF-8.
  absl::StatusOr<std::vector<int64_t>> Encode(absl::string_view text,
                                              bool allow_added_tokens = true) const;

  // Bytes of the tokens (may end inside a UTF-8 character if the ids cut one). Errors: an id
  // that is neither in the vocabulary nor an added token.
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids,
                                     bool skip_special_tokens = false) const;

  // The id of a vocabulary string or added token content, or -1.
  int64_t TokenToId(absl::string_view token) const;

  // The vocabulary string (byte-level form) or added token content of an id, or "" if unknown.
  std::string IdToToken(int64_t id) const;

  // The pre-tokenizer pieces of the normalised `text` (no added-token handling): for tests.
  absl::StatusOr<std::vector<std::string>> PreTokenize(absl::string_view text) const;

  // One more than the largest id (vocabulary or added token).
  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }

 private:
  BpeTokenizer() = default;
  // Parses, then reads with Read; nlohmann's exceptions (a field of another type, text that is
  // not UTF-8 in a message) become INVALID_ARGUMENT naming `source`, never a throw.
  absl::Status Init(absl::string_view json, absl::string_view source);
  absl::Status Read(const nlohmann::json& j, absl::string_view source);
  // `text` after the normalizer (a view of `text` or of `*storage`).
  absl::StatusOr<absl::string_view> Normalize(absl::string_view text, std::string* storage) const;
  absl::StatusOr<std::vector<absl::string_view>> SplitPieces(absl::string_view text) const;
  absl::Status IndexAddedTokens();
  void EncodePiece(absl::string_view piece, std::vector<int64_t>* ids) const;
  // Encodes normalised text: added tokens with `normalized` true, BPE between them.
  absl::Status EncodeNormalized(absl::string_view text, bool allow_added_tokens,
                                std::vector<int64_t>* ids) const;

  // A span of text, or an added token found in it (then `token` is set).
  struct Segment {
    absl::string_view text;
    const AddedToken* token;
  };
  // `text` cut at the added tokens whose `normalized` flag equals `normalized` (leftmost, then
  // longest match); one segment of the whole text when `enabled` is false.
  std::vector<Segment> SplitOnAddedTokens(absl::string_view text, bool normalized,
                                          bool enabled) const;

  struct Merge {
    int32_t rank;
    int64_t merged;
  };

  std::unordered_map<std::string, int64_t> vocab_;  // byte-level string -> id
  std::unordered_map<int64_t, std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  std::array<int64_t, 256> byte_ids_{};          // id of each single-byte symbol
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;  // applied in order
  std::vector<AddedToken> added_tokens_;
  std::unordered_map<int64_t, size_t> added_by_id_;  // id -> index in added_tokens_
  std::vector<std::string> match_text_;   // per added token: its content, normalised if it is
                                          // matched in normalised text
  // Indices of added_tokens_ with normalized false [0] and true [1], longest match_text_ first.
  std::array<std::vector<size_t>, 2> added_by_length_;
  bool ignore_merges_ = false;
  bool nfc_ = false;  // the normalizer is NFC
  int64_t vocab_size_ = 0;
};

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_BPE_TOKENIZER_H_
