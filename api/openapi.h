// The OpenAPI 3.0 document of the REST gateway, built from the gateway's own route table and
// the dhp.v1 message descriptors, so that the document cannot drift from what is served.
//
// Schemas follow the proto3 JSON mapping as the gateway reads and writes it: proto field names;
// 64-bit integers as decimal strings (numbers are accepted too); enums by name (numbers are
// accepted too); bytes as base64; google.protobuf.Timestamp as RFC 3339 text; maps as objects.
// Fields equal to their default are left out of responses, so no response field is required.
// Errors are the Error schema ({code, status, message}) with the HTTP status of HttpStatusFor.
//
//   std::vector<RestOperation> ops = ...;     // one per route
//   std::string doc = OpenApiJson(ops, /*bearer_auth=*/true);
//
// Thread-safe (no state).
#ifndef DHP_API_OPENAPI_H_
#define DHP_API_OPENAPI_H_

#include <string>
#include <vector>

namespace google::protobuf {
class Descriptor;
class EnumDescriptor;
}  // namespace google::protobuf

namespace dhp::api {

// A query parameter of a route, as the gateway parses it.
struct QueryParam {
  enum class Type {
    kBool,       // true/false (also 1/0, yes/no; empty means true)
    kInt32,      // a decimal integer, >= minimum
    kInt64,      // a decimal integer, >= minimum
    kString,     // any UTF-8 text
    kEnumList,   // values of enum_type by short or full name; repeatable, or comma-separated
    kLabels,     // key=value; repeatable
    kInt32List,  // decimal integers >= minimum; repeatable, or comma-separated
    kInt64List,  // decimal integers >= minimum; repeatable, or comma-separated
  };
  std::string name;
  Type type = Type::kString;
  std::string description;
  long long minimum = -1;  // -1: no minimum (every bounded parameter here has minimum 0)
  const google::protobuf::EnumDescriptor* enum_type = nullptr;  // kEnumList
};

// What a route's response is.
enum class ResponseKind {
  kJson,    // the RPC's response message as JSON
  kNdjson,  // a stream of the RPC's response messages, one JSON object per line
  kText,    // text/plain (health, metrics)
  kOpenApi  // this document
};

// One route of the gateway.
struct RestOperation {
  std::string method;        // lower case: "get", "post"
  std::string path;          // "/v1/jobs/{id}:cancel"; at most one capture, {id}
  std::string rpc;           // the RPC it calls: "CancelJob" (two routes may share one: WatchJob)
  std::string operation_id;  // unique per operation; "" means rpc
  std::string summary;
  std::string id_field;  // the request field that {id} fills ("job_id", "node_id"); "" if none
  std::vector<QueryParam> query;
  // The JSON request body (a dhp.v1 message), or nullptr when the route reads no body.
  const google::protobuf::Descriptor* body = nullptr;
  bool yaml_body = false;  // a YAML job spec (application/yaml) is accepted in place of JSON
  // The response message (kJson, kNdjson), or nullptr.
  const google::protobuf::Descriptor* response = nullptr;
  ResponseKind response_kind = ResponseKind::kJson;
  bool needs_auth = true;  // the bearer token is checked (when the gateway has one)
  // The response holds an id that other routes take as {id}: the field they fill with it
  // ("job_id") and where it is in this response (a JSON pointer: "/job/job_id"). The document
  // links this operation to those.
  std::string provides_id_field;
  std::string provides_id_pointer;
};

// The document as JSON text. `bearer_auth`: the gateway checks a bearer token, so routes with
// needs_auth declare it and may answer 401.
std::string OpenApiJson(const std::vector<RestOperation>& operations, bool bearer_auth);

}  // namespace dhp::api

#endif  // DHP_API_OPENAPI_H_
