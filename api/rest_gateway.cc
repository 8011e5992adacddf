#include "api/rest_gateway.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/authz.h"
#include "api/methods.h"
#include "api/openapi.h"
#include "api/rest_body.h"
#include "api/rest_wait.h"
#include "common/check.h"
#include "common/proto_enum.h"
#include "common/proto_yaml.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"

namespace dhp::api {
namespace {

namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;
using QueryParams = std::vector<std::pair<std::string, std::string>>;

constexpr char kJson[] = "application/json";

// `field` set to the path's `id`, unless the body set it to another: INVALID_ARGUMENT naming
// both, so that a client's mistake is not applied to the path's job or node.
absl::Status SetFromPath(const char* field, std::string* value, const std::string& id) {
  if (!value->empty() && *value != id) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the body says \"", CutUtf8(*value, 200), "\" and the path \"",
        CutUtf8(id, 200), "\"; leave it out of the body or make them agree"));
  }
  *value = id;
  return absl::OkStatus();
}

// Stores the id from the path in the request's job_id or node_id, whichever it has
// (SetIdField(req, id, 0): the int overload is preferred, then long, then the rest).
template <typename Req>
auto SetIdField(Req& req, const std::string& id, int)
    -> decltype(req.set_job_id(id), absl::Status()) {
  return SetFromPath("job_id", req.mutable_job_id(), id);
}
template <typename Req>
auto SetIdField(Req& req, const std::string& id, long)
    -> decltype(req.set_node_id(id), absl::Status()) {
  return SetFromPath("node_id", req.mutable_node_id(), id);
}
template <typename Req>
absl::Status SetIdField(Req&, const std::string&, ...) {
  return absl::OkStatus();
}

std::string JsonEscape(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// The RPC of dhp.v1's services with this name, or nullptr.
const google::protobuf::MethodDescriptor* FindRpc(const std::string& name) {
  const google::protobuf::FileDescriptor* file = v1::SubmitJobRequest::descriptor()->file();
  for (int i = 0; i < file->service_count(); ++i) {
    if (const auto* rpc = file->service(i)->FindMethodByName(name)) return rpc;
  }
  return nullptr;
}

std::string VerbName(http::verb verb) {
  const auto name = http::to_string(verb);
  return std::string(name.data(), name.size());
}

void SendError(HttpResponder& responder, const absl::Status& status,
               const HttpHeaders& headers = {}) {
  responder.Respond(static_cast<http::status>(HttpStatusFor(status.code())), kJson,
                    StatusToJson(status) + "\n", headers);
}

// The format of the request's body by its Content-Type (JSON when the body is empty); answers
// 415 and returns nullopt when the type is refused.
std::optional<BodyFormat> FormatOrRespond(const HttpRequest& request, HttpResponder& responder,
                                          bool yaml_allowed) {
  if (request.body().empty()) return BodyFormat::kJson;
  const auto raw = request[http::field::content_type];
  absl::StatusOr<BodyFormat> format =
      BodyFormatOf(std::string_view(raw.data(), raw.size()), yaml_allowed);
  if (format.ok()) return *format;
  responder.Respond(http::status::unsupported_media_type, kJson,
                    StatusToJson(format.status()) + "\n");
  return std::nullopt;
}

// INVALID_ARGUMENT "<what>: not valid UTF-8: ..." for text from the path or the query.
absl::Status CheckUtf8(const std::string& what, const std::string& text) {
  const std::string bad = Utf8Error(text);
  if (bad.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", bad));
}

absl::StatusOr<bool> ParseBoolParam(const std::string& name, const std::string& value) {
  const std::string v = absl::AsciiStrToLower(value);
  // No empty value (`?pretty`, `?pretty=`): the document declares a boolean, and a client
  // that means false by it should not get true.
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("query parameter ", name, ": expected true or false, got \"", value, "\""));
}

template <typename Int>
absl::StatusOr<Int> ParseIntParam(const std::string& name, const std::string& value) {
  Int n;
  if (!absl::SimpleAtoi(value, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter ", name, ": expected an integer, got \"", value, "\""));
  }
  return n;
}

// A sink that writes one JSON line per event into a chunked response.
class NdjsonSink final : public EventSink {
 public:
  explicit NdjsonSink(HttpResponder& responder) : responder_(responder), start_(Clock::now()) {}

  bool Write(const v1::Event& event) override {
    std::string line = ProtoToJson(event);
    line += '\n';
    std::lock_guard<std::mutex> lock(mu_);
    return StartLocked() && responder_.WriteChunk(line);
  }

  bool IsCancelled() const override {
    if (responder_.ClientGone()) return true;
    // The service is waiting for events: send the headers so that the client sees the
    // stream is open (curl shows nothing until then).
    if (!started_.load() && Clock::now() - start_ > std::chrono::milliseconds(50)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!StartLocked()) return true;
    }
    return false;
  }

  // After WatchJob returned `status`.
  void Finish(const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_.load()) {
      if (!status.ok()) return SendError(responder_, status);
      StartLocked();
    } else if (!status.ok() && !responder_.ClientGone()) {
      responder_.WriteChunk("{\"error\": " + StatusToJson(status) + "}\n");
    }
    responder_.EndStream();
  }

 private:
  bool StartLocked() const {
    if (started_.load()) return true;
    started_.store(true);
    return responder_.BeginStream(http::status::ok, "application/x-ndjson",
                                  {{"Cache-Control", "no-cache"}});
  }

  HttpResponder& responder_;
  const Clock::time_point start_;
  mutable std::mutex mu_;  // guards sending the headers exactly once, and event order
  mutable std::atomic<bool> started_{false};
};

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  using C = absl::StatusCode;
  // clang-format off
  switch (code) {
    case C::kOk:                 return 200;
    case C::kInvalidArgument:    return 400;
    case C::kNotFound:           return 404;
    case C::kAlreadyExists:      return 409;
    case C::kFailedPrecondition: return 409;
    case C::kDeadlineExceeded:   return 504;
    case C::kUnauthenticated:    return 401;
    case C::kPermissionDenied:   return 403;
    case C::kUnavailable:        return 503;
    case C::kUnimplemented:      return 501;
    case C::kResourceExhausted:  return 429;
    default:                     return 500;
  }
  // clang-format on
}

std::string StatusToJson(const absl::Status& status) {
  // Bytes that are not UTF-8 (echoed from a request) are written as \xNN: the answer stays
  // valid JSON.
  const std::string message = EscapeInvalidUtf8(
      std::string_view(status.message().data(), status.message().size()));
  return absl::StrCat("{\"code\": ", static_cast<int>(status.code()),
                      ", \"status\": ", JsonEscape(absl::StatusCodeToString(status.code())),
                      ", \"message\": ", JsonEscape(message), "}");
}

// ---- routing -------------------------------------------------------------------------------

class RestGateway::Router {
 public:
  Router(DhpService& service, TokenAuth auth, RestRequestObserver observer)
      : service_(service),
        auth_(std::move(auth)),
        authz_(auth_, service),
        observer_(std::move(observer)) {
    AddRoutes();
    std::vector<RestOperation> ops;
    for (const Route& route : routes_) ops.push_back(route.op);
    openapi_ = OpenApiJson(ops, auth_.enabled());
  }

  void Handle(const HttpRequest& request, HttpResponder& responder);
  // Before a body is read: 401 when a token is needed and missing or wrong, so that an
  // unauthenticated upload is not read (nor 100 Continue sent).
  std::optional<HttpRefusal> CheckHeaders(const HttpRequest& request) const {
    if (!auth_.enabled()) return std::nullopt;
    const std::string_view target(request.target().data(), request.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (path == "/healthz" || path == "/metrics" || path == "/openapi.json") return std::nullopt;
    const auto authorization = request[http::field::authorization];
    const absl::Status s =
        auth_.Check(std::string_view(authorization.data(), authorization.size()));
    if (s.ok()) return std::nullopt;
    return HttpRefusal{http::status::unauthorized, std::string(s.message())};
  }
  // A request the HTTP server refused before routing (400 not HTTP, 401 before the body, 408
  // too slow, 413 body too large, 414 target too long, 431 headers too large, 503 on a reserved
  // connection): the JSON error to send; the observer is told (route "Unrouted").
  HttpRejection Rejected(HttpStatus status, const std::string& message) const {
    absl::Status error = absl::InvalidArgumentError(message);
    if (status == HttpStatus::payload_too_large || status == HttpStatus::uri_too_long ||
        status == HttpStatus::request_header_fields_too_large) {
      error = absl::ResourceExhaustedError(message);
    }
    if (status == HttpStatus::unauthorized) error = absl::UnauthenticatedError(message);
    if (status == HttpStatus::request_timeout) error = absl::DeadlineExceededError(message);
    if (status == HttpStatus::service_unavailable) error = absl::UnavailableError(message);
    if (observer_) observer_("Unrouted", static_cast<int>(status), 0.0, false);
    return {kJson, StatusToJson(error) + "\n"};
  }

 private:
  // One path segment of a pattern: a literal ("jobs", "nodes:register"), or a capture
  // ("{id}", matching a non-empty segment without ':') with an optional literal suffix
  // ("{id}:cancel").
  struct Segment {
    std::string literal;
    bool capture = false;
  };
  struct Call {
    const HttpRequest& request;
    HttpResponder& responder;
    std::string id;  // the captured path id, decoded
    const QueryParams& query;
    bool pretty = false;
    bool* reached_service;  // set when the request is handed to the service
    std::string_view method;         // the route's method (api/methods.h)
    std::string_view authorization;  // the request's Authorization header
  };
  struct Route {
    http::verb method;
    std::vector<Segment> segments;
    RestOperation op;                 // what /openapi.json says of it
    std::vector<std::string> params;  // accepted query parameters (op.query's names)
    std::function<void(Call&)> handle;
  };
  using Q = QueryParam::Type;

  void AddRoutes();
  // A method's own query parameters and handler, where its REST form is not "a POST whose
  // body is the request".
  struct Own {
    std::vector<QueryParam> query;
    std::function<void(Call&)> handle;
  };
  // The route of a method of api/methods.h: verb, path and summary from the table; the query
  // parameters and handler from `own`, else no parameters and `body_call`.
  void AddMethod(std::string_view name, const std::map<std::string_view, Own>& own,
                 std::function<void(Call&)> body_call);
  void Add(http::verb method, absl::string_view pattern, std::string name, std::string summary,
           std::vector<QueryParam> query, std::function<void(Call&)> handle);
  static bool Match(const Route& route, const std::vector<absl::string_view>& parts,
                    absl::string_view* captured);

  // Builds the request with `build(Req&) -> Status`, calls the service, answers.
  template <typename Req, typename Resp, typename Build>
  void Unary(Call& call, absl::Status (DhpService::*method)(const Req&, Resp*), Build build) {
    Req req;
    absl::Status status = build(req);
    Resp resp;
    if (status.ok()) {
      *call.reached_service = true;
      status = authz_.Call(call.authorization, call.method, method, req, &resp);
    }
    if (!status.ok()) return SendError(call.responder, status);
    call.responder.Respond(http::status::ok, kJson, ProtoToJson(resp, call.pretty) + "\n");
  }
  // A POST whose body is the request; the path id (if any) fills its job_id or node_id.
  template <typename Req, typename Resp>
  void BodyCall(Call& call, absl::Status (DhpService::*method)(const Req&, Resp*)) {
    if (!FormatOrRespond(call.request, call.responder, false)) return;
    Unary(call, method, [&](Req& req) {
      absl::Status s = ParseJsonBody(call.request.body(), &req);
      if (s.ok() && !call.id.empty()) s = SetIdField(req, call.id, 0);
      return s;
    });
  }
  // The same for a rendezvous wait: the connection's thread waits for it, and a client that
  // goes away meanwhile cancels it (api/rest_wait.h).
  template <typename Req, typename Resp>
  void WaitCall(Call& call, void (DhpService::*method)(const Req&, Resp*, DhpService::Done,
                                                       std::shared_ptr<CancelSignal>)) {
    if (!FormatOrRespond(call.request, call.responder, false)) return;
    Req req;
    if (absl::Status s = ParseJsonBody(call.request.body(), &req); !s.ok()) {
      return SendError(call.responder, s);
    }
    *call.reached_service = true;
    Resp resp;
    absl::Status status = AwaitUnlessGone(
        [&call] { return call.responder.ClientGone(); },
        [&](DhpService::Done done, std::shared_ptr<CancelSignal> cancel) {
          authz_.CallAsync(call.authorization, call.method, method, req, &resp, std::move(done),
                           std::move(cancel));
        });
    if (!status.ok()) return SendError(call.responder, status);
    call.responder.Respond(http::status::ok, kJson, ProtoToJson(resp, call.pretty) + "\n");
  }
  void SubmitJob(Call& call);
  void ListJobs(Call& call);
  void GetLogs(Call& call);
  void Watch(Call& call, const std::string& job_id);

  DhpService& service_;
  const TokenAuth auth_;
  const Authorizer authz_;  // every call of the service goes through it
  const RestRequestObserver observer_;
  std::vector<Route> routes_;  // immutable after construction
  std::string openapi_;        // the document of routes_, built once after them
};

void RestGateway::Router::Add(http::verb method, absl::string_view pattern, std::string name,
                              std::string summary, std::vector<QueryParam> query,
                              std::function<void(Call&)> handle) {
  RestOperation op;
  op.method = absl::AsciiStrToLower(VerbName(method));
  op.path = std::string(pattern);
  op.rpc = std::move(name);
  op.summary = std::move(summary);
  if (absl::StrContains(pattern, "{id}")) {
    op.id_field = absl::StartsWith(pattern, "/v1/nodes/")     ? "node_id"
                  : absl::StartsWith(pattern, "/v1/exports/") ? "id"
                                                              : "job_id";
  }
  if (const google::protobuf::MethodDescriptor* rpc = FindRpc(op.rpc)) {
    if (method == http::verb::post) op.body = rpc->input_type();
    op.response = rpc->output_type();
    op.response_kind = rpc->server_streaming() ? ResponseKind::kNdjson : ResponseKind::kJson;
    query.push_back({"pretty", Q::kBool, "Indented JSON"});
  } else {  // /healthz, /metrics, /openapi.json: no token, query parameters ignored
    op.needs_auth = false;
    op.response_kind = op.rpc == "OpenApi" ? ResponseKind::kOpenApi : ResponseKind::kText;
  }
  Route route{method, {}, std::move(op), {}, std::move(handle)};
  for (const QueryParam& p : query) route.params.push_back(p.name);
  route.op.query = std::move(query);
  for (absl::string_view part : absl::StrSplit(pattern.substr(1), '/')) {
    Segment seg;
    if (absl::ConsumePrefix(&part, "{id}")) seg.capture = true;
    seg.literal = std::string(part);
    route.segments.push_back(std::move(seg));
  }
  routes_.push_back(std::move(route));
}

bool RestGateway::Router::Match(const Route& route, const std::vector<absl::string_view>& parts,
                                absl::string_view* captured) {
  if (parts.size() != route.segments.size()) return false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Segment& seg = route.segments[i];
    absl::string_view part = parts[i];
    if (!seg.capture) {
      if (part != seg.literal) return false;
      continue;
    }
    if (!absl::ConsumeSuffix(&part, seg.literal)) return false;
    if (part.empty() || part.find(':') != absl::string_view::npos) return false;
    *captured = part;
  }
  return true;
}

void RestGateway::Router::AddMethod(std::string_view name, const std::map<std::string_view, Own>& own,
                                    std::function<void(Call&)> body_call) {
  const MethodInfo* m = FindMethod(name);
  DHP_CHECK(m != nullptr) << "no method " << name << " in api/methods.h";
  auto it = own.find(name);
  Add(m->verb == "GET" ? http::verb::get : http::verb::post,
      absl::string_view(m->path.data(), m->path.size()), std::string(m->name),
      std::string(m->summary), it == own.end() ? std::vector<QueryParam>() : it->second.query,
      it == own.end() ? std::move(body_call) : it->second.handle);
}

void RestGateway::Router::AddRoutes() {
  using V = http::verb;
  const QueryParam after{"after", Q::kInt64, "Only events with a larger id", 0};
  const QueryParam follow{"follow", Q::kBool, "Keep the stream open for new events"};
  // The methods whose REST form is not "a POST whose body is the request": their query
  // parameters and handlers.
  std::map<std::string_view, Own> own;
  own["SubmitJob"] = {{{"dry_run", Q::kBool, "Validate and normalise only; store nothing"}},
                      [this](Call& c) { SubmitJob(c); }};
  own["ListJobs"] = {
      {{"state", Q::kEnumList, "Only jobs in these states", -1, v1::JobState_descriptor()},
       {"label", Q::kLabels, "Only jobs with this label (key=value)"},
       {"owner", Q::kString, "Only jobs of this owner (a user sees only their own)"},
       {"page_size", Q::kInt32, "At most this many (0: the default)", 0},
       {"page_token", Q::kString, "next_page_token of the previous page"}},
      [this](Call& c) { ListJobs(c); }};
  own["GetJob"] = {{}, [this](Call& c) {
                     Unary(c, &DhpService::GetJob, [&](v1::GetJobRequest& r) {
                       r.set_job_id(c.id);
                       return absl::OkStatus();
                     });
                   }};
  own["GetLogs"] = {
      {{"attempt", Q::kInt32, "The attempt (0: the current one)", 0},
       {"rank", Q::kInt32List, "These ranks (none: every rank with output)", 0},
       {"offset", Q::kInt64List, "Per rank, in the order of rank: start at this byte", 0},
       {"max_bytes", Q::kInt32, "At most this many bytes per rank", 0}},
      [this](Call& c) { GetLogs(c); }};
  own["GetExport"] = {{}, [this](Call& c) {
                        Unary(c, &DhpService::GetExport, [&](v1::GetExportRequest& r) {
                          r.set_id(c.id);
                          return absl::OkStatus();
                        });
                      }};
  own["ListExports"] = {{}, [this](Call& c) {
                          Unary(c, &DhpService::ListExports, [&](v1::ListExportsRequest& r) {
                            r.set_job_id(c.id);
                            return absl::OkStatus();
                          });
                        }};
  own["ListNodes"] = {{{"page_size", Q::kInt32, "At most this many (0: the default)", 0},
                       {"page_token", Q::kString, "next_page_token of the previous page"}},
                      [this](Call& c) {
                        Unary(c, &DhpService::ListNodes, [&](v1::ListNodesRequest& req) {
                          for (const auto& [key, value] : c.query) {
                            if (key == "page_size") {
                              absl::StatusOr<int32_t> n = ParseIntParam<int32_t>(key, value);
                              if (!n.ok()) return n.status();
                              req.set_page_size(*n);
                            } else if (key == "page_token") {
                              req.set_page_token(value);
                            }
                          }
                          return absl::OkStatus();
                        });
                      }};
  own["WatchJob"] = {{after, follow}, [this](Call& c) { Watch(c, c.id); }};
  own["KvGet"] = {{}, [this](Call& c) { WaitCall(c, &DhpService::KvGetAsync); }};
  own["KvWait"] = {{}, [this](Call& c) { WaitCall(c, &DhpService::KvWaitAsync); }};
  // Every unary method, in the table's order; by default a POST whose body is the request.
#define DHP_REST_ROUTE(S, M, A, V, P, D) \
  AddMethod(#M, own, [this](Call& c) { BodyCall(c, &DhpService::M); });
  DHP_UNARY_METHODS(DHP_REST_ROUTE)
#undef DHP_REST_ROUTE
  AddMethod("WatchJob", own, nullptr);
  for (Route& route : routes_) {  // the ids these return, for /openapi.json's links
    if (route.op.rpc == "SubmitJob") {
      route.op.provides_id_field = "job_id";
      route.op.provides_id_pointer = "/job/id";
    } else if (route.op.rpc == "RegisterNode") {
      route.op.provides_id_field = "node_id";
      route.op.provides_id_pointer = "/node_id";
    } else if (route.op.rpc == "ExportCheckpoint") {
      route.op.provides_id_field = "id";
      route.op.provides_id_pointer = "/export/id";
    }
  }
  Add(V::get, "/v1/events", "WatchJob", "The events of all jobs and nodes", {after, follow},
      [this](Call& c) { Watch(c, ""); });
  routes_.back().op.operation_id = "WatchEvents";
  Add(V::get, "/healthz", "Healthz", "200 ok, or 503 and the reason", {}, [this](Call& c) {
    const absl::Status health = service_.Health();
    if (health.ok()) {
      c.responder.Respond(http::status::ok, "text/plain; charset=utf-8", "ok\n");
    } else {
      c.responder.Respond(http::status::service_unavailable, "text/plain; charset=utf-8",
                          std::string(health.message()) + "\n");
    }
  });
  Add(V::get, "/metrics", "Metrics", "Prometheus text format 0.0.4", {}, [this](Call& c) {
    c.responder.Respond(http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                        service_.MetricsText());
  });
  Add(V::get, "/openapi.json", "OpenApi", "This document (OpenAPI 3.0)", {},
      [this](Call& c) { c.responder.Respond(http::status::ok, kJson, openapi_); });
}

void RestGateway::Router::SubmitJob(Call& c) {
  const std::optional<BodyFormat> format = FormatOrRespond(c.request, c.responder, true);
  if (!format) return;
  Unary(c, &DhpService::SubmitJob, [&](v1::SubmitJobRequest& req) {
    const std::string& body = c.request.body();
    if (*format == BodyFormat::kYaml) {
      // The spec is read where every spec is (spec_text); bytes that are not UTF-8 are
      // refused here, naming the field, since gRPC could not carry them in spec_text.
      if (!Utf8Error(body).empty()) {
        v1::JobSpec spec;
        const absl::Status s = ParseProtoYaml(body, &spec);
        return absl::InvalidArgumentError(absl::StrCat("request body (YAML): ", s.message()));
      }
      req.set_spec_text(body);
    } else {
      absl::Status s = ParseJsonBody(body, &req);
      if (!s.ok()) return s;
    }
    for (const auto& [key, value] : c.query) {
      if (key != "dry_run") continue;
      absl::StatusOr<bool> dry_run = ParseBoolParam(key, value);
      if (!dry_run.ok()) return dry_run.status();
      req.set_dry_run(*dry_run);
    }
    return absl::OkStatus();
  });
}

void RestGateway::Router::ListJobs(Call& c) {
  Unary(c, &DhpService::ListJobs, [&](v1::ListJobsRequest& req) {
    for (const auto& [key, value] : c.query) {
      if (key == "state") {
        for (absl::string_view piece : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
          piece = absl::StripAsciiWhitespace(piece);
          const std::optional<int> state =
              ParseEnumName(v1::JobState_descriptor(), std::string(piece));
          if (!state.has_value() || *state == v1::JOB_STATE_UNSPECIFIED) {
            return absl::InvalidArgumentError(
                absl::StrCat("query parameter state: unknown job state \"", piece, "\"; one of ",
                             EnumChoices(v1::JobState_descriptor())));
          }
          req.add_states(static_cast<v1::JobState>(*state));
        }
      } else if (key == "label") {
        const size_t eq = value.find('=');
        if (eq == std::string::npos || eq == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "query parameter label: expected key=value (e.g. label=team=vision), got \"", value,
              "\""));
        }
        (*req.mutable_labels())[value.substr(0, eq)] = value.substr(eq + 1);
      } else if (key == "page_size") {
        absl::StatusOr<int32_t> n = ParseIntParam<int32_t>(key, value);
        if (!n.ok()) return n.status();
        req.set_page_size(*n);
      } else if (key == "page_token") {
        req.set_page_token(value);
      } else if (key == "owner") {
        req.set_owner(value);
      }
    }
    return absl::OkStatus();
  });
}

void RestGateway::Router::GetLogs(Call& c) {
  // Only the parsing is here: the checks of the values are the controller's, for both
  // transports (Controller::GetLogs).
  Unary(c, &DhpService::GetLogs, [&](v1::GetLogsRequest& req) {
    req.set_job_id(c.id);
    for (const auto& [key, value] : c.query) {
      if (key == "attempt" || key == "max_bytes") {
        absl::StatusOr<int32_t> n = ParseIntParam<int32_t>(key, value);
        if (!n.ok()) return n.status();
        key == "attempt" ? req.set_attempt(*n) : req.set_max_bytes(*n);
      } else if (key == "rank" || key == "offset") {
        for (absl::string_view piece : absl::StrSplit(value, ',')) {
          const std::string item(absl::StripAsciiWhitespace(piece));
          if (key == "rank") {
            absl::StatusOr<int32_t> n = ParseIntParam<int32_t>(key, item);
            if (!n.ok()) return n.status();
            req.add_ranks(*n);
          } else {
            absl::StatusOr<int64_t> n = ParseIntParam<int64_t>(key, item);
            if (!n.ok()) return n.status();
            req.add_offsets(*n);
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

void RestGateway::Router::Watch(Call& c, const std::string& job_id) {
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  for (const auto& [key, value] : c.query) {
    if (key == "after") {
      absl::StatusOr<int64_t> after = ParseIntParam<int64_t>(key, value);
      if (!after.ok()) return SendError(c.responder, after.status());
      req.set_after_event_id(*after);
    } else if (key == "follow") {
      absl::StatusOr<bool> follow = ParseBoolParam(key, value);
      if (!follow.ok()) return SendError(c.responder, follow.status());
      req.set_follow(*follow);
    }
  }
  NdjsonSink sink(c.responder);
  *c.reached_service = true;
  const absl::Status status = authz_.Watch(c.authorization, req, sink);
  sink.Finish(status);
}

void RestGateway::Router::Handle(const HttpRequest& request, HttpResponder& responder) {
  const Clock::time_point start = Clock::now();
  std::string_view route_name = "Unknown";
  bool reached_service = false;
  const std::string_view raw_target(request.target().data(), request.target().size());
  absl::StatusOr<RequestTarget> target = ParseRequestTarget(raw_target);
  if (!target.ok()) {
    SendError(responder, absl::InvalidArgumentError(
                             absl::StrCat("bad request target: ", target.status().message())));
  } else {
    absl::string_view path = target->path;
    if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
    const std::vector<absl::string_view> parts = absl::StrSplit(path.substr(1), '/');
    const Route* match = nullptr;
    absl::string_view captured;
    std::vector<std::string> allowed;
    for (const Route& route : routes_) {
      absl::string_view id;
      if (!Match(route, parts, &id)) continue;
      if (route.method == request.method()) {
        match = &route;
        captured = id;
        break;
      }
      allowed.push_back(VerbName(route.method));
    }
    const std::string method = VerbName(request.method());
    if (match == nullptr && allowed.empty()) {
      SendError(responder,
                absl::NotFoundError(absl::StrCat("no such route: ", method, " ", target->path)));
    } else if (match == nullptr) {
      const std::string allow = absl::StrJoin(allowed, ", ");
      responder.Respond(
          http::status::method_not_allowed, kJson,
          StatusToJson(absl::UnimplementedError(absl::StrCat(
              "method ", method, " is not allowed on ", target->path, "; allowed: ", allow))) +
              "\n",
          {{"Allow", allow}});
    } else {
      route_name = match->op.rpc;
      const auto authorization = request[http::field::authorization];
      Call call{request, responder, "", target->query, false, &reached_service, match->op.rpc,
                std::string_view(authorization.data(), authorization.size())};
      absl::Status status;
      absl::StatusOr<std::string> id =
          PercentDecode(std::string_view(captured.data(), captured.size()), false);
      if (!id.ok())
        status = id.status();
      else
        call.id = *std::move(id);
      if (status.ok() && match->op.needs_auth) {  // /healthz, /metrics, /openapi.json: no token
        status = auth_.Check(call.authorization);  // who may call what: authz_, per call
      }
      // Text from the path and the query becomes proto strings: UTF-8 only, as in bodies.
      if (status.ok()) status = CheckUtf8("path: the id", call.id);
      for (const auto& [key, value] : target->query) {
        if (!status.ok() || !match->op.needs_auth) break;
        status = CheckUtf8("query parameter name", key);
        if (status.ok()) status = CheckUtf8("query parameter " + key, value);
      }
      for (const auto& [key, value] : target->query) {
        if (!status.ok() || !match->op.needs_auth) break;
        if (key == "pretty") {
          absl::StatusOr<bool> pretty = ParseBoolParam(key, value);
          if (!pretty.ok())
            status = pretty.status();
          else
            call.pretty = *pretty;
        } else if (std::find(match->params.begin(), match->params.end(), key) ==
                   match->params.end()) {
          const std::vector<std::string>& known = match->params;
          status = absl::InvalidArgumentError(
              absl::StrCat("unknown query parameter \"", key, "\" for ", match->op.rpc, " (",
                           method, " ", target->path, "); known: ", absl::StrJoin(known, ", ")));
        }
      }
      if (status.ok()) {
        match->handle(call);
      } else {
        SendError(responder, status);
      }
    }
  }
  if (observer_) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    observer_(route_name, responder.status_code(), seconds, reached_service);
  }
}

// ---- RestGateway ---------------------------------------------------------------------------

RestGateway::RestGateway(DhpService& service, RestGatewayOptions options,
                         RestRequestObserver observer)
    : router_(std::make_unique<Router>(service, options.auth, std::move(observer))) {
  HttpServerOptions http;
  http.address = options.address;
  http.port = options.port;
  http.max_body_bytes = options.max_body_bytes;
  http.max_connections = options.max_connections;
  http.reserved_paths = {"/healthz", "/metrics"};
  http.idle_timeout = options.idle_timeout;
  http.header_timeout = options.header_timeout;
  http.body_timeout = options.body_timeout;
  http.tls = options.tls;
  Router* router = router_.get();
  http.check_headers = [router](const HttpRequest& request) {
    return router->CheckHeaders(request);
  };
  http.rejection = [router](HttpStatus status, const std::string& message) {
    return router->Rejected(status, message);
  };
  server_ = std::make_unique<HttpServer>(
      std::move(http), [router](const HttpRequest& request, HttpResponder& responder) {
        router->Handle(request, responder);
      });
}

RestGateway::~RestGateway() { Stop(); }

absl::Status RestGateway::Start() { return server_->Start(); }

uint16_t RestGateway::port() const { return server_->port(); }

void RestGateway::Stop() { server_->Stop(); }

}  // namespace dhp::api
