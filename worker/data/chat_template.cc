#include "worker/data/chat_template.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dhp {
namespace data {
namespace {

// A piece of the rendered conversation: a special token repeated `repeat` times, or text.
struct Segment {
  int64_t special = -1;  // -1 for text
  int64_t repeat = 1;
  std::string text;
  bool labelled = false;
};

const char* RoleName(Role r) {
  switch (r) {
    case Role::kSystem:
      return "system";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
  }
  return "?";
}

int CountOccurrences(const std::string& s, const std::string& needle) {
  if (needle.empty()) return 0;
  int n = 0;
  for (size_t pos = s.find(needle); pos != std::string::npos; pos = s.find(needle, pos + needle.size())) ++n;
  return n;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Create(const BpeTokenizer& tokenizer,
                                                  ChatTemplateOptions options) {
  ChatSpecialIds ids;
  const std::pair<const char*, int64_t*> wanted[] = {
      {"<|im_start|>", &ids.im_start},         {"<|im_end|>", &ids.im_end},
      {"<|vision_start|>", &ids.vision_start}, {"<|vision_end|>", &ids.vision_end},
      {"<|image_pad|>", &ids.image_pad},
  };
  for (const auto& [name, id] : wanted) {
    *id = tokenizer.TokenToId(name);
    if (*id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template: the tokenizer has no special token ", name));
    }
  }
  return ChatTemplate(tokenizer, std::move(options), ids);
}

int ChatTemplate::CountImagePlaceholders(const std::vector<Message>& messages) const {
  int n = 0;
  for (const Message& m : messages) n += CountOccurrences(m.content, options_.image_placeholder);
  return n;
}

namespace {

absl::Status BuildSegments(const std::vector<Message>& messages,
                           const std::vector<int64_t>& image_token_counts,
                           const ChatTemplateOptions& options, const ChatSpecialIds& ids,
                           std::vector<Segment>* out) {
  if (messages.empty()) return absl::InvalidArgumentError("conversation has no turns");
  const std::string& tag = options.image_placeholder;
  size_t tags_total = 0;
  for (const Message& m : messages) tags_total += CountOccurrences(m.content, tag);
  if (tags_total != image_token_counts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tags_total > image_token_counts.size() ? "more " : "fewer ", tag,
                     " tags (", tags_total, ") than images (", image_token_counts.size(), ")"));
  }
  size_t first = 0;
  std::string system = options.default_system_prompt;
  if (messages[0].role == Role::kSystem) {
    system = messages[0].content;
    first = 1;
    if (CountOccurrences(system, tag) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("turn 0 (system) holds an ", tag, " placeholder; images belong in user turns"));
    }
  }
  auto add_special = [&](int64_t id, bool labelled, int64_t repeat = 1) {
    out->push_back({id, repeat, "", labelled});
  };
  auto add_text = [&](std::string text, bool labelled) {
    if (!text.empty()) out->push_back({-1, 1, std::move(text), labelled});
  };
  add_special(ids.im_start, false);
  add_text("system\n" + system, false);
  add_special(ids.im_end, false);
  add_text("\n", false);

  size_t image = 0;
  for (size_t i = first; i < messages.size(); ++i) {
    const Message& m = messages[i];
    const Role expected = (i - first) % 2 == 0 ? Role::kUser : Role::kAssistant;
    if (m.role != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("turn ", i, " has role ", RoleName(m.role), " where ", RoleName(expected),
                       " was expected (after an optional first system turn, turns alternate "
                       "user, assistant)"));
    }
    const int tags = CountOccurrences(m.content, tag);
    if (tags > 0 && m.role != Role::kUser) {
      return absl::InvalidArgumentError(
          absl::StrCat("turn ", i, " (", RoleName(m.role), ") holds an ", tag,
                       " placeholder; images belong in user turns"));
    }
    const bool assistant = m.role == Role::kAssistant;
    add_special(ids.im_start, false);
    add_text(absl::StrCat(RoleName(m.role), "\n"), false);
    if (assistant) {
      add_text(m.content, true);
    } else {
      size_t pos = 0;
      for (size_t hit = m.content.find(tag); hit != std::string::npos;
           hit = m.content.find(tag, pos)) {
        add_text(m.content.substr(pos, hit - pos), false);
        if (image_token_counts[image] <= 0) {
          return absl::InvalidArgumentError(absl::StrCat("image ", image, " has ",
                                                         image_token_counts[image], " tokens"));
        }
        add_special(ids.vision_start, false);
        add_special(ids.image_pad, false, image_token_counts[image]);
        add_special(ids.vision_end, false);
        ++image;
        pos = hit + tag.size();
      }
      add_text(m.content.substr(pos), false);
    }
    add_special(ids.im_end, assistant);
    add_text("\n", assistant);
  }
  if (messages.back().role != Role::kAssistant) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the last turn (", messages.size() - 1, ") is not an assistant turn: nothing to train on"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizedConversation> ChatTemplate::Apply(
    const std::vector<Message>& messages, const std::vector<int64_t>& image_token_counts) const {
  std::vector<Segment> segments;
  absl::Status s = BuildSegments(messages, image_token_counts, options_, ids_, &segments);
  if (!s.ok()) return s;
  TokenizedConversation out;
  auto append = [&](const std::vector<int64_t>& ids, bool labelled) {
    out.input_ids.insert(out.input_ids.end(), ids.begin(), ids.end());
    if (labelled) {
      out.labels.insert(out.labels.end(), ids.begin(), ids.end());
    } else {
      out.labels.insert(out.labels.end(), ids.size(), kIgnoreLabel);
    }
  };
  for (size_t i = 0; i < segments.size();) {
    const Segment& seg = segments[i];
    if (seg.special >= 0) {
      append(std::vector<int64_t>(seg.repeat, seg.special), seg.labelled);
      ++i;
      continue;
    }
    // A run of text segments between two special tokens: "role\n" and, for the assistant, the
    // labelled answer.
    size_t end = i;
    std::string unlabelled, labelled;
    for (; end < segments.size() && segments[end].special < 0; ++end) {
      (segments[end].labelled ? labelled : unlabelled) += segments[end].text;
    }
    absl::StatusOr<std::vector<int64_t>> whole =
        tokenizer_->Encode(unlabelled + labelled, /*allow_added_tokens=*/false);
    if (!whole.ok()) return whole.status();
    if (labelled.empty() || unlabelled.empty()) {
      append(*whole, !labelled.empty());
    } else {
      absl::StatusOr<std::vector<int64_t>> prefix = tokenizer_->Encode(unlabelled, false);
      if (!prefix.ok()) return prefix.status();
      if (whole->size() >= prefix->size() &&
          std::equal(prefix->begin(), prefix->end(), whole->begin())) {
        append(*prefix, false);
        append(std::vector<int64_t>(whole->begin() + prefix->size(), whole->end()), true);
      } else {
        absl::StatusOr<std::vector<int64_t>> answer = tokenizer_->Encode(labelled, false);
        if (!answer.ok()) return answer.status();
        append(*prefix, false);
        append(*answer, true);
      }
    }
    i = end;
  }
  return out;
}

std::string ChatTemplate::Render(const std::vector<Message>& messages,
                                 const std::vector<int64_t>& image_token_counts) const {
  std::vector<Segment> segments;
  absl::Status s = BuildSegments(messages, image_token_counts, options_, ids_, &segments);
  std::string out;
  for (const Segment& seg : segments) {
    if (seg.special < 0) {
      out += seg.text;
    } else {
      for (int64_t r = 0; r < seg.repeat; ++r) out += tokenizer_->IdToToken(seg.special);
    }
  }
  if (!s.ok()) absl::StrAppend(&out, "\n[invalid conversation: ", s.message(), "]");
  return out;
}

}  // namespace data
}  // namespace dhp
