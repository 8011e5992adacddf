#include "worker/data/llava_annotations.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp {
namespace data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LlavaAnnotationsTest, JsonlRecords) {
  const std::string text =
      R"({"id": "a", "image": "img/a.png", "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A cat."}]})"
      "\n\n"  // blank lines are skipped but counted
      R"({"image": ["x.png", "y.jpg"], "conversations": [{"from": "system", "value": "S"}, {"from": "user", "value": "<image><image> compare"}, {"from": "assistant", "value": "same"}]})"
      "\r\n"
      R"({"id": 7, "conversations": [{"from": "human", "value": "text only"}, {"from": "gpt", "value": "ok"}]})";
  absl::StatusOr<std::vector<LlavaRecord>> r = ParseLlavaAnnotations(text, "d.jsonl");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].location, "d.jsonl:1");
  EXPECT_EQ((*r)[0].id, "a");
  EXPECT_THAT((*r)[0].images, ElementsAre("img/a.png"));
  ASSERT_EQ((*r)[0].messages.size(), 2u);
  EXPECT_EQ((*r)[0].messages[0].role, Role::kUser);
  EXPECT_EQ((*r)[0].messages[0].content, "<image>\nWhat?");
  EXPECT_EQ((*r)[0].messages[1].role, Role::kAssistant);
  EXPECT_EQ((*r)[1].location, "d.jsonl:3");
  EXPECT_THAT((*r)[1].images, ElementsAre("x.png", "y.jpg"));
  EXPECT_EQ((*r)[1].messages[0].role, Role::kSystem);
  EXPECT_EQ((*r)[2].location, "d.jsonl:4");
  EXPECT_EQ((*r)[2].id, "7");
  EXPECT_TRUE((*r)[2].images.empty());
}

TEST(LlavaAnnotationsTest, JsonArrayRecordsKnowTheirLines) {
  const std::string text = R"([
  {"image": "a.png",
   "conversations": [{"from": "human", "value": "<image> hi, \"quoted\" [x]"},
                     {"from": "gpt", "value": "{not a brace}"}]},
  {"image": "b.png", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "b"}]}
])";
  absl::StatusOr<std::vector<LlavaRecord>> r = ParseLlavaAnnotations(text, "d.json");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].location, "d.json:2 (record 0)");
  EXPECT_EQ((*r)[1].location, "d.json:5 (record 1)");
  EXPECT_EQ((*r)[1].images[0], "b.png");
}

struct BadCase {
  std::string line;
  std::string message;
};

TEST(LlavaAnnotationsTest, BadRecordsNameFileLineAndProblem) {
  const std::string ok =
      R"({"image": "a.png", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}]})";
  const std::vector<BadCase> cases = {
      {R"({"image": "a.png"})", "missing key \"conversations\""},
      {R"({"conversations": [{"from": "human"}]})", "conversations[0]: missing key \"value\""},
      {R"({"conversations": [{"value": "x"}]})", "conversations[0]: missing key \"from\""},
      {R"({"conversations": [{"from": "bot", "value": "x"}]})", "conversations[0].from is \"bot\""},
      {R"({"image": "a.png", "conversations": [{"from": "human", "value": "<image><image>"}]})",
       "more <image> tags (2) than images (1)"},
      {R"({"image": ["a.png", "b.png"], "conversations": [{"from": "human", "value": "<image>"}]})",
       "fewer <image> tags (1) than images (2)"},
      {R"({"image": "a.png", "conversations": [{"from": "human", "value": "no tag"}]})",
       "fewer <image> tags (0) than images (1)"},
      {R"({"image": 5, "conversations": []})", "\"image\" must be a string or a list"},
      {R"({"conversations": []})", "non-empty list"},
      {R"([1, 2])", "record is not a JSON object"},
      {R"({"conversations": [{"from": "human", "value": "x"})", "invalid JSON"},
  };
  for (const BadCase& c : cases) {
    const std::string text = ok + "\n" + ok + "\n" + c.line + "\n" + ok + "\n";
    absl::StatusOr<std::vector<LlavaRecord>> r = ParseLlavaAnnotations(text, "data/train.jsonl");
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_THAT(r.status().message(), HasSubstr("data/train.jsonl:3: ")) << c.line;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.line;

    // Skipping mode keeps the good records and reports the bad one.
    std::vector<absl::Status> skipped;
    r = ParseLlavaAnnotations(text, "data/train.jsonl", &skipped);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->size(), 3u);
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_THAT(skipped[0].message(), HasSubstr("data/train.jsonl:3: "));
  }
}

TEST(LlavaAnnotationsTest, BadRecordInArrayNamesItsLineAndIndex) {
  const std::string text =
      "[\n"
      R"({"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]},)"
      "\n"
      R"({"conversations": [{"from": "robot", "value": "a"}]})"
      "\n]";
  absl::StatusOr<std::vector<LlavaRecord>> r = ParseLlavaAnnotations(text, "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("x.json:3 (record 1): conversations[0].from"));
  EXPECT_FALSE(ParseLlavaAnnotations("[{\"a\": 1},", "y.json").ok());
}

TEST(LlavaAnnotationsTest, MissingFileIsAnError) {
  absl::StatusOr<std::vector<LlavaRecord>> r = LoadLlavaAnnotations("/nonexistent/train.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/train.jsonl"));
}

}  // namespace
}  // namespace data
}  // namespace dhp
