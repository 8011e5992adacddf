#include "common/proto_enum.h"

#include <cctype>

namespace dhp {
namespace {

// "JobState" -> "JOB_STATE_", "LrSchedule" -> "LR_SCHEDULE_", "DType" -> "DTYPE_".
std::string PrefixOf(const google::protobuf::EnumDescriptor* type) {
  const std::string& name = type->name();
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool boundary = i > 0 && std::isupper(static_cast<unsigned char>(c)) &&
                    std::islower(static_cast<unsigned char>(name[i - 1]));
    if (boundary) out += '_';
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out + "_";
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string EnumShortName(const google::protobuf::EnumDescriptor* type, int number) {
  const google::protobuf::EnumValueDescriptor* v = type->FindValueByNumber(number);
  if (v == nullptr) return std::to_string(number);
  const std::string prefix = PrefixOf(type);
  const std::string& full = v->name();
  if (full.compare(0, prefix.size(), prefix) == 0) return full.substr(prefix.size());
  return full;
}

std::optional<int> ParseEnumName(const google::protobuf::EnumDescriptor* type,
                                 const std::string& name) {
  const std::string upper = Upper(name);
  const std::string prefix = PrefixOf(type);
  for (int i = 0; i < type->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* v = type->value(i);
    if (v->name() == upper || v->name() == prefix + upper) return v->number();
  }
  return std::nullopt;
}

std::string EnumChoices(const google::protobuf::EnumDescriptor* type) {
  std::string out;
  for (int i = 0; i < type->value_count(); ++i) {
    if (type->value(i)->number() == 0) continue;
    if (!out.empty()) out += ", ";
    out += Lower(EnumShortName(type, type->value(i)->number()));
  }
  return out;
}

}  // namespace dhp
