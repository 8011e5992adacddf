#include "api/rest_body.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/service.h"
#include "common/proto_utf8.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace dhp::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;

constexpr char kPrefix[] = "request body (JSON): ";
constexpr size_t kMaxMessageBytes = 4096;
constexpr size_t kMaxSnippetBytes = 80;
constexpr int kMaxDepth = 64;  // dhp.v1 messages nest at most ~8 deep
// Stands in for each ill-formed byte in a second parse that finds the field holding them.
constexpr std::string_view kMark = "\xEF\xBF\xBD";  // U+FFFD

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Cut(absl::string_view s, size_t max) {
  return CutUtf8(std::string_view(s.data(), s.size()), max);
}

std::string Finish(const std::string& message) {
  return EscapeInvalidUtf8(Cut(absl::StrCat(kPrefix, message), kMaxMessageBytes));
}

const FieldDescriptor* FindField(const Descriptor* type, absl::string_view name) {
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    if (f->name() == name || f->json_name() == name) return f;
  }
  return nullptr;
}

// The message type at `path` ("spec.data.registry[0].value") below `root`, or null.
const Descriptor* TypeAt(const Descriptor* root, absl::string_view path) {
  const Descriptor* type = root;
  if (path.empty()) return type;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    part = part.substr(0, part.find('['));
    const FieldDescriptor* f = type == nullptr ? nullptr : FindField(type, part);
    if (f == nullptr || f->message_type() == nullptr) return nullptr;
    type = f->message_type();  // for a map, its entry type (fields key and value)
  }
  return type;
}

std::string KnownKeys(const Descriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
  return absl::StrJoin(names, ", ");
}

// "invalid value X for type T" in protobuf's words, as what was expected.
std::string InvalidValue(absl::string_view text) {
  const absl::string_view kInvalid = "invalid value ";
  const absl::string_view kForType = " for type ";
  const size_t for_type = text.rfind(kForType);
  if (!absl::StartsWith(text, kInvalid) || for_type == absl::string_view::npos) {
    return std::string(text);
  }
  const absl::string_view value = text.substr(kInvalid.size(), for_type - kInvalid.size());
  absl::string_view type = text.substr(for_type + kForType.size());
  if (absl::ConsumePrefix(&type, "type.googleapis.com/")) {
    const EnumDescriptor* e =
        google::protobuf::DescriptorPool::generated_pool()->FindEnumTypeByName(std::string(type));
    if (e != nullptr) {
      std::vector<std::string> names;
      for (int i = 0; i < e->value_count(); ++i) names.push_back(e->value(i)->name());
      return absl::StrCat("expected one of ", absl::StrJoin(names, ", "),
                          " (JSON takes an enum's full name or number), got ", value);
    }
  }
  if (absl::ConsumePrefix(&type, "TYPE_")) {
    return absl::StrCat("expected a JSON value for a ", absl::AsciiStrToLower(type), ", got ",
                        value);
  }
  return std::string(text);
}

// protobuf's JSON parse error, restated: the field's path first, as the YAML reader does.
std::string Restate(absl::string_view error, const Descriptor* root) {
  absl::string_view first = error.substr(0, error.find('\n'));
  const absl::string_view kUnknown = ": Cannot find field.";
  if (absl::EndsWith(first, kUnknown)) {  // "(spec.vision) degre" or "degre"
    first.remove_suffix(kUnknown.size());
    absl::string_view path;
    absl::string_view key = first;
    if (absl::StartsWith(first, "(") && first.find(") ") != absl::string_view::npos) {
      path = first.substr(1, first.find(") ") - 1);
      key = first.substr(first.find(") ") + 2);
    }
    const Descriptor* type = TypeAt(root, path);
    return absl::StrCat(path, path.empty() ? "" : ".", Cut(key, kMaxSnippetBytes), ": unknown key",
                        type == nullptr ? "" : absl::StrCat("; known keys: ", KnownKeys(type)));
  }
  if (absl::StartsWith(first, "(") && first.find("): ") != absl::string_view::npos) {
    const size_t close = first.find("): ");
    return absl::StrCat(first.substr(1, close - 1), ": ",
                        InvalidValue(Cut(first.substr(close + 3), 2 * kMaxSnippetBytes)));
  }
  if (absl::StartsWith(first, ": ")) first.remove_prefix(2);  // ": Root element must be ..."
  // Syntax errors come with up to 20 bytes either side of the place, then a line with a caret
  // under it.
  const size_t first_break = error.find('\n');
  const size_t last_break = error.rfind('\n');
  if (first_break != absl::string_view::npos && last_break > first_break) {
    const absl::string_view around = error.substr(first_break + 1, last_break - first_break - 1);
    const size_t at = std::min(error.substr(last_break + 1).find('^'), around.size());
    if (!around.empty()) {
      return absl::StrCat("malformed JSON: ", first, " At: \"",
                          absl::Utf8SafeCEscape(around.substr(0, at)), "<here>",
                          absl::Utf8SafeCEscape(around.substr(at)), "\"");
    }
  }
  return absl::StrCat("malformed JSON: ", first);
}

// A strict reading of the body by RFC 8259 (no comments, single quotes, bare keys or trailing
// commas, all of which protobuf's own parser lets through), before anything is built from it:
// it stops at the first value nested deeper than kMaxDepth, at the value past
// kMaxRequestElements, and at a key given twice in one object (protobuf would keep the last).
class StrictReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  const std::string& error() const { return error_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(/*array=*/false); }
  bool start_array(std::size_t) override { return Open(/*array=*/true); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& key) override {
    Frame& object = frames_.back();
    if (!object.keys.insert(key).second) {
      const std::string where = Where();
      error_ = absl::StrCat(where, where.empty() ? "" : ".", Cut(key, kMaxSnippetBytes),
                            ": the key is given twice in one object; give each key once");
      return false;
    }
    object.key = key;
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& e) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ...",
    // "[json.exception.out_of_range.406] number overflow parsing '1e999'"
    absl::string_view what = e.what();
    const size_t at = what.find("parse error at ");
    if (at != absl::string_view::npos) {
      what.remove_prefix(at + sizeof("parse error") - 1);
      error_ = absl::StrCat("malformed JSON", what);
    } else {
      if (what.find("] ") != absl::string_view::npos) what.remove_prefix(what.find("] ") + 2);
      error_ = absl::StrCat("malformed JSON: ", what);
    }
    return false;
  }

 private:
  struct Frame {
    bool array = false;
    int64_t index = -1;   // of the array's current element
    std::string key;      // the object's current key
    std::unordered_set<std::string> keys;
  };
  bool Value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    if (++values_ <= kMaxRequestElements) return true;
    error_ = absl::StrCat("more than ", kMaxRequestElements, " values (objects, arrays, strings, ",
                          "numbers...); a request body holds at most ", kMaxRequestElements);
    return false;
  }
  bool Open(bool array) {
    if (!Value()) return false;
    if (frames_.size() >= static_cast<size_t>(kMaxDepth)) {
      error_ = absl::StrCat("arrays and objects nest more than ", kMaxDepth, " deep; at most ",
                            kMaxDepth, " are read");
      return false;
    }
    frames_.emplace_back();
    frames_.back().array = array;
    return true;
  }
  bool Close() {
    frames_.pop_back();
    return true;
  }
  // The path of the innermost open array or object: "spec.labels", "ranks[3]".
  std::string Where() const {
    std::string path;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.array) {
        absl::StrAppend(&path, "[", f.index, "]");
      } else {
        absl::StrAppend(&path, path.empty() ? "" : ".", Cut(f.key, kMaxSnippetBytes));
      }
    }
    return path;
  }

  std::vector<Frame> frames_;
  int64_t values_ = 0;
  std::string error_;
};

const char* JsonKind(const nlohmann::json& v) {
  return v.is_array()     ? "an array"
         : v.is_object()  ? "an object"
         : v.is_string()  ? "a string"
         : v.is_boolean() ? "a boolean"
                          : "a number";
}

bool IsPlainMessage(const FieldDescriptor* f) {
  return f->message_type() != nullptr &&
         f->message_type()->file()->package() != "google.protobuf";  // not a well-known type
}

// protobuf's parser is lenient where the proto JSON mapping is not: it reads an object or a
// scalar given for a repeated field as one element, and a list inside a list as its elements.
// This checks that repeated fields hold arrays, maps and messages objects, and that no element
// is itself an array, and that no map value is null, naming the field ("ranks[0]: expected an
// object, got an array"). Keys it does not know are left to protobuf, which names them.
std::string ShapeError(const nlohmann::json& object, const Descriptor* type,
                       const std::string& path) {
  std::map<int, std::string> given;  // field number -> the key that named it
  for (const auto& [key, value] : object.items()) {
    const FieldDescriptor* f = FindField(type, key);
    if (f == nullptr) continue;
    if (auto [first, fresh] = given.emplace(f->number(), key); !fresh) {
      // {"dry_run": true, "dryRun": false}: protobuf keeps whichever it reads last.
      return absl::StrCat(path, Cut(key, kMaxSnippetBytes), ": names the same field as ",
                          Cut(first->second, kMaxSnippetBytes),
                          "; give a field once, by its proto name or its JSON name");
    }
    if (value.is_null()) continue;
    const std::string where = path + key;
    auto element = [&](const nlohmann::json& v, const std::string& at) -> std::string {
      if (v.is_array()) return absl::StrCat(at, ": expected a single value, got an array");
      if (!IsPlainMessage(f) || v.is_null()) return "";
      if (!v.is_object()) return absl::StrCat(at, ": expected an object, got ", JsonKind(v));
      return ShapeError(v, f->message_type(), at + ".");
    };
    if (f->is_map()) {
      if (!value.is_object())
        return absl::StrCat(where, ": expected an object, got ", JsonKind(value));
      const FieldDescriptor* map_value = f->message_type()->map_value();
      const bool null_is_a_value = map_value->message_type() != nullptr &&
                                   map_value->message_type()->full_name() ==
                                       "google.protobuf.Value";
      for (const auto& [k, v] : value.items()) {
        if (v.is_array())
          return absl::StrCat(where, ".", k, ": expected a single value, got an array");
        // protobuf reads a null map value as the default (0, ""); the mapping has none.
        if (v.is_null() && !null_is_a_value)
          return absl::StrCat(where, ".", k, ": a map value must not be null");
        if (IsPlainMessage(map_value) && v.is_object()) {
          std::string e = ShapeError(v, map_value->message_type(), where + "." + k + ".");
          if (!e.empty()) return e;
        }
      }
    } else if (f->is_repeated()) {
      if (!value.is_array()) {
        return absl::StrCat(where, ": expected an array, got ", JsonKind(value));
      }
      for (size_t i = 0; i < value.size(); ++i) {
        std::string e = element(value[i], absl::StrCat(where, "[", i, "]"));
        if (!e.empty()) return e;
      }
    } else if (std::string e = element(value, where); !e.empty()) {
      return e;
    }
  }
  return "";
}

absl::Status Parse(std::string_view body, google::protobuf::Message* msg) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), msg, options);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(std::string(status.message()));
}

}  // namespace

absl::StatusOr<BodyFormat> BodyFormatOf(std::string_view content_type_in, bool yaml_allowed) {
  const std::string content_type(content_type_in);  // a copy: an absent header has no data
  std::vector<absl::string_view> parts = absl::StrSplit(content_type, ';');
  const std::string type = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[0]));
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string param = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[i]));
    if (absl::StartsWith(param, "charset=")) {
      std::string charset = param.substr(8);
      absl::StripAsciiWhitespace(&charset);
      if (charset.size() >= 2 && charset.front() == '"' && charset.back() == '"') {
        charset = charset.substr(1, charset.size() - 2);
      }
      if (charset != "utf-8" && charset != "utf8") {
        return absl::InvalidArgumentError(
            absl::StrCat("Content-Type ", Cut(EscapeInvalidUtf8(content_type_in), 200),
                         ": request bodies are UTF-8; send charset=utf-8 or no charset"));
      }
    }
  }
  if (type.empty() || type == "*/*" || type == "application/json" ||
      (absl::StartsWith(type, "application/") && absl::EndsWith(type, "+json"))) {
    return BodyFormat::kJson;
  }
  const bool yaml = type == "application/yaml" || type == "text/yaml" ||
                    type == "application/x-yaml" || type == "text/x-yaml";
  if (yaml && yaml_allowed) return BodyFormat::kYaml;
  return absl::InvalidArgumentError(absl::StrCat(
      "Content-Type ", Cut(EscapeInvalidUtf8(type), 200), " is not accepted here; send JSON ",
      "(Content-Type: application/json)",
      yaml_allowed ? " or a YAML job spec (Content-Type: application/yaml)"
                   : (yaml ? "; YAML is taken only for job specs (POST /v1/jobs)" : "")));
}

absl::Status ParseJsonBody(std::string_view body, google::protobuf::Message* msg) {
  msg->Clear();
  if (absl::StripAsciiWhitespace(A(body)).empty()) return absl::OkStatus();
  if (const std::string bad = Utf8Error(body); !bad.empty()) {
    std::string where;
    if (body.find(kMark) == std::string_view::npos) {
      std::unique_ptr<google::protobuf::Message> marked(msg->New());
      if (Parse(ReplaceInvalidUtf8(body, kMark), marked.get()).ok()) {
        where = FieldContaining(*marked, kMark);
      }
    }
    return absl::InvalidArgumentError(Finish(where.empty() ? bad : where + ": " + bad));
  }
  // protobuf reads arrays nested any depth as one flat list, so depth is bounded here too.
  StrictReader strict;
  if (!nlohmann::json::sax_parse(body.begin(), body.end(), &strict)) {
    return absl::InvalidArgumentError(Finish(strict.error()));
  }
  const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object()) {
    if (std::string e = ShapeError(doc, msg->GetDescriptor(), ""); !e.empty()) {
      return absl::InvalidArgumentError(Finish(e));
    }
  }
  absl::Status s = Parse(body, msg);
  if (!s.ok()) {
    msg->Clear();
    return absl::InvalidArgumentError(Finish(Restate(s.message(), msg->GetDescriptor())));
  }
  // protobuf refuses ill-formed UTF-8 and lone surrogate escapes itself; stay sure.
  if (const std::string bad = InvalidUtf8Field(*msg); !bad.empty()) {
    msg->Clear();
    return absl::InvalidArgumentError(Finish(bad));
  }
  return absl::OkStatus();
}

}  // namespace dhp::api
