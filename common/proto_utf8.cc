#include "common/proto_utf8.h"

#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "common/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"

namespace dhp {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Returns "" for acceptable text, else what is wrong with it.
using Check = std::function<std::string(std::string_view text)>;

// Map keys longer than this are cut in paths.
constexpr size_t kMaxKeyInPath = 64;

std::string Join(const std::string& path, std::string_view name) {
  return path.empty() ? std::string(name) : path + "." + std::string(name);
}

std::string KeyText(const Message& entry, const FieldDescriptor* key) {
  const Reflection* r = entry.GetReflection();
  switch (key->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string text = r->GetString(entry, key);
      if (text.size() > kMaxKeyInPath) text = text.substr(0, kMaxKeyInPath) + "...";
      return EscapeInvalidUtf8(text);
    }
    case FieldDescriptor::CPPTYPE_INT32:
      return std::to_string(r->GetInt32(entry, key));
    case FieldDescriptor::CPPTYPE_INT64:
      return std::to_string(r->GetInt64(entry, key));
    case FieldDescriptor::CPPTYPE_UINT32:
      return std::to_string(r->GetUInt32(entry, key));
    case FieldDescriptor::CPPTYPE_UINT64:
      return std::to_string(r->GetUInt64(entry, key));
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(entry, key) ? "true" : "false";
    default:
      return "?";
  }
}

// The first problem found below a message, with its path relative to that message. Paths are
// built only for the problem found, on the way back up: a message with no problem (nearly every
// one the store writes) costs no string work beyond the check itself.
struct Found {
  std::string path;  // "" for the value itself
  std::string problem;
  bool in_key = false;  // the problem is a map entry's key
};

// `head` then `found.path` below it ("labels.owner", "datasets[2].name").
Found Under(std::string head, Found found) {
  if (!found.path.empty()) head += "." + found.path;
  found.path = std::move(head);
  return found;
}

std::optional<Found> Visit(const Message& msg, const Check& check,
                           const FieldDescriptor* skip = nullptr);

std::optional<Found> VisitValue(const Message& msg, const FieldDescriptor* f, int index,
                                const Check& check) {
  const Reflection* r = msg.GetReflection();
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return Visit(index >= 0 ? r->GetRepeatedMessage(msg, f, index) : r->GetMessage(msg, f),
                 check);
  }
  if (f->type() != FieldDescriptor::TYPE_STRING) return std::nullopt;
  std::string scratch;
  const std::string& text = index >= 0 ? r->GetRepeatedStringReference(msg, f, index, &scratch)
                                       : r->GetStringReference(msg, f, &scratch);
  std::string problem = check(text);
  if (problem.empty()) return std::nullopt;
  return Found{"", std::move(problem)};
}

// The first problem in map field `f` of `msg`, under the entry's key.
std::optional<Found> VisitMap(const Message& msg, const FieldDescriptor* f, const Check& check) {
  const Reflection* r = msg.GetReflection();
  const FieldDescriptor* key = f->message_type()->map_key();
  const FieldDescriptor* value = f->message_type()->map_value();
  for (int i = 0; i < r->FieldSize(msg, f); ++i) {
    const Message& entry = r->GetRepeatedMessage(msg, f, i);
    std::optional<Found> found = VisitValue(entry, key, -1, check);
    if (found) found->in_key = true;
    if (!found) found = VisitValue(entry, value, -1, check);
    if (found) return Under(KeyText(entry, key), *std::move(found));
  }
  return std::nullopt;
}

std::optional<Found> Visit(const Message& msg, const Check& check, const FieldDescriptor* skip) {
  const Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f == skip) continue;
    if (f->is_map()) {
      if (std::optional<Found> found = VisitMap(msg, f, check)) {
        return Under(f->name(), *std::move(found));
      }
    } else if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        if (std::optional<Found> found = VisitValue(msg, f, i, check)) {
          return Under(f->name() + "[" + std::to_string(i) + "]", *std::move(found));
        }
      }
    } else if (std::optional<Found> found = VisitValue(msg, f, -1, check)) {
      return Under(f->name(), *std::move(found));
    }
  }
  return std::nullopt;
}

// Nesting deeper than protobuf's own parser accepts (its default recursion limit).
constexpr int kMaxWireDepth = 100;

// InvalidUtf8InEncoding below `path`. Every length-delimited field is kept as bytes by
// UnknownFieldSet, which checks nothing but the framing; the descriptor says which are text.
std::string VisitWire(std::string_view wire, const google::protobuf::Descriptor& type,
                      const std::string& path, int depth) {
  google::protobuf::UnknownFieldSet fields;
  if (depth > kMaxWireDepth || !fields.ParseFromArray(wire.data(), static_cast<int>(wire.size())))
    return "";
  std::map<int, int> seen;  // occurrences so far, per field number: a repeated field's index
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& u = fields.field(i);
    const FieldDescriptor* f = type.FindFieldByNumber(u.number());
    if (f == nullptr || u.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const int index = seen[u.number()]++;
    const std::string field_path =
        Join(path, f->is_repeated() ? f->name() + "[" + std::to_string(index) + "]" : f->name());
    std::string found;
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      found = Utf8Error(u.length_delimited());
      if (!found.empty()) found = field_path + ": " + found;
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
      found = VisitWire(u.length_delimited(), *f->message_type(), field_path, depth + 1);
    }
    if (!found.empty()) return found;
  }
  return "";
}

}  // namespace

std::string InvalidUtf8InEncoding(std::string_view wire,
                                  const google::protobuf::Descriptor& type) {
  return VisitWire(wire, type, "", 0);
}

std::string InvalidUtf8Field(const Message& msg) { return InvalidUtf8Field(msg, nullptr); }

std::string InvalidUtf8Field(const Message& msg, const FieldDescriptor* skip) {
  const std::optional<Found> found = Visit(msg, [](std::string_view text) {
    return Utf8Error(text);
  }, skip);
  if (!found) return "";
  return found->path + (found->in_key ? " (the key): " : ": ") + found->problem;
}

std::string FieldContaining(const Message& msg, std::string_view needle) {
  const std::optional<Found> found = Visit(msg, [needle](std::string_view text) {
    return text.find(needle) == std::string_view::npos ? std::string() : std::string("found");
  });
  if (!found) return "";
  return found->path + (found->in_key ? " (the key)" : "");
}

}  // namespace dhp
