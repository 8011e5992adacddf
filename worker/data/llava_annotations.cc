#include "worker/data/llava_annotations.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/data/file_util.h"

namespace dhp {
namespace data {
namespace {

using Json = nlohmann::json;

constexpr char kImageTag[] = "<image>";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Byte offsets at which the elements of a (well-formed) top-level JSON array start.
std::vector<size_t> ArrayElementOffsets(absl::string_view text) {
  std::vector<size_t> out;
  int depth = 0;
  bool in_string = false, escape = false, expecting = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (depth == 1 && expecting && !IsSpace(c) && c != ',' && c != ']') {
      out.push_back(i);
      expecting = false;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (depth == 0) expecting = true;
        ++depth;
        break;
      case ']':
      case '}':
        --depth;
        break;
      case ',':
        if (depth == 1) expecting = true;
        break;
      default:
        break;
    }
  }
  return out;
}

int CountTags(const std::string& s) {
  int n = 0;
  for (size_t p = s.find(kImageTag); p != std::string::npos; p = s.find(kImageTag, p + 1)) ++n;
  return n;
}

absl::StatusOr<LlavaRecord> ParseRecord(const Json& j, std::string location) {
  auto err = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(location, ": ", parts...));
  };
  if (!j.is_object()) return err("record is not a JSON object");
  LlavaRecord r;
  if (j.contains("id")) r.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
  if (j.contains("image") && !j["image"].is_null()) {
    const Json& image = j["image"];
    if (image.is_string()) {
      r.images.push_back(image.get<std::string>());
    } else if (image.is_array()) {
      for (size_t i = 0; i < image.size(); ++i) {
        if (!image[i].is_string()) return err("\"image\"[", i, "] is not a string");
        r.images.push_back(image[i].get<std::string>());
      }
    } else {
      return err("\"image\" must be a string or a list of strings, not ", image.type_name());
    }
    for (const std::string& path : r.images) {
      if (path.empty()) return err("\"image\" holds an empty path");
    }
  }
  if (!j.contains("conversations")) return err("missing key \"conversations\"");
  const Json& conv = j["conversations"];
  if (!conv.is_array() || conv.empty()) return err("\"conversations\" must be a non-empty list");
  int tags = 0;
  for (size_t i = 0; i < conv.size(); ++i) {
    const Json& turn = conv[i];
    if (!turn.is_object()) return err("conversations[", i, "] is not an object");
    for (const char* key : {"from", "value"}) {
      if (!turn.contains(key)) return err("conversations[", i, "]: missing key \"", key, "\"");
      if (!turn[key].is_string()) return err("conversations[", i, "].", key, " is not a string");
    }
    const std::string from = turn["from"].get<std::string>();
    Message m;
    if (from == "human" || from == "user") {
      m.role = Role::kUser;
    } else if (from == "gpt" || from == "assistant") {
      m.role = Role::kAssistant;
    } else if (from == "system") {
      m.role = Role::kSystem;
    } else {
      return err("conversations[", i, "].from is \"", from,
                 "\"; expected human, gpt or system (or user, assistant)");
    }
    m.content = turn["value"].get<std::string>();
    tags += CountTags(m.content);
    r.messages.push_back(std::move(m));
  }
  if (tags != static_cast<int>(r.images.size())) {
    return err(tags > static_cast<int>(r.images.size()) ? "more" : "fewer", " <image> tags (",
               tags, ") than images (", r.images.size(), ")");
  }
  r.location = std::move(location);
  return r;
}

// Adds a parsed record, or handles its error per the skip policy.
absl::Status Keep(absl::StatusOr<LlavaRecord> r, std::vector<LlavaRecord>* out,
                  std::vector<absl::Status>* skipped) {
  if (r.ok()) {
    out->push_back(std::move(*r));
    return absl::OkStatus();
  }
  if (skipped == nullptr) return r.status();
  skipped->push_back(r.status());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<LlavaRecord>> ParseLlavaAnnotations(absl::string_view text,
                                                               const std::string& path,
                                                               std::vector<absl::Status>* skipped) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // BOM
  size_t first = 0;
  while (first < text.size() && IsSpace(text[first])) ++first;
  std::vector<LlavaRecord> out;

  if (first < text.size() && text[first] == '[') {
    Json array;
    try {
      array = Json::parse(text.begin(), text.end());
    } catch (const Json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON: ", e.what()));
    }
    const std::vector<size_t> offsets = ArrayElementOffsets(text);
    size_t line = 1, counted = 0;  // newlines counted up to offset `counted`
    for (size_t i = 0; i < array.size(); ++i) {
      std::string location = absl::StrCat(path, " (record ", i, ")");
      if (offsets.size() == array.size()) {
        for (; counted < offsets[i]; ++counted) line += text[counted] == '\n';
        location = absl::StrCat(path, ":", line, " (record ", i, ")");
      }
      absl::Status s = Keep(ParseRecord(array[i], std::move(location)), &out, skipped);
      if (!s.ok()) return s;
    }
    return out;
  }

  // JSONL.
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    bool blank = true;
    for (char c : line) blank = blank && IsSpace(c);
    if (blank) continue;
    const std::string location = absl::StrCat(path, ":", line_no);
    absl::StatusOr<LlavaRecord> record;
    try {
      record = ParseRecord(Json::parse(line.begin(), line.end()), location);
    } catch (const Json::exception& e) {
      record = absl::InvalidArgumentError(absl::StrCat(location, ": invalid JSON: ", e.what()));
    }
    absl::Status s = Keep(std::move(record), &out, skipped);
    if (!s.ok()) return s;
  }
  return out;
}

absl::StatusOr<std::vector<LlavaRecord>> LoadLlavaAnnotations(const std::string& path,
                                                              std::vector<absl::Status>* skipped) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return ParseLlavaAnnotations(*text, path, skipped);
}

}  // namespace data
}  // namespace dhp
