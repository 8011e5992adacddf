#include "worker/data/sample_builder.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/file_util.h"
#include "worker/data/shapes_generator.h"

namespace dhp {
namespace data {
namespace {

using ::testing::HasSubstr;

class SampleBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/sample_builder_test";
    ASSERT_TRUE(WriteShapesDataset({dir_, 3, 112, 5}).ok());
    auto tok = BpeTokenizer::FromFile("configs/tiny-tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
    auto t = ChatTemplate::Create(*tok_);
    ASSERT_TRUE(t.ok());
    tmpl_ = std::make_unique<ChatTemplate>(std::move(*t));
  }

  LlavaRecord Parse(const std::string& jsonl) {
    auto r = ParseLlavaAnnotations(jsonl, "ann.jsonl");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && !r->empty() ? (*r)[0] : LlavaRecord();
  }

  std::string dir_;
  std::unique_ptr<BpeTokenizer> tok_;
  std::unique_ptr<ChatTemplate> tmpl_;
};

TEST_F(SampleBuilderTest, BuildsAShapesSample) {
  auto records = LoadLlavaAnnotations(dir_ + "/train.jsonl");
  ASSERT_TRUE(records.ok()) << records.status();
  SampleBuilder builder(*tmpl_, {});
  absl::StatusOr<TrainingSample> s = builder.Build((*records)[0], dir_);
  ASSERT_TRUE(s.ok()) << s.status();
  // 112x112 -> grid (1, 8, 8): 64 patches, 16 image tokens.
  ASSERT_EQ(s->images.size(), 1u);
  EXPECT_EQ(s->images[0].grid_thw, (std::array<int64_t, 3>{1, 8, 8}));
  EXPECT_EQ(s->images[0].values.size(), 64u * 1176);
  EXPECT_EQ(std::count(s->input_ids.begin(), s->input_ids.end(), 1005), 16);
  EXPECT_EQ(s->input_ids.size(), s->labels.size());
  EXPECT_EQ(s->location, dir_ + "/train.jsonl:1");
}

TEST_F(SampleBuilderTest, MaxPixelsControlsImageTokens) {
  auto records = LoadLlavaAnnotations(dir_ + "/train.jsonl");
  ASSERT_TRUE(records.ok());
  SampleBuilderOptions options;
  options.preprocess.max_pixels = 56 * 56;
  SampleBuilder builder(*tmpl_, options);
  absl::StatusOr<TrainingSample> s = builder.Build((*records)[1], dir_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->images[0].grid_thw, (std::array<int64_t, 3>{1, 4, 4}));
  EXPECT_EQ(std::count(s->input_ids.begin(), s->input_ids.end(), 1005), 4);
}

TEST_F(SampleBuilderTest, UnreadableImageNamesRecordAndFile) {
  ASSERT_TRUE(WriteStringToFile("garbage", dir_ + "/broken.png").ok());
  SampleBuilder builder(*tmpl_, {});
  for (const std::string image : {"missing.png", "broken.png"}) {
    LlavaRecord r = Parse(R"({"image": ")" + image +
                          R"(", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}]})");
    absl::StatusOr<TrainingSample> s = builder.Build(r, dir_);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.status().message(), HasSubstr("ann.jsonl:1: image 0: "));
    EXPECT_THAT(s.status().message(), HasSubstr(dir_ + "/" + image));
  }
}

TEST_F(SampleBuilderTest, TooLongSampleIsAnError) {
  SampleBuilderOptions options;
  options.max_seq_len = 20;
  SampleBuilder builder(*tmpl_, options);
  LlavaRecord r = Parse(
      R"({"image": "images/000000.png", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}]})");
  absl::StatusOr<TrainingSample> s = builder.Build(r, dir_);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("ann.jsonl:1: sample has "));
  EXPECT_THAT(s.status().message(), HasSubstr("more than max_seq_len 20"));
}

TEST_F(SampleBuilderTest, TemplateErrorsNameTheRecord) {
  SampleBuilder builder(*tmpl_, {});
  LlavaRecord r = Parse(
      R"({"conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "y"}]})");
  absl::StatusOr<TrainingSample> s = builder.Build(r, dir_);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("ann.jsonl:1: turn 0 has role assistant"));
}

}  // namespace
}  // namespace data
}  // namespace dhp
