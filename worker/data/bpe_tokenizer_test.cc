#include "worker/data/bpe_tokenizer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/data/byte_level.h"

namespace dhp {
namespace data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

TEST(ByteLevelTest, Gpt2Alphabet) {
  EXPECT_EQ(ByteToCodePoint('!'), U'!');
  EXPECT_EQ(ByteToCodePoint('a'), U'a');
  EXPECT_EQ(ByteToCodePoint(0xE9), U'\u00E9');  // printable Latin-1 maps to itself
  EXPECT_EQ(ByteToCodePoint(0x00), U'\u0100');
  EXPECT_EQ(ByteToCodePoint('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(ByteToCodePoint(' '), U'\u0120');   // Ġ
  EXPECT_EQ(ByteToCodePoint(0x7F), U'\u0121');  // after the 33 control/space bytes
  EXPECT_EQ(ByteToCodePoint(0xAD), U'\u0143');  // soft hyphen, the last one
  for (int b = 0; b < 256; ++b) EXPECT_EQ(CodePointToByte(ByteToCodePoint(b)), b);
  EXPECT_EQ(CodePointToByte(U'\u0144'), -1);
  EXPECT_EQ(BytesToByteLevel("a b\n"), "a\xC4\xA0" "b\xC4\x8A");
  std::string bytes;
  ASSERT_TRUE(ByteLevelToBytes("a\xC4\xA0" "b", &bytes));
  EXPECT_EQ(bytes, "a b");
}

// A byte-level vocabulary with id = byte value, plus the given merges appended in order.
Json MiniTokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                   bool merges_as_strings) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[BytesToByteLevel(std::string(1, static_cast<char>(b)))] = b;
  Json merge_list = Json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
    if (merges_as_strings) {
      merge_list.push_back(a + " " + b);
    } else {
      merge_list.push_back(Json::array({a, b}));
    }
  }
  Json j;
  j["version"] = "1.0";
  j["added_tokens"] = Json::array({
      {{"id", 300}, {"content", "<|im_start|>"}, {"special", true}},
      {{"id", 301}, {"content", "<|im_end|>"}, {"special", true}},
      {{"id", 302}, {"content", "<a>"}, {"special", false}},
      {{"id", 303}, {"content", "<a><b>"}, {"special", false}},
  });
  j["normalizer"] = nullptr;
  Json split;
  split["type"] = "Split";
  split["pattern"]["Regex"] = std::string(kQwen2SplitPattern);
  split["behavior"] = "Isolated";
  split["invert"] = false;
  Json byte_level;
  byte_level["type"] = "ByteLevel";
  byte_level["add_prefix_space"] = false;
  byte_level["use_regex"] = false;
  j["pre_tokenizer"]["type"] = "Sequence";
  j["pre_tokenizer"]["pretokenizers"] = Json::array({split, byte_level});
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}};
  return j;
}

const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"},             // 256 "he"
    {"l", "l"},             // 257 "ll"
    {"he", "ll"},           // 258 "hell"
    {"hell", "o"},          // 259 "hello"
    {"\xC4\xA0", "w"},      // 260 "Ġw"
    {"o", "r"},             // 261 "or"
    {"\xC4\xA0w", "or"},    // 262 "Ġwor"
};

std::unique_ptr<BpeTokenizer> Mini(bool merges_as_strings = false) {
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok =
      BpeTokenizer::FromJson(MiniTokenizer(kMerges, merges_as_strings).dump(), "mini.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(BpeTokenizerTest, KnownMergesGiveKnownIds) {
  for (bool strings : {false, true}) {
    auto tok = Mini(strings);
    ASSERT_NE(tok, nullptr);
    // "hello": he(0) -> ll(1) -> hell(2) -> hello(3). " world": Ġw(4), or(5), Ġwor(6), l, d.
    EXPECT_THAT(*tok->Encode("hello world"), ElementsAre(259, 262, 'l', 'd')) << strings;
    // No merge crosses a pre-token boundary: "hello" then "," then " hello" (Ġ h e ll o).
    EXPECT_THAT(*tok->Encode("hello, hello"), ElementsAre(259, ',', ' ', 259));
    EXPECT_EQ(tok->TokenToId("hello"), 259);
    EXPECT_EQ(tok->IdToToken(262), "\xC4\xA0wor");
    EXPECT_EQ(tok->vocab_size(), 304);
  }
}

TEST(BpeTokenizerTest, AddedTokensAreSplitFirstLongestMatch) {
  auto tok = Mini();
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(*tok->Encode("<|im_start|>hello<|im_end|>"), ElementsAre(300, 259, 301));
  EXPECT_THAT(*tok->Encode("<a><b><a>"), ElementsAre(303, 302));
  // Disabled: the markup is ordinary text and round-trips.
  absl::StatusOr<std::vector<int64_t>> plain = tok->Encode("<|im_end|>", false);
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(*plain, ::testing::Not(::testing::Contains(301)));
  EXPECT_EQ(*tok->Decode(*plain), "<|im_end|>");
  EXPECT_EQ(*tok->Decode({300, 259, 301}), "<|im_start|>hello<|im_end|>");
  EXPECT_EQ(*tok->Decode({300, 259, 301, 302}, /*skip_special_tokens=*/true), "hello<a>");
  EXPECT_FALSE(tok->Decode({5000}).ok());
}

TEST(BpeTokenizerTest, PreTokenizerSplitsKnownStrings) {
  auto tok = Mini();
  ASSERT_NE(tok, nullptr);
  struct Case {
    std::string text;
    std::vector<std::string> pieces;
  };
  const std::vector<Case> cases = {
      {"Hello world", {"Hello", " world"}},
      {"I'm fine", {"I", "'m", " fine"}},
      {"HE'LL don't", {"HE", "'LL", " don", "'t"}},  // contractions are case-insensitive
      {"abc123", {"abc", "1", "2", "3"}},            // digits one at a time
      {"$100", {"$", "1", "0", "0"}},
      {"  hi", {" ", " hi"}},                         // \s+(?!\S) leaves one space to the word
      {"Hello, world!\n\nBye", {"Hello", ",", " world", "!\n\n", "Bye"}},
      {"x\n  y", {"x", "\n", " ", " y"}},
      {"a\n\n\nb", {"a", "\n\n\n", "b"}},
      {"end.  ", {"end", ".", "  "}},
      {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", {"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C"}},
      {"\xF0\x9F\x98\x80 ok", {"\xF0\x9F\x98\x80", " ok"}},  // emoji is a symbol, not a letter
      {"(x)", {"(x", ")"}},                                   // one leading non-letter joins
      {"\tgo", {"\tgo"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<std::string>> got = tok->PreTokenize(c.text);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.pieces) << "text: " << c.text;
  }
}

TEST(BpeTokenizerTest, RoundTripsArbitraryUtf8) {
  auto tok = Mini();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> texts = {
      "",
      "hello world",
      "Don't you'll WE'VE they'd",
      "line1\nline2\r\n\r\n  indented\ttab",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and flags",
      "\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
      "caf\xC3\xA9 na\xC3\xAFve \xC3\x85ngstr\xC3\xB6m",
      "<|im_start|>user\nhi<|im_end|>\n",
      std::string("nul\0byte", 8),
  };
  for (const std::string& t : texts) {
    absl::StatusOr<std::vector<int64_t>> ids = tok->Encode(t);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*tok->Decode(*ids), t);
  }
}

TEST(BpeTokenizerTest, InvalidUtf8IsAnError) {
  auto tok = Mini();
  ASSERT_NE(tok, nullptr);
  absl::StatusOr<std::vector<int64_t>> ids = tok->Encode("ok \xC3(");
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("UTF-8"));
}

TEST(BpeTokenizerTest, LoadErrorsNameTheField) {
  Json j = MiniTokenizer(kMerges, false);
  j["model"]["merges"].push_back(Json::array({"q", "zz"}));
  auto bad_merge = BpeTokenizer::FromJson(j.dump(), "t.json");
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_THAT(bad_merge.status().message(), HasSubstr("t.json: model.merges[7]"));

  Json k = MiniTokenizer(kMerges, false);
  k["model"]["vocab"].erase("a");
  auto no_byte = BpeTokenizer::FromJson(k.dump(), "t.json");
  ASSERT_FALSE(no_byte.ok());
  EXPECT_THAT(no_byte.status().message(), HasSubstr("byte 97"));

  auto not_json = BpeTokenizer::FromJson("{\"model\": ", "broken.json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_THAT(not_json.status().message(), HasSubstr("broken.json: invalid JSON"));

  // A field of another type than the format's is an error, never a throw (the fuzzer found
  // "ignore_merges": {...} ending the process).
  Json m = MiniTokenizer(kMerges, false);
  m["model"]["ignore_merges"] = Json::object({{"a", 1}});
  auto object_flag = BpeTokenizer::FromJson(m.dump(), "t.json");
  ASSERT_FALSE(object_flag.ok());
  EXPECT_THAT(object_flag.status().message(),
              HasSubstr("t.json: model.ignore_merges must be true or false"));
  m["model"]["ignore_merges"] = true;
  EXPECT_TRUE(BpeTokenizer::FromJson(m.dump(), "t.json").ok());
  Json n = MiniTokenizer(kMerges, false);
  n["added_tokens"] = Json::array({Json::object({{"id", "seven"}, {"content", "<x>"}})});
  auto wrong_type = BpeTokenizer::FromJson(n.dump(), "t.json");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_THAT(wrong_type.status().message(), HasSubstr("t.json: "));

  auto missing = BpeTokenizer::FromFile("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/tokenizer.json"));
}

std::unique_ptr<BpeTokenizer> MiniWithNormalizer(const Json& normalizer) {
  Json j = MiniTokenizer(kMerges, false);
  j["normalizer"] = normalizer;
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromJson(j.dump(), "nfc.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(BpeTokenizerTest, NfcNormalizerComposesBeforePreTokenizing) {
  const Json nfc = {{"type", "NFC"}};
  const Json sequence = {{"type", "Sequence"}, {"normalizers", Json::array({nfc})}};
  for (const Json& normalizer : {nfc, sequence}) {
    auto tok = MiniWithNormalizer(normalizer);
    ASSERT_NE(tok, nullptr);
    // Decomposed e + U+0301 encodes as the composed U+00E9 (bytes C3 A9).
    EXPECT_EQ(*tok->Encode("caf" "e\xCC\x81"), *tok->Encode("caf\xC3\xA9"));
    EXPECT_THAT(*tok->Encode("e\xCC\x81"), ElementsAre(0xC3, 0xA9));
    // Hangul jamo compose to one syllable (U+AC00, EA B0 80), a CJK compatibility ideograph maps
    // to its unified form (U+F900 -> U+8C48, E8 B1 88).
    EXPECT_THAT(*tok->Encode("\xE1\x84\x80\xE1\x85\xA1"), ElementsAre(0xEA, 0xB0, 0x80));
    EXPECT_THAT(*tok->Encode("\xEF\xA4\x80"), ElementsAre(0xE8, 0xB1, 0x88));
    // The pre-tokenizer sees composed text: "e" + U+0301 is one letter run with "caf".
    EXPECT_EQ(*tok->PreTokenize("caf" "e\xCC\x81!"),
              (std::vector<std::string>{"caf\xC3\xA9", "!"}));
    // Added tokens are cut out first: a mark after one is normalised alone (stays U+0301).
    EXPECT_THAT(*tok->Encode("<|im_end|>\xCC\x81"), ElementsAre(301, 0xCC, 0x81));
    EXPECT_THAT(*tok->Encode("hello"), ElementsAre(259));
    EXPECT_TRUE(tok->Encode("").ok());
    absl::StatusOr<std::vector<int64_t>> bad = tok->Encode("e\xCC\x81 \xFF");
    ASSERT_FALSE(bad.ok());
    EXPECT_THAT(bad.status().message(), HasSubstr("not valid UTF-8 at byte 4"));
  }
  // Without a normalizer the decomposed form stays as it is.
  auto plain = Mini();
  ASSERT_NE(plain, nullptr);
  EXPECT_THAT(*plain->Encode("e\xCC\x81"), ElementsAre('e', 0xCC, 0x81));
}

TEST(BpeTokenizerTest, NormalizedAddedTokensMatchTheNormalisedText) {
  Json j = MiniTokenizer(kMerges, false);
  j["normalizer"] = {{"type", "NFC"}};
  // "caf" + "e" U+0301, normalized: matched after NFC, so "café" in either form finds it.
  j["added_tokens"].push_back({{"id", 304},
                               {"content", "caf" "e\xCC\x81"},
                               {"special", false},
                               {"normalized", true}});
  auto tok = BpeTokenizer::FromJson(j.dump(), "normalized.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(*(*tok)->Encode("caf\xC3\xA9!"), ElementsAre(304, '!'));
  EXPECT_THAT(*(*tok)->Encode("caf" "e\xCC\x81<a>"), ElementsAre(304, 302));
  EXPECT_THAT(*(*tok)->Encode("caf\xC3\xA9", /*allow_added_tokens=*/false),
              ElementsAre('c', 'a', 'f', 0xC3, 0xA9));
}

TEST(BpeTokenizerTest, UnsupportedNormalizersAndTokenFlagsAreLoadErrors) {
  Json j = MiniTokenizer(kMerges, false);
  j["normalizer"] = {{"type", "NFKC"}};
  auto nfkc = BpeTokenizer::FromJson(j.dump(), "t.json");
  ASSERT_FALSE(nfkc.ok());
  EXPECT_THAT(nfkc.status().message(), HasSubstr("normalizer"));
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "Lowercase"}}})}};
  auto lower = BpeTokenizer::FromJson(j.dump(), "t.json");
  ASSERT_FALSE(lower.ok());
  EXPECT_THAT(lower.status().message(), HasSubstr("normalizer.normalizers[1]"));

  Json k = MiniTokenizer(kMerges, false);
  k["added_tokens"][1]["lstrip"] = true;
  auto lstrip = BpeTokenizer::FromJson(k.dump(), "t.json");
  ASSERT_FALSE(lstrip.ok());
  EXPECT_THAT(lstrip.status().message(), HasSubstr("added_tokens[1].lstrip"));
}

TEST(BpeTokenizerTest, Gpt2StyleByteLevelRegex) {
  Json j = MiniTokenizer(kMerges, false);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  auto tok = BpeTokenizer::FromJson(j.dump(), "gpt2.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  // GPT-2 keeps digit runs together and lets a space lead digits.
  EXPECT_EQ(*(*tok)->PreTokenize("abc 123"), (std::vector<std::string>{"abc", " 123"}));
}

}  // namespace
}  // namespace data
}  // namespace dhp
