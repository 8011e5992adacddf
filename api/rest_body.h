// How the REST gateway reads a request body: which format its Content-Type names, and JSON by
// the proto JSON mapping (protobuf's JsonStringToMessage), so that REST and gRPC accept the
// same messages. Errors name the format and the field:
//   request body (JSON): spec.vision.degre: unknown key; known keys: parallelism, degree, ...
//   request body (JSON): reason: not valid UTF-8: byte 0xFF at line 1, column 14 (offset 13)
// Thread-safe (no state).
#ifndef DHP_API_REST_BODY_H_
#define DHP_API_REST_BODY_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace dhp::api {

enum class BodyFormat { kJson, kYaml };

// The format of a body sent with Content-Type `content_type` (the header's value, "" when
// absent; parameters after ';' and case are ignored, but a charset must be UTF-8):
//   JSON: application/json, application/<anything>+json, no Content-Type, or */*;
//   YAML: application/yaml, text/yaml, application/x-yaml, text/x-yaml, when `yaml_allowed`.
// Anything else is INVALID_ARGUMENT saying what was sent and what is accepted; the gateway
// answers it with 415 Unsupported Media Type.
absl::StatusOr<BodyFormat> BodyFormatOf(std::string_view content_type, bool yaml_allowed);

// Parses `body` into `msg` (cleared first) by the proto JSON mapping: proto field names or
// their lowerCamelCase JSON names, enums by full name or number, 64-bit integers as numbers or
// strings, bytes as base64; unknown keys are errors. An empty (or all-whitespace) body is an
// empty message. Text that is not UTF-8 is refused naming the field where it is, when the rest
// reads. The text must be JSON by RFC 8259 (no comments, single quotes, bare keys or trailing
// commas), give each key of an object once and each field once (by its proto name or its JSON
// name, not both: protobuf would keep the later), nest at most 64 deep and hold at most
// kMaxRequestElements values (api/service.h), as many as a gRPC request's elements.
// INVALID_ARGUMENT "request body (JSON): ..." of at most 4 KiB otherwise.
absl::Status ParseJsonBody(std::string_view body, google::protobuf::Message* msg);

}  // namespace dhp::api

#endif  // DHP_API_REST_BODY_H_
