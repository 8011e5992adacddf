// Which string field of a protobuf message holds given text, or text that is not UTF-8.
//
// A proto3 string field must hold well-formed UTF-8: protobuf serialises ill-formed bytes with
// only a logged complaint, and then refuses to parse the result. The controller's store checks
// every message with InvalidUtf8Field before writing it, so that no row it writes can become
// unreadable; the REST gateway uses FieldContaining to name the field where a body's bad bytes
// landed; the gRPC server uses InvalidUtf8InEncoding to name the field of a request that
// protobuf would not parse. Paths read like the YAML reader's: "spec.labels.owner",
// "runs[2].placement[0].node_id".
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
// The same, leaving out `skip`, a field of `msg` itself that the caller checked already.
std::string InvalidUtf8Field(const google::protobuf::Message& msg,
                             const google::protobuf::FieldDescriptor* skip);

// The same check on a message still in protobuf's binary encoding (`wire`, of type `type`), for
// bytes that ParseFromString refused: "" when no string field holds ill-formed UTF-8 (or the
// bytes are not a protobuf encoding at all), else "node.hostname: not valid UTF-8: ...".
// Map entries read as "spec.labels[3].value" (the entry's index; its key may be the bad text).
// Fields this build does not know are skipped, as the parser skips them.
std::string InvalidUtf8InEncoding(std::string_view wire, const google::protobuf::Descriptor& type);

// The path of the first string field (or map key) whose text contains `needle`, or "".
std::string FieldContaining(const google::protobuf::Message& msg, std::string_view needle);

}  // namespace dhp

#endif  // DHP_COMMON_PROTO_UTF8_H_
