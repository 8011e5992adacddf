#include "worker/data/bpe_trainer.h"

#include <map>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/data/byte_level.h"

namespace dhp {
namespace data {
namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

uint64_t Key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

absl::StatusOr<BpeModel> TrainBpe(const std::vector<std::string>& texts,
                                  const BpeTrainerOptions& options) {
  if (options.vocab_size < 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", options.vocab_size, " is below the 256 byte symbols"));
  }
  absl::StatusOr<std::unique_ptr<RegexSplitter>> splitter =
      RegexSplitter::Create(options.split_pattern);
  if (!splitter.ok()) return splitter.status();

  // Distinct pre-tokens with their counts, in a deterministic (sorted) order.
  std::map<std::string, int64_t> counts;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<std::vector<absl::string_view>> pieces = (*splitter)->Split(texts[i]);
    if (!pieces.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("corpus text ", i, ": ", pieces.status().message()));
    }
    for (absl::string_view p : *pieces) ++counts[std::string(p)];
  }
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [piece, count] : counts) {
    Word w;
    for (char c : piece) w.symbols.push_back(static_cast<uint8_t>(c));
    w.count = count;
    words.push_back(std::move(w));
  }

  BpeModel model;
  model.split_pattern = options.split_pattern;
  for (int b = 0; b < 256; ++b) {
    model.vocab.push_back(BytesToByteLevel(std::string(1, static_cast<char>(b))));
  }
  std::unordered_map<uint64_t, int64_t> pair_counts;
  while (static_cast<int64_t>(model.vocab.size()) < options.vocab_size) {
    pair_counts.clear();
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        pair_counts[Key(w.symbols[i], w.symbols[i + 1])] += w.count;
      }
    }
    uint64_t best_key = 0;
    int64_t best_count = 0;
    for (const auto& [key, count] : pair_counts) {
      if (count > best_count || (count == best_count && key < best_key)) {
        best_key = key;
        best_count = count;
      }
    }
    if (best_count < std::max<int64_t>(options.min_frequency, 1)) break;
    const int32_t a = static_cast<int32_t>(best_key >> 32);
    const int32_t b = static_cast<int32_t>(best_key & 0xFFFFFFFFu);
    const int32_t merged = static_cast<int32_t>(model.vocab.size());
    model.merges.emplace_back(model.vocab[a], model.vocab[b]);
    model.vocab.push_back(model.vocab[a] + model.vocab[b]);
    for (Word& w : words) {
      size_t out = 0;
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          w.symbols[out++] = merged;
          ++i;
        } else {
          w.symbols[out++] = w.symbols[i];
        }
      }
      w.symbols.resize(out);
    }
  }
  return model;
}

absl::StatusOr<std::string> BpeModelToTokenizerJson(const BpeModel& model,
                                                    const std::vector<AddedToken>& added_tokens) {
  using Json = nlohmann::ordered_json;
  int64_t next_id = static_cast<int64_t>(model.vocab.size());
  Json added = Json::array();
  for (const AddedToken& t : added_tokens) {
    if (t.id < next_id || t.content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "added token \"", t.content, "\" id ", t.id, ": ids must increase from ", next_id));
    }
    next_id = t.id + 1;
    added.push_back({{"id", t.id},
                     {"content", t.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", t.special}});
  }
  const Json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
      {"use_regex", false}};
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", model.split_pattern}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json vocab = Json::object();
  for (size_t id = 0; id < model.vocab.size(); ++id) vocab[model.vocab[id]] = id;
  Json merges = Json::array();
  for (const auto& [a, b] : model.merges) merges.push_back(a + " " + b);

  Json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level})}};
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(1) + "\n";
}

}  // namespace data
}  // namespace dhp
