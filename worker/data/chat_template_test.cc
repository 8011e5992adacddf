#include "worker/data/chat_template.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp {
namespace data {
namespace {

using ::testing::HasSubstr;

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = BpeTokenizer::FromFile("configs/tiny-tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
    auto t = ChatTemplate::Create(*tok_);
    ASSERT_TRUE(t.ok()) << t.status();
    tmpl_ = std::make_unique<ChatTemplate>(std::move(*t));
  }

  std::vector<int64_t> Enc(const std::string& text) { return *tok_->Encode(text, false); }

  // The ids with label != -100, decoded.
  std::string LabelledText(const TokenizedConversation& c) {
    std::vector<int64_t> ids;
    for (size_t i = 0; i < c.labels.size(); ++i) {
      if (c.labels[i] != kIgnoreLabel) {
        EXPECT_EQ(c.labels[i], c.input_ids[i]) << i;
        ids.push_back(c.labels[i]);
      }
    }
    return *tok_->Decode(ids);
  }

  std::unique_ptr<BpeTokenizer> tok_;
  std::unique_ptr<ChatTemplate> tmpl_;
};

TEST_F(ChatTemplateTest, ExactTokensAndLabelsOfOneTurn) {
  const std::vector<Message> conv = {
      {Role::kUser, "<image>\nWhat is it?"},
      {Role::kAssistant, "a red circle on the left"},
  };
  absl::StatusOr<TokenizedConversation> c = tmpl_->Apply(conv, {2});
  ASSERT_TRUE(c.ok()) << c.status();

  // Expected ids, built by hand from the template (tiny specials: im_start 1001, im_end 1002,
  // vision_start 1003, vision_end 1004, image_pad 1005).
  std::vector<int64_t> want;
  std::vector<int64_t> want_labels;
  auto add = [&](const std::vector<int64_t>& ids, bool labelled) {
    want.insert(want.end(), ids.begin(), ids.end());
    for (int64_t id : ids) want_labels.push_back(labelled ? id : -100);
  };
  add({1001}, false);
  add(Enc("system\nYou are a helpful assistant."), false);
  add({1002}, false);
  add(Enc("\n"), false);
  add({1001}, false);
  add(Enc("user\n"), false);
  add({1003, 1005, 1005, 1004}, false);
  add(Enc("\nWhat is it?"), false);
  add({1002}, false);
  add(Enc("\n"), false);
  add({1001}, false);
  add(Enc("assistant\n"), false);
  add(Enc("a red circle on the left"), true);
  add({1002}, true);
  add(Enc("\n"), true);
  EXPECT_EQ(c->input_ids, want);
  EXPECT_EQ(c->labels, want_labels);

  const std::string text =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\n<|vision_start|><|image_pad|><|image_pad|><|vision_end|>\nWhat is it?"
      "<|im_end|>\n<|im_start|>assistant\na red circle on the left<|im_end|>\n";
  EXPECT_EQ(*tok_->Decode(c->input_ids), text);
  EXPECT_EQ(tmpl_->Render(conv, {2}), text);
  // Same ids as tokenizing the whole rendered string (Hugging Face's way).
  EXPECT_EQ(c->input_ids, *tok_->Encode(text));
  EXPECT_EQ(LabelledText(*c), "a red circle on the left<|im_end|>\n");

  // Label mask positions: the answer starts right after "assistant\n".
  const size_t answer_start = want.size() - Enc("a red circle on the left").size() - 2;
  for (size_t i = 0; i < c->labels.size(); ++i) {
    EXPECT_EQ(c->labels[i] != -100, i >= answer_start) << i;
  }
  EXPECT_EQ(c->input_ids[answer_start - 1], Enc("assistant\n").back());
}

TEST_F(ChatTemplateTest, MultiTurnWithSystemPromptAndTwoImages) {
  const std::vector<Message> conv = {
      {Role::kSystem, "Be brief."},
      {Role::kUser, "First <image> then"},
      {Role::kAssistant, "a blue square"},
      {Role::kUser, "And <image>?"},
      {Role::kAssistant, "a green triangle"},
  };
  absl::StatusOr<TokenizedConversation> c = tmpl_->Apply(conv, {1, 3});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string text =
      "<|im_start|>system\nBe brief.<|im_end|>\n"
      "<|im_start|>user\nFirst <|vision_start|><|image_pad|><|vision_end|> then<|im_end|>\n"
      "<|im_start|>assistant\na blue square<|im_end|>\n"
      "<|im_start|>user\nAnd <|vision_start|><|image_pad|><|image_pad|><|image_pad|>"
      "<|vision_end|>?<|im_end|>\n"
      "<|im_start|>assistant\na green triangle<|im_end|>\n";
  EXPECT_EQ(*tok_->Decode(c->input_ids), text);
  EXPECT_EQ(c->input_ids, *tok_->Encode(text));
  EXPECT_EQ(LabelledText(*c), "a blue square<|im_end|>\na green triangle<|im_end|>\n");
  EXPECT_EQ(std::count(c->input_ids.begin(), c->input_ids.end(), 1005), 4);
  EXPECT_EQ(c->input_ids.size(), c->labels.size());
}

TEST_F(ChatTemplateTest, AnswerStartingWithNewlineKeepsAnExactLabelBoundary) {
  absl::StatusOr<TokenizedConversation> c =
      tmpl_->Apply({{Role::kUser, "hi"}, {Role::kAssistant, "\n\nok"}}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(LabelledText(*c), "\n\nok<|im_end|>\n");
}

TEST_F(ChatTemplateTest, SpecialTokenTextInDataIsOrdinaryText) {
  absl::StatusOr<TokenizedConversation> c =
      tmpl_->Apply({{Role::kUser, "say <|image_pad|>"}, {Role::kAssistant, "<|im_end|>"}}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(std::count(c->input_ids.begin(), c->input_ids.end(), 1005), 0);
  EXPECT_EQ(std::count(c->input_ids.begin(), c->input_ids.end(), 1002), 3);  // the template's
  EXPECT_EQ(LabelledText(*c), "<|im_end|><|im_end|>\n");
}

TEST_F(ChatTemplateTest, Errors) {
  struct Case {
    std::vector<Message> conv;
    std::vector<int64_t> images;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{Role::kUser, "<image> <image>"}, {Role::kAssistant, "x"}}, {4}, "more <image> tags (2)"},
      {{{Role::kUser, "<image>"}, {Role::kAssistant, "x"}}, {4, 4}, "fewer <image> tags (1)"},
      {{{Role::kUser, "q"}, {Role::kAssistant, "x"}}, {4}, "fewer <image> tags (0)"},
      {{{Role::kUser, "q"}}, {}, "not an assistant turn"},
      {{{Role::kAssistant, "x"}}, {}, "turn 0 has role assistant"},
      {{{Role::kUser, "q"}, {Role::kUser, "q"}, {Role::kAssistant, "x"}}, {}, "turn 1"},
      {{{Role::kUser, "q"}, {Role::kAssistant, "<image>"}}, {4}, "images belong in user turns"},
      {{{Role::kUser, "q"}, {Role::kSystem, "s"}, {Role::kAssistant, "x"}}, {}, "turn 1 has role system"},
      {{}, {}, "no turns"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TokenizedConversation> got = tmpl_->Apply(c.conv, c.images);
    ASSERT_FALSE(got.ok()) << c.message;
    EXPECT_THAT(got.status().message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace data
}  // namespace dhp
