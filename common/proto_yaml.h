// Strict conversion between YAML/JSON text and proto messages, driven by proto reflection.
//
// Job specs and REST request bodies come through here, so users get one kind of error for a
// typo wherever they make it: the path of the offending key and what was expected, e.g.
//   vision.degre: unknown key; known keys: parallelism, degree, zero_stage, ...
// JSON is read as YAML (flow style), so one parser serves both: libyaml's
// (common/yaml_syntax.h); YAML is written with yaml-cpp's emitter. Thread-safe (no state).
#ifndef DHP_COMMON_PROTO_YAML_H_
#define DHP_COMMON_PROTO_YAML_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace dhp {

// Parses `text` (YAML or JSON) into `msg`, which is cleared first. Accepted:
//  - field names as in the .proto (snake_case) or their JSON names (lowerCamelCase);
//  - enums by short or full name in any case ("sequence", "PARALLELISM_SEQUENCE") or number;
//  - integers as numbers or decimal strings, with range checks; bools as true/false;
//  - maps as mappings, repeated fields as sequences, google.protobuf.Timestamp as RFC 3339;
//  - an empty document as an empty message.
// Anything else is INVALID_ARGUMENT naming the path (prefixed by `root` when given), the value
// and what was expected. Unknown keys are always errors.
absl::Status ParseProtoYaml(std::string_view text, google::protobuf::Message* msg,
                            std::string_view root = "");

// YAML with proto field names, short lower-case enum names, and fields at their default value
// left out. ParseProtoYaml reads it back to an equal message.
std::string ProtoToYaml(const google::protobuf::Message& msg);

// JSON by the proto JSON mapping, keeping proto field names (snake_case); enums as full names.
std::string ProtoToJson(const google::protobuf::Message& msg, bool pretty = false);

}  // namespace dhp

#endif  // DHP_COMMON_PROTO_YAML_H_
