#include "worker/data/tiny_tokenizer.h"

#include "common/model_presets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/byte_level.h"
#include "worker/data/file_util.h"
#include "worker/data/rng.h"
#include "worker/data/shapes_generator.h"

namespace dhp {
namespace data {
namespace {

constexpr char kShipped[] = "configs/tiny-tokenizer.json";

std::unique_ptr<BpeTokenizer> LoadShipped() {
  auto tok = BpeTokenizer::FromFile(kShipped);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(TinyTokenizerTest, ShippedFileIsTheTrainersOutput) {
  absl::StatusOr<std::string> shipped = ReadFileToString(kShipped);
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  absl::StatusOr<std::string> trained = TrainTinyTokenizerJson();
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_TRUE(*shipped == *trained)
      << "configs/tiny-tokenizer.json is stale; regenerate it with dhp-train-tokenizer";
}

TEST(TinyTokenizerTest, SpecialTokensSitAtThePresetIds) {
  auto tok = LoadShipped();
  ASSERT_NE(tok, nullptr);
  const ModelPreset* tiny = FindModelPreset("tiny");
  ASSERT_NE(tiny, nullptr);
  EXPECT_EQ(tok->TokenToId("<|endoftext|>"), tiny->tokens.endoftext);
  EXPECT_EQ(tok->TokenToId("<|im_start|>"), tiny->tokens.im_start);
  EXPECT_EQ(tok->TokenToId("<|im_end|>"), tiny->tokens.im_end);
  EXPECT_EQ(tok->TokenToId("<|vision_start|>"), tiny->tokens.vision_start);
  EXPECT_EQ(tok->TokenToId("<|vision_end|>"), tiny->tokens.vision_end);
  EXPECT_EQ(tok->TokenToId("<|image_pad|>"), tiny->tokens.image_pad);
  EXPECT_EQ(tok->TokenToId("<|video_pad|>"), tiny->tokens.video_pad);
  EXPECT_EQ(tok->TokenToId("<|endoftext|>"), 1000);
  EXPECT_EQ(tok->TokenToId("<|video_pad|>"), 1006);
  EXPECT_EQ(tok->vocab_size(), 1007);
  EXPECT_LE(tok->vocab_size(), tiny->text.vocab_size);
  EXPECT_THAT(*tok->Encode("<|im_start|>user\n<|vision_start|><|image_pad|><|image_pad|>"
                           "<|vision_end|><|im_end|><|endoftext|>"),
              ::testing::IsSupersetOf({1001, 1003, 1005, 1004, 1002, 1000}));
  // The 1000 regular ids are all used: 256 bytes + 744 merges.
  EXPECT_EQ(tok->IdToToken(999).empty(), false);
}

TEST(TinyTokenizerTest, RoundTripsArbitraryUtf8) {
  auto tok = LoadShipped();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> texts = {
      "a red circle on the left",
      "You are a helpful assistant.",
      "I'm sure they'll say it's fine, WE'VE checked; haven't we?",
      "multi\nline\r\n\n  text\twith   spaces  ",
      "\xF0\x9F\x98\x80\xF0\x9F\x8E\x89 emoji, \xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C CJK",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xCE\xB3\xCE\xB5\xCE\xB9\xCE\xB1",
      "numbers 1234567890 and symbols ~!@#$%^&*()_+{}|:\"<>?",
      "<|im_start|>assistant\nan orange square<|im_end|>\n",
  };
  for (const std::string& t : texts) {
    absl::StatusOr<std::vector<int64_t>> ids = tok->Encode(t);
    ASSERT_TRUE(ids.ok()) << ids.status();
    for (int64_t id : *ids) ASSERT_LT(id, 1007);
    EXPECT_EQ(*tok->Decode(*ids), t);
  }
}

TEST(TinyTokenizerTest, RoundTripsRandomUtf8) {
  auto tok = LoadShipped();
  ASSERT_NE(tok, nullptr);
  // Code points from ASCII, whitespace, Latin-1, Greek/Cyrillic, CJK, emoji and the top plane.
  const char32_t ranges[][2] = {{0x20, 0x7E},       {0x09, 0x0D},       {0xA0, 0x17F},
                                {0x370, 0x4FF},     {0x4E00, 0x9FFF},   {0x1F300, 0x1FAFF},
                                {0xE000, 0xFFFD},   {0x10000, 0x10FFFF}};
  Rng rng(123);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng.Range(0, 40));
    for (int i = 0; i < len; ++i) {
      const auto& r = ranges[rng.Uniform(8)];
      char32_t cp = static_cast<char32_t>(rng.Range(r[0], r[1]));
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      AppendUtf8(cp, &text);
    }
    absl::StatusOr<std::vector<int64_t>> ids = tok->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(*tok->Decode(*ids), text) << "trial " << trial;
  }
}

TEST(TinyTokenizerTest, CaptionsAreCompact) {
  auto tok = LoadShipped();
  ASSERT_NE(tok, nullptr);
  // Every caption word was in the corpus many times: one token per word.
  for (const std::string& caption : AllShapeCaptions()) {
    absl::StatusOr<std::vector<int64_t>> ids = tok->Encode(caption);
    ASSERT_TRUE(ids.ok());
    const size_t words = std::count(caption.begin(), caption.end(), ' ') + 1;
    EXPECT_EQ(ids->size(), words) << caption;
  }
}

}  // namespace
}  // namespace data
}  // namespace dhp
