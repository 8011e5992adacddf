#include "api/openapi.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "common/proto_enum.h"
#include "google/protobuf/descriptor.h"
#include "nlohmann/json.hpp"

namespace dhp::api {
namespace {

namespace pb = google::protobuf;
using Json = nlohmann::ordered_json;

constexpr char kTimestamp[] = "google.protobuf.Timestamp";

Json SchemaRef(const std::string& name) { return {{"$ref", "#/components/schemas/" + name}}; }

// Collects the schemas of the messages and enums the operations reach, by the proto3 JSON
// mapping (see openapi.h).
class Schemas {
 public:
  Json Message(const pb::Descriptor* d) {
    const std::string name(d->full_name());
    if (!seen_.insert(name).second) return SchemaRef(name);
    Json properties = Json::object();
    for (int i = 0; i < d->field_count(); ++i) {
      const pb::FieldDescriptor* f = d->field(i);
      properties[std::string(f->name())] = Nullable(Field(f));
    }
    schemas_[name] = {{"type", "object"}, {"properties", std::move(properties)}};
    return SchemaRef(name);
  }

  Json Enum(const pb::EnumDescriptor* e) {
    const std::string name(e->full_name());
    if (seen_.insert(name).second) {
      Json names = Json::array();
      for (int i = 0; i < e->value_count(); ++i) names.push_back(std::string(e->value(i)->name()));
      schemas_[name] = {{"description", "By name; numbers are accepted in requests too."},
                        {"oneOf", {{{"type", "string"}, {"enum", names}}, {{"type", "integer"}}}}};
    }
    return SchemaRef(name);
  }

  // Sorted by name, so that the document is stable.
  const std::map<std::string, Json>& all() const { return schemas_; }

 private:
  // JSON null is read as the field's default, so every field may be null in a request (and
  // protobuf's parser skips a null element of a repeated field).
  static Json Nullable(Json schema) {
    if (schema.contains("$ref")) return {{"nullable", true}, {"allOf", {std::move(schema)}}};
    schema["nullable"] = true;
    return schema;
  }

  Json Field(const pb::FieldDescriptor* f) {
    if (f->is_map()) {
      return {{"type", "object"}, {"additionalProperties", Value(f->message_type()->map_value())}};
    }
    Json value = Value(f);
    // A null element of a repeated field is skipped.
    if (f->is_repeated()) return {{"type", "array"}, {"items", Nullable(std::move(value))}};
    return value;
  }

  Json Value(const pb::FieldDescriptor* f) {
    using T = pb::FieldDescriptor;
    switch (f->cpp_type()) {
      case T::CPPTYPE_INT32:
        return {{"type", "integer"}, {"format", "int32"}};
      case T::CPPTYPE_UINT32:
        return {{"type", "integer"}, {"minimum", 0}, {"maximum", 4294967295LL}};
      case T::CPPTYPE_INT64:
        return Int64(true);
      case T::CPPTYPE_UINT64:
        return Int64(false);
      case T::CPPTYPE_DOUBLE:
      case T::CPPTYPE_FLOAT:
        return {{"oneOf",
                 {{{"type", "number"}},
                  {{"type", "string"}, {"description", "NaN, Infinity, -Infinity or a number"}}}}};
      case T::CPPTYPE_BOOL:
        return {{"type", "boolean"}};
      case T::CPPTYPE_ENUM:
        return Enum(f->enum_type());
      case T::CPPTYPE_STRING:
        if (f->type() == T::TYPE_BYTES) return {{"type", "string"}, {"format", "byte"}};
        return {{"type", "string"}};
      case T::CPPTYPE_MESSAGE:
        if (f->message_type()->full_name() == kTimestamp) {
          return {{"type", "string"}, {"format", "date-time"}};
        }
        return Message(f->message_type());
    }
    return Json::object();
  }

  // 64-bit integers are written as decimal strings; numbers are read too.
  static Json Int64(bool is_signed) {
    return {{"oneOf",
             {{{"type", "string"}, {"pattern", is_signed ? "^-?[0-9]+$" : "^[0-9]+$"}},
              {{"type", "integer"}}}}};
  }

  std::set<std::string> seen_;
  std::map<std::string, Json> schemas_;
};

Json QuerySchema(const QueryParam& p) {
  using T = QueryParam::Type;
  auto bounded = [&](Json schema) {
    if (p.minimum >= 0) schema["minimum"] = p.minimum;
    return schema;
  };
  switch (p.type) {
    case T::kBool:
      return {{"type", "boolean"}};
    case T::kInt32:
      return bounded({{"type", "integer"}, {"format", "int32"}});
    case T::kInt64:
      return bounded({{"type", "integer"}, {"format", "int64"}});
    case T::kString:
      return {{"type", "string"}};
    case T::kEnumList: {
      // Short lower-case names ("running") and full names; the zero value is refused.
      Json names = Json::array();
      for (int i = 0; i < p.enum_type->value_count(); ++i) {
        const std::string full(p.enum_type->value(i)->name());
        if (p.enum_type->value(i)->number() == 0) continue;
        names.push_back(
            absl::AsciiStrToLower(EnumShortName(p.enum_type, p.enum_type->value(i)->number())));
        names.push_back(full);
      }
      return {{"type", "array"}, {"items", {{"type", "string"}, {"enum", std::move(names)}}}};
    }
    case T::kLabels:
      return {{"type", "array"}, {"items", {{"type", "string"}, {"pattern", "^[^=]+=.*$"}}}};
    case T::kInt32List:
      return {{"type", "array"}, {"items", bounded({{"type", "integer"}, {"format", "int32"}})}};
    case T::kInt64List:
      return {{"type", "array"}, {"items", bounded({{"type", "integer"}, {"format", "int64"}})}};
  }
  return {{"type", "string"}};
}

Json ErrorResponse(const std::string& description) {
  return {{"description", description},
          {"content", {{"application/json", {{"schema", SchemaRef("Error")}}}}}};
}

Json Responses(const RestOperation& op, bool bearer_auth, Schemas& schemas) {
  Json r = Json::object();
  switch (op.response_kind) {
    case ResponseKind::kJson:
      r["200"] = {{"description", "OK"},
                  {"content", {{"application/json", {{"schema", schemas.Message(op.response)}}}}}};
      break;
    case ResponseKind::kNdjson:
      r["200"] = {
          {"description",
           "A stream of JSON objects, one per line (newline-delimited JSON). An error "
           "after the stream began ends it with a line {\"error\": Error}."},
          {"content", {{"application/x-ndjson", {{"schema", schemas.Message(op.response)}}}}}};
      break;
    case ResponseKind::kText:
      r["200"] = {{"description", "OK"},
                  {"content", {{"text/plain", {{"schema", {{"type", "string"}}}}}}}};
      break;
    case ResponseKind::kOpenApi:
      r["200"] = {{"description", "This document"},
                  {"content", {{"application/json", {{"schema", {{"type", "object"}}}}}}}};
      break;
  }
  if (op.rpc == "Healthz") {
    r["503"] = {{"description", "Not healthy; the body says why"},
                {"content", {{"text/plain", {{"schema", {{"type", "string"}}}}}}}};
    return r;
  }
  if (op.response_kind == ResponseKind::kText || op.response_kind == ResponseKind::kOpenApi) {
    return r;
  }
  r["400"] = ErrorResponse("A bad argument: the message names the field or parameter");
  if (bearer_auth && op.needs_auth) r["401"] = ErrorResponse("No token, or a wrong one");
  r["404"] = ErrorResponse("No such job, node, key or route");
  r["408"] = ErrorResponse("The headers (10 s) or the body (60 s) did not arrive in time");
  r["409"] = ErrorResponse(
      "Not possible in the current state (FAILED_PRECONDITION, "
      "ALREADY_EXISTS)");
  if (op.body != nullptr) {
    r["413"] = ErrorResponse("The body is over the gateway's limit");
    r["415"] = ErrorResponse("A body of a Content-Type the route does not read");
  }
  r["429"] = ErrorResponse("A limit was reached (RESOURCE_EXHAUSTED)");
  r["500"] = ErrorResponse("An internal error");
  r["503"] = ErrorResponse("The controller cannot serve it now (UNAVAILABLE)");
  r["504"] = ErrorResponse("A deadline passed (DEADLINE_EXCEEDED)");
  return r;
}

std::string OperationId(const RestOperation& op) {
  return op.operation_id.empty() ? op.rpc : op.operation_id;
}

// OpenAPI links from `op`'s 200 response to the operations that take the id it returns.
Json Links(const RestOperation& op, const std::vector<RestOperation>& all) {
  Json links = Json::object();
  for (const RestOperation& other : all) {
    if (other.id_field.empty() || other.id_field != op.provides_id_field) continue;
    links[OperationId(other)] = {
        {"operationId", OperationId(other)},
        {"parameters", {{"id", "$response.body#" + op.provides_id_pointer}}}};
  }
  return links;
}

Json Operation(const RestOperation& op, bool bearer_auth, Schemas& schemas) {
  Json o = {{"operationId", OperationId(op)}, {"summary", op.summary}};
  Json params = Json::array();
  if (op.path.find("{id}") != std::string::npos) {
    params.push_back({{"name", "id"},
                      {"in", "path"},
                      {"required", true},
                      {"description", "Fills the request's " + op.id_field +
                                          (op.body == nullptr
                                               ? std::string(".")
                                               : "; a body that gives another is refused (400).")},
                      {"schema", {{"type", "string"}, {"minLength", 1}}}});
  }
  for (const QueryParam& p : op.query) {
    Json param = {{"name", p.name}, {"in", "query"}, {"required", false}};
    if (!p.description.empty()) param["description"] = p.description;
    param["schema"] = QuerySchema(p);
    params.push_back(std::move(param));
  }
  if (!params.empty()) o["parameters"] = std::move(params);
  if (op.body != nullptr) {
    Json content = {{"application/json", {{"schema", schemas.Message(op.body)}}}};
    if (op.yaml_body) {
      content["application/yaml"] = {
          {"schema", {{"type", "string"}, {"description", "A job spec in YAML (the spec_text)"}}}};
    }
    o["requestBody"] = {{"required", false}, {"content", std::move(content)}};
  }
  o["responses"] = Responses(op, bearer_auth, schemas);
  if (!(bearer_auth && op.needs_auth)) o["security"] = Json::array();
  return o;
}

}  // namespace

std::string OpenApiJson(const std::vector<RestOperation>& operations, bool bearer_auth) {
  Schemas schemas;
  Json paths = Json::object();
  for (const RestOperation& op : operations) {
    Json operation = Operation(op, bearer_auth, schemas);
    if (!op.provides_id_field.empty()) {
      operation["responses"]["200"]["links"] = Links(op, operations);
    }
    paths[op.path][op.method] = std::move(operation);
  }
  Json components = Json::object();
  Json all = Json::object();
  all["Error"] = {{"type", "object"},
                  {"required", {"code", "status", "message"}},
                  {"properties",
                   {{"code", {{"type", "integer"}, {"description", "The gRPC status code"}}},
                    {"status", {{"type", "string"}, {"description", "Its name, e.g. NOT_FOUND"}}},
                    {"message", {{"type", "string"}}}}}};
  for (const auto& [name, schema] : schemas.all()) all[name] = schema;
  components["schemas"] = std::move(all);
  Json doc = {{"openapi", "3.0.3"},
              {"info",
               {{"title", "dhp"},
                {"version", "v1"},
                {"description",
                 "The REST face of the dhp.v1 gRPC services: the same messages in the proto3 "
                 "JSON mapping (proto field names in responses; requests may also use the "
                 "lowerCamelCase names, one of the two per field). Fields equal to their "
                 "default are omitted."}}},
              {"paths", std::move(paths)}};
  if (bearer_auth) {
    components["securitySchemes"] = {{"bearerAuth", {{"type", "http"}, {"scheme", "bearer"}}}};
    doc["security"] = Json::array({{{"bearerAuth", Json::array()}}});
  }
  doc["components"] = std::move(components);
  return doc.dump(2) + "\n";
}

}  // namespace dhp::api
