// Short, human names for proto enum values and their inverse.
//
// JOB_STATE_QUEUED <-> "QUEUED", PARALLELISM_SEQUENCE <-> "SEQUENCE". Users type the short
// name in any case ("sequence"), or the full one; tables print the short one. Thread-safe.
#ifndef DHP_COMMON_PROTO_ENUM_H_
#define DHP_COMMON_PROTO_ENUM_H_

#include <optional>
#include <string>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace dhp {

// The value's name without the enum's prefix (the enum type name in UPPER_SNAKE_CASE).
std::string EnumShortName(const google::protobuf::EnumDescriptor* type, int number);

// Parses the short or full name, case-insensitively. nullopt when nothing matches.
std::optional<int> ParseEnumName(const google::protobuf::EnumDescriptor* type,
                                 const std::string& name);

// The short names of all values but the zero (UNSPECIFIED) one, lower case, comma-separated:
// for error messages ("one of none, sequence, tensor").
std::string EnumChoices(const google::protobuf::EnumDescriptor* type);

template <typename E>
std::string ShortName(E value) {
  return EnumShortName(google::protobuf::GetEnumDescriptor<E>(), static_cast<int>(value));
}

}  // namespace dhp

#endif  // DHP_COMMON_PROTO_ENUM_H_
