// Which string field of a protobuf message holds given text, or text that is not UTF-8.
//
// A proto3 string field must hold well-formed UTF-8: protobuf serialises ill-formed bytes with
// only a logged complaint, and then refuses to parse the result. The controller's store checks
// every message with InvalidUtf8Field before writing it, so that no row it writes can become
// unreadable; the REST gateway uses FieldContaining to name the field where a body's bad bytes
// landed. Paths read like the YAML reader's: "spec.labels.owner", "runs[2].placement[0].node_id".
//
// Thread-safe (no state).
#ifndef DHP_COMMON_PROTO_UTF8_H_
#define DHP_COMMON_PROTO_UTF8_H_

#include <string>
#include <string_view>

#include "google/protobuf/message.h"

namespace dhp {

// "" when every string field, repeated element and map key or value of `msg` (recursively) is
// well-formed UTF-8; otherwise the first offender's path and Utf8Error, e.g.
//   spec.labels.owner: not valid UTF-8: byte 0xFF at line 1, column 2 (offset 1)
// Bytes fields are not text and are not checked.
std::string InvalidUtf8Field(const google::protobuf::Message& msg);

// The path of the first string field (or map key) whose text contains `needle`, or "".
std::string FieldContaining(const google::protobuf::Message& msg, std::string_view needle);

}  // namespace dhp

#endif  // DHP_COMMON_PROTO_UTF8_H_
