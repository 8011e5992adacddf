#include "common/yaml_syntax.h"
#include "common/proto_yaml.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/proto_enum.h"
#include "common/proto_utf8.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "yaml-cpp/yaml.h"

namespace dhp {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::util::TimeUtil;

constexpr char kTimestamp[] = "google.protobuf.Timestamp";
constexpr char kDuration[] = "google.protobuf.Duration";

// Bounds on what one document may cost, so that cost grows with the size of the text: an alias
// (*name) repeats its anchor's whole subtree, so a small document can stand for a huge one.
// Every node the reader visits costs 1, plus the bytes of its scalar; the total may not pass
// kWorkPerByte per byte of text (or kMinWork for small texts). A document without aliases costs
// well under 2 per byte.
constexpr int64_t kWorkPerByte = 10;
constexpr int64_t kMinWork = 10000;
// The error text of one document is at most this long; the reader stops once it is reached.
constexpr size_t kMaxErrorBytes = 4096;
// Scalars and keys are cut to this many bytes where an error message quotes them.
constexpr size_t kMaxQuotedBytes = 80;
constexpr char kMoreErrors[] = "; ... (more errors not shown)";

std::string Cut(const std::string& s) { return CutUtf8(s, kMaxQuotedBytes); }

// Escaped for an error message; bytes that are not UTF-8 (from escapes such as "\udcff") are
// written as \xNN so that the message itself stays valid UTF-8.
std::string Quote(const std::string& s) {
  return "\"" + EscapeInvalidUtf8(absl::Utf8SafeCEscape(Cut(s))) + "\"";
}

// How a node reads in an error message: the scalar quoted, or its kind.
std::string Describe(const YamlNode& node) {
  switch (node.kind()) {
    case YamlNode::Kind::kMap: return "a mapping";
    case YamlNode::Kind::kSequence: return "a sequence";
    case YamlNode::Kind::kScalar: return Quote(node.Scalar());
    case YamlNode::Kind::kNull: break;
  }
  return "null";
}

std::string Lower(std::string s) { return absl::AsciiStrToLower(s); }


// Optional sign followed by decimal digits only.
bool IsDecimalInteger(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

// Decimal or exponent notation, plus the YAML (.inf, .nan) and JSON (Infinity, NaN) specials.
bool ParseDouble(const std::string& s, double* out) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  static const std::map<std::string, double>* const kSpecials = new std::map<std::string, double>{
      {".inf", kInf},   {"+.inf", kInf},   {"inf", kInf},   {"infinity", kInf},
      {"-.inf", -kInf}, {"-inf", -kInf},   {"-infinity", -kInf},
      {".nan", std::numeric_limits<double>::quiet_NaN()},
      {"nan", std::numeric_limits<double>::quiet_NaN()}};
  auto special = kSpecials->find(Lower(s));
  if (special != kSpecials->end()) {
    *out = special->second;
    return true;
  }
  if (s.empty()) return false;
  for (char c : s) {  // no hex floats, no whitespace, no "nan(...)"
    if (!(absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' ||
          c == 'E' || c == '+' || c == '-')) {
      return false;
    }
  }
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// Shortest text that reads back as the same value; YAML's spellings for the specials.
template <typename T>
std::string FormatFloating(T v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  for (int precision = 1; precision <= std::numeric_limits<T>::max_digits10; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(v));
    if (static_cast<T>(std::strtod(buf, nullptr)) == v) break;
  }
  return buf;
}

bool IsWellKnownTime(const Descriptor* d) {
  return d->full_name() == kTimestamp || d->full_name() == kDuration;
}

// Walks one YAML tree into a message, collecting every error with its path, until the error
// text reaches kMaxErrorBytes or the work reaches `max_work` (see kWorkPerByte).
class YamlReader {
 public:
  YamlReader(std::vector<std::string>* errors, int64_t max_work)
      : errors_(errors), max_work_(max_work) {}

  // Why the reader stopped early: the work bound, the error bound, or neither.
  bool out_of_work() const { return out_of_work_; }
  bool too_many_errors() const { return too_many_errors_; }
  int64_t max_work() const { return max_work_; }

  void ReadMessage(const YamlNode& node, Message* msg, const std::string& path) {
    if (!Charge(0) || node.IsNull()) return;
    if (!node.IsMap()) {
      Error(path, absl::StrCat("expected a mapping, got ", Describe(node)));
      return;
    }
    const Descriptor* desc = msg->GetDescriptor();
    std::map<const FieldDescriptor*, std::string> seen;  // field -> the key that set it
    for (auto it = node.pairs().begin(); it != node.pairs().end() && !stopped(); ++it) {
      if (!it->first->IsScalar()) {
        Error(path, absl::StrCat("keys must be strings, got ", Describe(*it->first)));
        continue;
      }
      const std::string& key = it->first->Scalar();
      if (!Charge(key.size())) return;
      const std::string field_path = Join(path, key);
      const FieldDescriptor* field = FindField(desc, key);
      if (field == nullptr) {
        Error(field_path, absl::StrCat("unknown key; known keys: ", KnownKeys(desc)));
        continue;
      }
      auto [prev, inserted] = seen.emplace(field, key);
      if (!inserted) {
        Error(field_path, prev->second == key
                              ? std::string("duplicate key")
                              : absl::StrCat("duplicate key (same field as ", prev->second, ")"));
        continue;
      }
      if (const auto* oneof = field->real_containing_oneof()) {
        for (int i = 0; i < oneof->field_count(); ++i) {
          const FieldDescriptor* other = oneof->field(i);
          if (other != field && seen.count(other) != 0 && !it->second->IsNull()) {
            Error(field_path, absl::StrCat("conflicts with ", seen[other],
                                           "; set only one of them"));
          }
        }
      }
      ReadField(*it->second, msg, field, field_path);
    }
  }

 private:
  static std::string Join(const std::string& path, const std::string& key) {
    const std::string shown = EscapeInvalidUtf8(Cut(key));
    return path.empty() ? shown : absl::StrCat(path, ".", shown);
  }

  bool stopped() const { return out_of_work_ || too_many_errors_; }

  // Counts the visit of one node with `scalar_bytes` of text; false once over the bound.
  bool Charge(size_t scalar_bytes) {
    if (stopped()) return false;
    work_ += 1 + static_cast<int64_t>(scalar_bytes);
    if (work_ > max_work_) out_of_work_ = true;
    return !out_of_work_;
  }

  static const FieldDescriptor* FindField(const Descriptor* desc, const std::string& key) {
    for (int i = 0; i < desc->field_count(); ++i) {
      const FieldDescriptor* f = desc->field(i);
      if (f->name() == key || f->json_name() == key) return f;
    }
    return nullptr;
  }

  static std::string KnownKeys(const Descriptor* desc) {
    std::vector<std::string> names;
    for (int i = 0; i < desc->field_count(); ++i) names.push_back(desc->field(i)->name());
    return absl::StrJoin(names, ", ");
  }

  void Error(const std::string& path, const std::string& message) {
    if (stopped()) return;
    std::string error = path.empty() ? message : absl::StrCat(path, ": ", message);
    const size_t separator = errors_->empty() ? 0 : 2;  // "; "
    if (error_bytes_ + separator + error.size() + sizeof(kMoreErrors) > kMaxErrorBytes) {
      too_many_errors_ = true;
      return;
    }
    error_bytes_ += separator + error.size();
    errors_->push_back(std::move(error));
  }

  void ReadField(const YamlNode& value, Message* msg, const FieldDescriptor* field,
                 const std::string& path) {
    if (value.IsNull()) return;  // null means "not set"
    if (field->is_map()) {
      ReadMap(value, msg, field, path);
    } else if (field->is_repeated()) {
      if (!value.IsSequence()) {
        Error(path, absl::StrCat("expected a sequence, got ", Describe(value)));
        return;
      }
      for (size_t i = 0; i < value.items().size() && !stopped(); ++i) {
        ReadValue(*value.items()[i], msg, field, absl::StrCat(path, "[", i, "]"));
      }
    } else {
      ReadValue(value, msg, field, path);
    }
  }

  void ReadMap(const YamlNode& value, Message* msg, const FieldDescriptor* field,
               const std::string& path) {
    if (!value.IsMap()) {
      Error(path, absl::StrCat("expected a mapping, got ", Describe(value)));
      return;
    }
    const FieldDescriptor* key_field = field->message_type()->map_key();
    const FieldDescriptor* value_field = field->message_type()->map_value();
    std::set<std::string> seen;
    for (auto it = value.pairs().begin(); it != value.pairs().end() && !stopped(); ++it) {
      const YamlNode& key = *it->first;
      if (!key.IsScalar()) {
        Error(path, absl::StrCat("map keys must be scalars, got ", Describe(key)));
        continue;
      }
      if (!Charge(key.Scalar().size())) return;
      const std::string entry_path = Join(path, key.Scalar());
      if (!seen.insert(key.Scalar()).second) {
        Error(entry_path, "duplicate key");
        continue;
      }
      Message* entry = msg->GetReflection()->AddMessage(msg, field);
      ReadValue(key, entry, key_field, entry_path);
      if (!it->second->IsNull()) ReadValue(*it->second, entry, value_field, entry_path);
    }
  }

  // One value (singular field, list element, map key or map value) into `field` of `msg`.
  void ReadValue(const YamlNode& node, Message* msg, const FieldDescriptor* field,
                 const std::string& path) {
    const Reflection* r = msg->GetReflection();
    const bool rep = field->is_repeated();
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* sub = rep ? r->AddMessage(msg, field) : r->MutableMessage(msg, field);
      if (IsWellKnownTime(field->message_type())) {
        ReadTime(node, sub, path);
      } else {
        ReadMessage(node, sub, path);
      }
      return;
    }
    if (!Charge(node.IsScalar() ? node.Scalar().size() : 0)) return;
    if (!node.IsScalar()) {
      Error(path, absl::StrCat("expected ", Expected(field), ", got ", Describe(node)));
      return;
    }
    const std::string& s = node.Scalar();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: {
        int32_t v;
        if (ReadInteger(s, "int32", path, &v)) {
          rep ? r->AddInt32(msg, field, v) : r->SetInt32(msg, field, v);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        int64_t v;
        if (ReadInteger(s, "int64", path, &v)) {
          rep ? r->AddInt64(msg, field, v) : r->SetInt64(msg, field, v);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        uint32_t v;
        if (ReadInteger(s, "uint32", path, &v)) {
          rep ? r->AddUInt32(msg, field, v) : r->SetUInt32(msg, field, v);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v;
        if (ReadInteger(s, "uint64", path, &v)) {
          rep ? r->AddUInt64(msg, field, v) : r->SetUInt64(msg, field, v);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        double v;
        if (!ParseDouble(s, &v)) {
          Error(path, absl::StrCat("expected a number, got ", Quote(s)));
          return;
        }
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
          rep ? r->AddDouble(msg, field, v) : r->SetDouble(msg, field, v);
          return;
        }
        if (std::isfinite(v) && std::fabs(v) > FLT_MAX) {
          Error(path, absl::StrCat(s, " is out of range for float"));
          return;
        }
        rep ? r->AddFloat(msg, field, static_cast<float>(v))
            : r->SetFloat(msg, field, static_cast<float>(v));
        return;
      }
      case FieldDescriptor::CPPTYPE_BOOL: {
        const std::string l = Lower(s);
        if (l != "true" && l != "false") {
          Error(path, absl::StrCat("expected true or false, got ", Quote(s)));
          return;
        }
        rep ? r->AddBool(msg, field, l == "true") : r->SetBool(msg, field, l == "true");
        return;
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const EnumDescriptor* type = field->enum_type();
        std::optional<int> number;
        int64_t n;
        if (IsDecimalInteger(s)) {
          if (absl::SimpleAtoi(s, &n) && type->FindValueByNumber(n) != nullptr) number = n;
        } else {
          number = ParseEnumName(type, s);
        }
        if (!number) {
          Error(path, absl::StrCat("expected ", Expected(field), ", got ", Quote(s)));
          return;
        }
        rep ? r->AddEnumValue(msg, field, *number) : r->SetEnumValue(msg, field, *number);
        return;
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        std::string v = s;
        if (field->type() == FieldDescriptor::TYPE_BYTES && !absl::Base64Unescape(s, &v) &&
            !absl::WebSafeBase64Unescape(s, &v)) {
          Error(path, absl::StrCat("expected base64 bytes, got ", Quote(s)));
          return;
        }
        // An escape such as "\udcff" can make ill-formed UTF-8 out of ASCII text; a protobuf
        // string holding it would not serialise (and a stored one would not parse again).
        if (field->type() == FieldDescriptor::TYPE_STRING &&
            InvalidUtf8At(v) != std::string_view::npos) {
          Error(path, absl::StrCat("not valid UTF-8: ", Quote(s)));
          return;
        }
        rep ? r->AddString(msg, field, std::move(v)) : r->SetString(msg, field, std::move(v));
        return;
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return;  // handled above
    }
  }

  // Decimal digits with an optional sign, within the range of T.
  template <typename T>
  bool ReadInteger(const std::string& s, const char* type, const std::string& path, T* out) {
    if (!IsDecimalInteger(s)) {
      Error(path, absl::StrCat("expected an integer, got ", Quote(s)));
      return false;
    }
    if ((std::is_unsigned_v<T> && s[0] == '-') || !absl::SimpleAtoi(s, out)) {
      Error(path, absl::StrCat(s, " is out of range for ", type, " (",
                               std::numeric_limits<T>::min(), " to ",
                               std::numeric_limits<T>::max(), ")"));
      return false;
    }
    return true;
  }

  void ReadTime(const YamlNode& node, Message* sub, const std::string& path) {
    if (!Charge(node.IsScalar() ? node.Scalar().size() : 0)) return;
    const bool is_timestamp = sub->GetDescriptor()->full_name() == kTimestamp;
    bool ok = node.IsScalar();
    if (ok && is_timestamp) {
      ok = TimeUtil::FromString(node.Scalar(), static_cast<google::protobuf::Timestamp*>(sub));
    } else if (ok) {
      ok = TimeUtil::FromString(node.Scalar(), static_cast<google::protobuf::Duration*>(sub));
    }
    if (!ok) {
      Error(path, absl::StrCat("expected ",
                               is_timestamp ? "an RFC 3339 timestamp like "
                                              "\"2024-05-01T12:00:00Z\""
                                            : "a duration like \"1.5s\"",
                               ", got ", Describe(node)));
    }
  }

  static std::string Expected(const FieldDescriptor* field) {
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64: return "an integer";
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: return "a number";
      case FieldDescriptor::CPPTYPE_BOOL: return "true or false";
      case FieldDescriptor::CPPTYPE_ENUM:
        return absl::StrCat("one of ", EnumChoices(field->enum_type()));
      case FieldDescriptor::CPPTYPE_STRING:
        return field->type() == FieldDescriptor::TYPE_BYTES ? "base64 bytes" : "a string";
      case FieldDescriptor::CPPTYPE_MESSAGE: return "a mapping";
    }
    return "a value";
  }

  std::vector<std::string>* errors_;
  const int64_t max_work_;
  int64_t work_ = 0;
  size_t error_bytes_ = 0;  // of *errors_ joined by "; "
  bool out_of_work_ = false;
  bool too_many_errors_ = false;
};

// ---- Writing -------------------------------------------------------------------------------

// Strings that a YAML reader would take for something else (null, bool, number) get quotes,
// and so do strings with a control character (yaml-cpp wrote "k\f" and "a\rb" plain, which
// then did not read back; quoted, they are escaped).
bool LooksLikeNonString(const std::string& s) {
  if (s.empty() || absl::ascii_isspace(static_cast<unsigned char>(s.front())) ||
      absl::ascii_isspace(static_cast<unsigned char>(s.back()))) {
    return true;
  }
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  static const char* const kWords[] = {"~", "null", "true", "false", "yes", "no",
                                       "on", "off", "y", "n"};
  const std::string l = Lower(s);
  for (const char* w : kWords) {
    if (l == w) return true;
  }
  double d;
  return ParseDouble(s, &d);
}

void EmitString(YAML::Emitter& out, const std::string& s) {
  if (LooksLikeNonString(s)) out << YAML::DoubleQuoted;
  out << s;
}

void EmitMessage(YAML::Emitter& out, const Message& msg);

// The scalar text of one value (not for messages).
std::string ScalarText(const Message& msg, const FieldDescriptor* f, int index) {
  const Reflection* r = msg.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(rep ? r->GetRepeatedInt32(msg, f, index) : r->GetInt32(msg, f));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(rep ? r->GetRepeatedInt64(msg, f, index) : r->GetInt64(msg, f));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(rep ? r->GetRepeatedUInt32(msg, f, index) : r->GetUInt32(msg, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(rep ? r->GetRepeatedUInt64(msg, f, index) : r->GetUInt64(msg, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return FormatFloating(rep ? r->GetRepeatedDouble(msg, f, index) : r->GetDouble(msg, f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return FormatFloating(rep ? r->GetRepeatedFloat(msg, f, index) : r->GetFloat(msg, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(msg, f, index) : r->GetBool(msg, f)) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int n = rep ? r->GetRepeatedEnumValue(msg, f, index) : r->GetEnumValue(msg, f);
      if (f->enum_type()->FindValueByNumber(n) == nullptr) return absl::StrCat(n);
      return Lower(EnumShortName(f->enum_type(), n));
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r->GetRepeatedString(msg, f, index) : r->GetString(msg, f);
      return f->type() == FieldDescriptor::TYPE_BYTES ? absl::Base64Escape(s) : s;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
  return "";
}

void EmitValue(YAML::Emitter& out, const Message& msg, const FieldDescriptor* f, int index) {
  const Reflection* r = msg.GetReflection();
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    const Message& sub = index >= 0 ? r->GetRepeatedMessage(msg, f, index) : r->GetMessage(msg, f);
    if (sub.GetDescriptor()->full_name() == kTimestamp) {
      out << TimeUtil::ToString(static_cast<const google::protobuf::Timestamp&>(sub));
    } else if (sub.GetDescriptor()->full_name() == kDuration) {
      out << TimeUtil::ToString(static_cast<const google::protobuf::Duration&>(sub));
    } else {
      EmitMessage(out, sub);
    }
  } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    EmitString(out, ScalarText(msg, f, index));
  } else {
    out << ScalarText(msg, f, index);
  }
}

// Map entries sorted by key, so that output is deterministic.
void EmitMap(YAML::Emitter& out, const Message& msg, const FieldDescriptor* f) {
  const Reflection* r = msg.GetReflection();
  const FieldDescriptor* key = f->message_type()->map_key();
  const FieldDescriptor* value = f->message_type()->map_value();
  std::vector<const Message*> entries;
  for (int i = 0; i < r->FieldSize(msg, f); ++i) {
    entries.push_back(&r->GetRepeatedMessage(msg, f, i));
  }
  const bool numeric = key->cpp_type() != FieldDescriptor::CPPTYPE_STRING &&
                       key->cpp_type() != FieldDescriptor::CPPTYPE_BOOL;
  auto sort_key = [&](const Message* e) {
    std::string s = ScalarText(*e, key, -1);
    if (!numeric) return std::make_pair(0.0L, s);
    return std::make_pair(std::strtold(s.c_str(), nullptr), s);
  };
  std::stable_sort(entries.begin(), entries.end(), [&](const Message* a, const Message* b) {
    return sort_key(a) < sort_key(b);
  });
  out << YAML::BeginMap;
  for (const Message* e : entries) {
    out << YAML::Key;
    EmitString(out, ScalarText(*e, key, -1));
    out << YAML::Value;
    EmitValue(out, *e, value, -1);
  }
  out << YAML::EndMap;
}

void EmitMessage(YAML::Emitter& out, const Message& msg) {
  // The set fields, and the scalars without presence that are zero (rank: 0), as JSON prints
  // them; unset optional and message fields, and empty lists and maps, stay out.
  std::vector<const FieldDescriptor*> fields;
  const google::protobuf::Descriptor* type = msg.GetDescriptor();
  const Reflection* reflection = msg.GetReflection();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* f = type->field(i);
    const bool zero_scalar = !f->is_repeated() && !f->has_presence();
    if (zero_scalar || (f->is_repeated() ? reflection->FieldSize(msg, f) > 0
                                         : reflection->HasField(msg, f))) {
      fields.push_back(f);
    }
  }
  if (fields.empty()) {
    out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
    return;
  }
  out << YAML::BeginMap;
  for (const FieldDescriptor* f : fields) {
    out << YAML::Key << f->name() << YAML::Value;
    if (f->is_map()) {
      EmitMap(out, msg, f);
    } else if (f->is_repeated()) {
      out << YAML::BeginSeq;
      for (int i = 0; i < msg.GetReflection()->FieldSize(msg, f); ++i) EmitValue(out, msg, f, i);
      out << YAML::EndSeq;
    } else {
      EmitValue(out, msg, f, -1);
    }
  }
  out << YAML::EndMap;
}

// ParseProtoYaml without the UTF-8 check of the whole text.
absl::Status ParseWellFormed(std::string_view text, google::protobuf::Message* msg,
                             const std::string& root_path) {
  msg->Clear();
  const std::string prefix = root_path.empty() ? "" : root_path + ": ";
  YamlDocument doc;
  if (absl::Status s = ReadYaml(text, &doc); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, s.message()));
  }
  if (doc.root() == nullptr) return absl::OkStatus();
  std::vector<std::string> errors;
  YamlReader reader(&errors,
                    std::max<int64_t>(kMinWork, kWorkPerByte * static_cast<int64_t>(text.size())));
  reader.ReadMessage(*doc.root(), msg, root_path);
  if (reader.out_of_work()) {
    msg->Clear();
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "the document stands for more than ", reader.max_work(),
        " nodes and characters (", kWorkPerByte, " per byte of its ", text.size(),
        " bytes): aliases (*name) repeat their anchor's whole content each time; write the "
        "repeated parts out, or use fewer aliases"));
  }
  if (errors.empty()) return absl::OkStatus();
  std::string message = absl::StrJoin(errors, "; ");
  if (reader.too_many_errors()) message += kMoreErrors;
  return absl::InvalidArgumentError(message);
}

}  // namespace

absl::Status ParseProtoYaml(std::string_view text, google::protobuf::Message* msg,
                            std::string_view root) {
  const std::string root_path(root);
  if (const std::string bad = Utf8Error(text); !bad.empty()) {
    msg->Clear();
    // Name the field: read the text again with each bad byte as U+FFFD and look for the field
    // that holds one (unless the text has its own U+FFFD, or does not read).
    constexpr std::string_view kMark = "\xEF\xBF\xBD";
    std::string where;
    if (text.find(kMark) == std::string_view::npos) {
      std::unique_ptr<google::protobuf::Message> marked(msg->New());
      if (ParseWellFormed(ReplaceInvalidUtf8(text, kMark), marked.get(), "").ok()) {
        where = FieldContaining(*marked, kMark);
      }
    }
    if (!root_path.empty()) where = where.empty() ? root_path : root_path + "." + where;
    return absl::InvalidArgumentError(where.empty() ? bad : where + ": " + bad);
  }
  return ParseWellFormed(text, msg, root_path);
}

std::string ProtoToYaml(const google::protobuf::Message& msg) {
  YAML::Emitter out;
  EmitMessage(out, msg);
  std::string text = out.c_str();
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text;
}

std::string ProtoToJson(const google::protobuf::Message& msg, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = pretty;
  // Fields without presence are printed also when zero: rank 0 has "rank": 0, an empty list
  // is []. Unset optional and message fields stay out.
  options.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(msg, &out, options).ok()) return "{}";
  return out;
}

}  // namespace dhp
