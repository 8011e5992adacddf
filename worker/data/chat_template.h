// The Qwen2.5-VL chat template with training labels.
//
// A conversation renders as
//   <|im_start|>system\n{system prompt}<|im_end|>\n          (default prompt if none is given)
//   <|im_start|>user\n{text}<|im_end|>\n
//   <|im_start|>assistant\n{answer}<|im_end|>\n  ...
// and each `<image>` placeholder in a user turn becomes
//   <|vision_start|><|image_pad|> x n<|vision_end|>   (n = that image's token count).
// Labels equal the input ids on every assistant answer and its `<|im_end|>\n`, and are -100
// everywhere else (the loss shifts them by one position itself).
//
// Tokenization matches Hugging Face's tokenization of the rendered string: the text between two
// special tokens is encoded as one piece. The one exception is the boundary between
// "assistant\n" and the answer: if encoding them together would merge across it (an answer that
// starts with a newline, say), the two are encoded separately so that the labels start exactly
// at the answer (what Qwen's own fine-tuning scripts do). Text from the data is never parsed for
// special tokens: a literal "<|im_end|>" in an answer is ordinary text.
//
// Thread-safety: immutable after Create(); Apply() may run concurrently. Borrows the tokenizer,
// which must outlive the template.
#ifndef DHP_WORKER_DATA_CHAT_TEMPLATE_H_
#define DHP_WORKER_DATA_CHAT_TEMPLATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/bpe_tokenizer.h"

namespace dhp {
namespace data {

constexpr int64_t kIgnoreLabel = -100;

enum class Role { kSystem, kUser, kAssistant };

struct Message {
  Role role = Role::kUser;
  std::string content;  // may hold `<image>` placeholders (user turns only)
};

struct TokenizedConversation {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;  // same length; kIgnoreLabel where not trained
};

struct ChatTemplateOptions {
  std::string default_system_prompt = "You are a helpful assistant.";
  std::string image_placeholder = "<image>";
};

// Special token ids the template needs, looked up by name in the tokenizer.
struct ChatSpecialIds {
  int64_t im_start = -1, im_end = -1, vision_start = -1, vision_end = -1, image_pad = -1;
};

class ChatTemplate {
 public:
  // Errors: the tokenizer lacks one of the special tokens.
  static absl::StatusOr<ChatTemplate> Create(const BpeTokenizer& tokenizer,
                                             ChatTemplateOptions options = {});

  // Number of `<image>` placeholders in a conversation.
  int CountImagePlaceholders(const std::vector<Message>& messages) const;

  // Tokenizes a conversation; image_token_counts[i] is the number of <|image_pad|> tokens of the
  // i-th placeholder in reading order. Errors (messages name the turn): placeholder count differs
  // from image_token_counts.size(), a system turn after the first, turns that do not alternate
  // user/assistant, no final assistant turn, a placeholder outside a user turn.
  absl::StatusOr<TokenizedConversation> Apply(const std::vector<Message>& messages,
                                              const std::vector<int64_t>& image_token_counts) const;

  // The rendered text (special tokens spelled out), for logs and comparisons.
  std::string Render(const std::vector<Message>& messages,
                     const std::vector<int64_t>& image_token_counts) const;

  const ChatSpecialIds& special_ids() const { return ids_; }

 private:
  ChatTemplate(const BpeTokenizer& tokenizer, ChatTemplateOptions options, ChatSpecialIds ids)
      : tokenizer_(&tokenizer), options_(std::move(options)), ids_(ids) {}

  const BpeTokenizer* tokenizer_;
  ChatTemplateOptions options_;
  ChatSpecialIds ids_;
};

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_CHAT_TEMPLATE_H_
