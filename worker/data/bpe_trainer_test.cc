#include "worker/data/bpe_trainer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp {
namespace data {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Pair;

TEST(BpeTrainerTest, MergesMostFrequentPairsByHand) {
  // Pre-tokens: "ab" x1, " ab" x2, " abc" x1. Pair counts: (a,b) 4, (Ġ,a) 3, (b,c) 1.
  // Step 1 merges a+b; then (Ġ,ab) 3 beats (ab,c) 1; then (Ġab,c) occurs once.
  BpeTrainerOptions options;
  options.vocab_size = 300;
  options.min_frequency = 2;
  absl::StatusOr<BpeModel> m = TrainBpe({"ab ab", " ab abc"}, options);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->merges, ElementsAre(Pair("a", "b"), Pair("\xC4\xA0", "ab")));
  ASSERT_EQ(m->vocab.size(), 258u);
  EXPECT_EQ(m->vocab[256], "ab");
  EXPECT_EQ(m->vocab[257], "\xC4\xA0" "ab");

  options.min_frequency = 1;
  m = TrainBpe({"ab ab", " ab abc"}, options);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(m->merges, ElementsAre(Pair("a", "b"), Pair("\xC4\xA0", "ab"),
                                     Pair("\xC4\xA0" "ab", "c")));
}

TEST(BpeTrainerTest, TiesBreakOnSmallestIds) {
  // "xy" and "ab" once each (twice with min 1): (a,b) has the smaller ids.
  BpeTrainerOptions options;
  options.vocab_size = 257;
  options.min_frequency = 1;
  absl::StatusOr<BpeModel> m = TrainBpe({"xy", "ab"}, options);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(m->merges, ElementsAre(Pair("a", "b")));
}

TEST(BpeTrainerTest, JsonLoadsAndEncodesWithTheLearnedMerges) {
  BpeTrainerOptions options;
  options.min_frequency = 1;
  absl::StatusOr<BpeModel> m = TrainBpe({"ab ab", " ab abc"}, options);
  ASSERT_TRUE(m.ok());
  absl::StatusOr<std::string> json =
      BpeModelToTokenizerJson(*m, {{300, "<|x|>", true}, {301, "<|y|>", false}});
  ASSERT_TRUE(json.ok()) << json.status();
  auto tok = BpeTokenizer::FromJson(*json, "trained");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(*(*tok)->Encode("ab abc<|x|>"), ElementsAre(256, 258, 300));
  EXPECT_EQ((*tok)->vocab_size(), 302);
  // Added token ids must increase from the vocabulary size.
  EXPECT_FALSE(BpeModelToTokenizerJson(*m, {{5, "<|x|>", true}}).ok());
}

TEST(BpeTrainerTest, LearnsMergesThatSpanNewlines) {
  // Paragraphs: Qwen2's pre-tokenizer makes "\n\n", ".\n", ".\n\n" and "}\n" pieces, so
  // newline runs and punctuation before newlines are frequent pairs like any other.
  std::vector<std::string> corpus;
  for (int i = 0; i < 20; ++i) {
    corpus.push_back("First line.\nSecond line.\n\nA new paragraph.\n\nfn() {\n}\n\nend");
  }
  BpeTrainerOptions options;
  options.vocab_size = 320;
  absl::StatusOr<BpeModel> m = TrainBpe(corpus, options);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string nl = "\xC4\x8A";  // Ċ, the byte-level newline
  EXPECT_THAT(m->merges, Contains(Pair(nl, nl)));
  EXPECT_THAT(m->merges, Contains(Pair(".", nl)));
  EXPECT_THAT(m->merges, Contains(Pair(".", nl + nl)));
  EXPECT_THAT(m->merges, Contains(Pair("}", nl + nl)));

  absl::StatusOr<std::string> json = BpeModelToTokenizerJson(*m, {});
  ASSERT_TRUE(json.ok()) << json.status();
  auto tok = BpeTokenizer::FromJson(*json, "paragraphs");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int64_t dot_nl_nl = (*tok)->TokenToId("." + nl + nl);
  ASSERT_GE(dot_nl_nl, 256);
  EXPECT_THAT(*(*tok)->Encode("a.\n\nb"), ElementsAre('a', dot_nl_nl, 'b'));
  EXPECT_THAT(*(*tok)->Encode("x\n\ny"), ElementsAre('x', (*tok)->TokenToId(nl + nl), 'y'));
}

TEST(BpeTrainerTest, BadInputs) {
  BpeTrainerOptions options;
  options.vocab_size = 100;
  EXPECT_FALSE(TrainBpe({"a"}, options).ok());
  options.vocab_size = 1000;
  EXPECT_FALSE(TrainBpe({"ok", "bad \xFF"}, options).ok());
}

}  // namespace
}  // namespace data
}  // namespace dhp
