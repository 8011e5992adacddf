#include "api/rest_gateway.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
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
#include "api/rest_router.h"
#include "api/rest_wait.h"
#include "common/check.h"
#include "common/proto_enum.h"
#include "common/proto_yaml.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"

namespace dhp::api {
namespace {

using Clock = std::chrono::steady_clock;
using rest_internal::CheckUtf8;
using rest_internal::kJson;
using rest_internal::ParseBoolParam;
using rest_internal::ParseIntParam;
using rest_internal::SendError;

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
