#include "worker/data/bpe_tokenizer.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/data/byte_level.h"
#include "worker/data/file_util.h"
#include "worker/data/unicode_nfc.h"

namespace dhp {
namespace data {
namespace {

using Json = nlohmann::json;

uint64_t PairKey(int64_t a, int64_t b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
}

// Returns the patterns that the pre_tokenizer applies, in order, and whether a ByteLevel step
// was found.
absl::Status ReadPreTokenizer(const Json& pt, absl::string_view where,
                              std::vector<std::string>* patterns, bool* byte_level) {
  if (pt.is_null()) return absl::OkStatus();
  if (!pt.is_object() || !pt.contains("type") || !pt["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with a type"));
  }
  const std::string type = pt["type"].get<std::string>();
  if (type == "Sequence") {
    const Json& list = pt.value("pretokenizers", Json::array());
    for (size_t i = 0; i < list.size(); ++i) {
      absl::Status s = ReadPreTokenizer(list[i], absl::StrCat(where, ".pretokenizers[", i, "]"),
                                        patterns, byte_level);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    const Json& pattern = pt.value("pattern", Json());
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".pattern: only {\"Regex\": ...} patterns are supported"));
    }
    if (pt.value("behavior", std::string("Isolated")) != "Isolated" || pt.value("invert", false)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": only behavior \"Isolated\" without invert is supported"));
    }
    patterns->push_back(pattern["Regex"].get<std::string>());
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    if (pt.value("add_prefix_space", false)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".add_prefix_space: true is not supported"));
    }
    if (pt.value("use_regex", true)) patterns->push_back(kGpt2SplitPattern);
    *byte_level = true;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ".type: unsupported pre-tokenizer \"", type, "\""));
}

// Reads a normalizer: null, NFC, or a Sequence of those. Sets *nfc when NFC is applied.
absl::Status ReadNormalizer(const Json& norm, absl::string_view where, bool* nfc) {
  if (norm.is_null()) return absl::OkStatus();
  const std::string type =
      norm.is_object() && norm.contains("type") && norm["type"].is_string()
          ? norm["type"].get<std::string>()
          : std::string();
  if (type == "NFC") {
    *nfc = true;
    return absl::OkStatus();
  }
  if (type == "Sequence" && norm.contains("normalizers") && norm["normalizers"].is_array()) {
    const Json& list = norm["normalizers"];
    for (size_t i = 0; i < list.size(); ++i) {
      absl::Status s = ReadNormalizer(list[i], absl::StrCat(where, ".normalizers[", i, "]"), nfc);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      where, " ", norm.dump(), " is not supported (only null, NFC, or a Sequence of NFC)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJson(absl::string_view json,
                                                                     absl::string_view source) {
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  absl::Status s = tok->Init(json, source);
  if (!s.ok()) return s;
  return tok;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return FromJson(*text, path);
}

absl::Status BpeTokenizer::Init(absl::string_view json_text, absl::string_view source) {
  Json j;
  try {
    j = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid JSON: ", e.what()));
  }
  try {
    return Read(j, source);
  } catch (const Json::exception& e) {  // e.g. "[json.exception.type_error.302] type must be
                                         // boolean, but is object"
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unexpected content: ", e.what()));
  }
}

absl::Status BpeTokenizer::Read(const Json& j, absl::string_view source) {
  auto err = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parts...));
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return err("missing object field \"model\"");
  }
  const Json& model = j["model"];
  if (model.contains("type") && model["type"] != "BPE") {
    return err("model.type is ", model["type"].dump(), ", expected \"BPE\"");
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(field) && !model[field].is_null() && model[field] != "") {
      return err("model.", field, " is not supported");
    }
  }
  if (model.contains("ignore_merges") && !model["ignore_merges"].is_null() &&
      !model["ignore_merges"].is_boolean()) {
    return err("model.ignore_merges must be true or false");
  }
  ignore_merges_ = model.contains("ignore_merges") && model["ignore_merges"].is_boolean() &&
                   model["ignore_merges"].get<bool>();

  // Vocabulary.
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return err("missing object field \"model.vocab\"");
  }
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return err("model.vocab[\"", token, "\"]: id ", id.dump(), " is not a valid integer id");
    }
    const int64_t v = id.get<int64_t>();
    if (!id_to_token_.emplace(v, token).second) {
      return err("model.vocab: id ", v, " used by both \"", id_to_token_[v], "\" and \"", token,
                 "\"");
    }
    vocab_.emplace(token, v);
    vocab_size_ = std::max(vocab_size_, v + 1);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string sym = BytesToByteLevel(std::string(1, static_cast<char>(b)));
    auto it = vocab_.find(sym);
    if (it == vocab_.end()) {
      return err("model.vocab lacks the byte-level symbol \"", sym, "\" for byte ", b,
                 " (a byte-level BPE vocabulary must cover all 256 bytes)");
    }
    byte_ids_[b] = it->second;
  }

  // Merges, by rank.
  const Json& merges = model.value("merges", Json::array());
  if (!merges.is_array()) return err("model.merges must be an array");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return err("model.merges[", rank, "] = \"", s, "\": expected \"left right\"");
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return err("model.merges[", rank, "] = ", m.dump(), ": expected \"a b\" or [\"a\", \"b\"]");
    }
    const auto l = vocab_.find(left), r = vocab_.find(right), lr = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || lr == vocab_.end()) {
      return err("model.merges[", rank, "] = (\"", left, "\", \"", right,
                 "\"): a part or the merged token is not in model.vocab");
    }
    // Like Hugging Face, the first listed occurrence of a pair wins.
    merges_.emplace(PairKey(l->second, r->second),
                    Merge{static_cast<int32_t>(rank), lr->second});
  }

  // Added tokens.
  const Json& added = j.value("added_tokens", Json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    const Json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() ||
        a["content"].get<std::string>().empty()) {
      return err("added_tokens[", i, "]: needs an integer \"id\" and a non-empty \"content\"");
    }
    AddedToken t{a["id"].get<int64_t>(), a["content"].get<std::string>(),
                 a.value("special", false), a.value("normalized", false)};
    if (t.id < 0) return err("added_tokens[", i, "]: negative id ", t.id);
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      if (a.value(flag, Json(false)) != Json(false)) {
        return err("added_tokens[", i, "].", flag, ": only false is supported");
      }
    }
    auto v = id_to_token_.find(t.id);
    if (v != id_to_token_.end() && v->second != BytesToByteLevel(t.content)) {
      return err("added_tokens[", i, "]: id ", t.id, " is \"", v->second, "\" in model.vocab");
    }
    if (added_by_id_.count(t.id)) return err("added_tokens[", i, "]: duplicate id ", t.id);
    added_by_id_[t.id] = added_tokens_.size();
    vocab_size_ = std::max(vocab_size_, t.id + 1);
    added_tokens_.push_back(std::move(t));
  }

  // Normalizer and pre-tokenizer.
  absl::Status s = ReadNormalizer(j.value("normalizer", Json()), "normalizer", &nfc_);
  if (!s.ok()) return err(s.message());
  std::vector<std::string> patterns;
  bool byte_level = false;
  s = ReadPreTokenizer(j.value("pre_tokenizer", Json()), "pre_tokenizer", &patterns,
                       &byte_level);
  if (!s.ok()) return err(s.message());
  if (!byte_level) return err("pre_tokenizer has no ByteLevel step: not a byte-level BPE");
  for (const std::string& p : patterns) {
    absl::StatusOr<std::unique_ptr<RegexSplitter>> splitter = RegexSplitter::Create(p);
    if (!splitter.ok()) return err(splitter.status().message());
    splitters_.push_back(std::move(*splitter));
  }
  s = IndexAddedTokens();
  if (!s.ok()) return err(s.message());
  return absl::OkStatus();
}

absl::Status BpeTokenizer::IndexAddedTokens() {
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    const AddedToken& t = added_tokens_[i];
    std::string storage;
    absl::StatusOr<absl::string_view> text =
        t.normalized ? Normalize(t.content, &storage) : absl::string_view(t.content);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("added_tokens[", i, "]: ", text.status().message()));
    }
    match_text_.emplace_back(*text);
    added_by_length_[t.normalized].push_back(i);
  }
  for (std::vector<size_t>& order : added_by_length_) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return match_text_[a].size() > match_text_[b].size();
    });
  }
  return absl::OkStatus();
}

void BpeTokenizer::EncodePiece(absl::string_view piece, std::vector<int64_t>* ids) const {
  if (ignore_merges_) {
    auto it = vocab_.find(BytesToByteLevel(piece));
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  std::vector<int64_t> sym;
  sym.reserve(piece.size());
  for (char c : piece) sym.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  std::vector<int64_t> next;
  while (sym.size() > 1) {
    // The lowest-ranked adjacent pair, then every occurrence of it, left to right.
    const Merge* best = nullptr;
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merges_.find(PairKey(sym[i], sym[i + 1]));
      if (it != merges_.end() && (best == nullptr || it->second.rank < best->rank)) {
        best = &it->second;
        best_key = it->first;
      }
    }
    if (best == nullptr) break;
    next.clear();
    for (size_t i = 0; i < sym.size(); ++i) {
      if (i + 1 < sym.size() && PairKey(sym[i], sym[i + 1]) == best_key) {
        next.push_back(best->merged);
        ++i;
      } else {
        next.push_back(sym[i]);
      }
    }
    sym.swap(next);
  }
  ids->insert(ids->end(), sym.begin(), sym.end());
}

absl::StatusOr<std::vector<absl::string_view>> BpeTokenizer::SplitPieces(
    absl::string_view text) const {
  std::vector<absl::string_view> pieces = {text};
  for (const auto& splitter : splitters_) {
    std::vector<absl::string_view> finer;
    for (absl::string_view p : pieces) {
      absl::StatusOr<std::vector<absl::string_view>> split = splitter->Split(p);
      if (!split.ok()) return split.status();
      finer.insert(finer.end(), split->begin(), split->end());
    }
    pieces.swap(finer);
  }
  return pieces;
}

absl::StatusOr<absl::string_view> BpeTokenizer::Normalize(absl::string_view text,
                                                          std::string* storage) const {
  if (!nfc_) return text;
  return ToNfc(text, storage);
}

absl::Status BpeTokenizer::EncodeNormalized(absl::string_view text, bool allow_added_tokens,
                                            std::vector<int64_t>* ids) const {
  for (const Segment& seg : SplitOnAddedTokens(text, /*normalized=*/true, allow_added_tokens)) {
    if (seg.token != nullptr) {
      ids->push_back(seg.token->id);
      continue;
    }
    absl::StatusOr<std::vector<absl::string_view>> pieces = SplitPieces(seg.text);
    if (!pieces.ok()) return pieces.status();
    for (absl::string_view p : *pieces) EncodePiece(p, ids);
  }
  return absl::OkStatus();
}

std::vector<BpeTokenizer::Segment> BpeTokenizer::SplitOnAddedTokens(absl::string_view text,
                                                                    bool normalized,
                                                                    bool enabled) const {
  std::vector<Segment> out;
  const std::vector<size_t>& order = added_by_length_[normalized];
  size_t segment = 0;  // start of the text not yet emitted
  for (size_t pos = 0; enabled && !order.empty() && pos < text.size();) {
    const AddedToken* hit = nullptr;
    size_t length = 0;
    for (size_t i : order) {
      const std::string& m = match_text_[i];
      if (text.compare(pos, m.size(), m) == 0) {
        hit = &added_tokens_[i];
        length = m.size();
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    if (pos > segment) out.push_back({text.substr(segment, pos - segment), nullptr});
    out.push_back({absl::string_view(), hit});
    pos += length;
    segment = pos;
  }
  if (segment < text.size()) out.push_back({text.substr(segment), nullptr});
  return out;
}

absl::StatusOr<std::vector<int64_t>> BpeTokenizer::Encode(absl::string_view text,
                                                          bool allow_added_tokens) const {
  // Hugging Face's order: tokens with normalized false are matched on the raw text; the text
  // between them is normalised, then tokens with normalized true are matched on that.
  std::vector<int64_t> ids;
  std::string storage;
  for (const Segment& seg : SplitOnAddedTokens(text, /*normalized=*/false, allow_added_tokens)) {
    if (seg.token != nullptr) {
      ids.push_back(seg.token->id);
      continue;
    }
    absl::StatusOr<absl::string_view> normalized = Normalize(seg.text, &storage);
    if (!normalized.ok()) return normalized.status();
    absl::Status s = EncodeNormalized(*normalized, allow_added_tokens, &ids);
    if (!s.ok()) return s;
  }
  return ids;
}

absl::StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int64_t>& ids,
                                                 bool skip_special_tokens) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto added = added_by_id_.find(ids[i]);
    if (added != added_by_id_.end()) {
      const AddedToken& t = added_tokens_[added->second];
      if (!(t.special && skip_special_tokens)) out += t.content;
      continue;
    }
    auto it = id_to_token_.find(ids[i]);
    if (it == id_to_token_.end() || !ByteLevelToBytes(it->second, &out)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Decode: token id ", ids[i], " at position ", i, " is not in the vocabulary"));
    }
  }
  return out;
}

int64_t BpeTokenizer::TokenToId(absl::string_view token) const {
  for (const AddedToken& t : added_tokens_) {
    if (t.content == token) return t.id;
  }
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

std::string BpeTokenizer::IdToToken(int64_t id) const {
  auto added = added_by_id_.find(id);
  if (added != added_by_id_.end()) return added_tokens_[added->second].content;
  auto it = id_to_token_.find(id);
  return it == id_to_token_.end() ? std::string() : it->second;
}

absl::StatusOr<std::vector<std::string>> BpeTokenizer::PreTokenize(absl::string_view text) const {
  std::string storage;
  absl::StatusOr<absl::string_view> normalized = Normalize(text, &storage);
  if (!normalized.ok()) return normalized.status();
  absl::StatusOr<std::vector<absl::string_view>> pieces = SplitPieces(*normalized);
  if (!pieces.ok()) return pieces.status();
  return std::vector<std::string>(pieces->begin(), pieces->end());
}

}  // namespace data
}  // namespace dhp
