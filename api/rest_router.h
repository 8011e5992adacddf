// The REST gateway's router (RestGateway::Router) and the helpers its handlers share. Internal
// to the gateway: rest_gateway.cc (routing, the route table, dispatch) and rest_handlers.cc
// (the handlers whose requests come from the query or the body format) include it.
#ifndef DHP_API_REST_ROUTER_H_
#define DHP_API_REST_ROUTER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "api/authz.h"
#include "api/openapi.h"
#include "api/rest_body.h"
#include "api/rest_gateway.h"
#include "api/rest_wait.h"
#include "common/proto_yaml.h"

namespace dhp::api {

namespace http = boost::beast::http;

namespace rest_internal {

using QueryParams = std::vector<std::pair<std::string, std::string>>;

inline constexpr char kJson[] = "application/json";

// `field` set to the path's `id`, unless the body set it to another: INVALID_ARGUMENT naming
// both, so that a client's mistake is not applied to the path's job or node.
absl::Status SetFromPath(const char* field, std::string* value, const std::string& id);

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

// The status as the JSON error body, with its HTTP status.
void SendError(HttpResponder& responder, const absl::Status& status,
               const HttpHeaders& headers = {});
// The format of the request's body by its Content-Type (JSON when the body is empty); answers
// 415 and returns nullopt when the type is refused.
std::optional<BodyFormat> FormatOrRespond(const HttpRequest& request, HttpResponder& responder,
                                          bool yaml_allowed);
// INVALID_ARGUMENT "<what>: not valid UTF-8: ..." for text from the path or the query.
absl::Status CheckUtf8(const std::string& what, const std::string& text);
// A boolean query parameter: true/1/yes or false/0/no, else INVALID_ARGUMENT naming it.
absl::StatusOr<bool> ParseBoolParam(const std::string& name, const std::string& value);

template <typename Int>
absl::StatusOr<Int> ParseIntParam(const std::string& name, const std::string& value) {
  Int n;
  if (!absl::SimpleAtoi(value, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter ", name, ": expected an integer, got \"", value, "\""));
  }
  return n;
}

}  // namespace rest_internal

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
    return {rest_internal::kJson, StatusToJson(error) + "\n"};
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
    const rest_internal::QueryParams& query;
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
    if (!status.ok()) return rest_internal::SendError(call.responder, status);
    call.responder.Respond(http::status::ok, rest_internal::kJson,
                           ProtoToJson(resp, call.pretty) + "\n");
  }
  // A POST whose body is the request; the path id (if any) fills its job_id or node_id.
  template <typename Req, typename Resp>
  void BodyCall(Call& call, absl::Status (DhpService::*method)(const Req&, Resp*)) {
    if (!rest_internal::FormatOrRespond(call.request, call.responder, false)) return;
    Unary(call, method, [&](Req& req) {
      absl::Status s = ParseJsonBody(call.request.body(), &req);
      if (s.ok() && !call.id.empty()) s = rest_internal::SetIdField(req, call.id, 0);
      return s;
    });
  }
  // The same for a rendezvous wait: the connection's thread waits for it, and a client that
  // goes away meanwhile cancels it (api/rest_wait.h).
  template <typename Req, typename Resp>
  void WaitCall(Call& call, void (DhpService::*method)(const Req&, Resp*, DhpService::Done,
                                                       std::shared_ptr<CancelSignal>)) {
    if (!rest_internal::FormatOrRespond(call.request, call.responder, false)) return;
    Req req;
    if (absl::Status s = ParseJsonBody(call.request.body(), &req); !s.ok()) {
      return rest_internal::SendError(call.responder, s);
    }
    *call.reached_service = true;
    Resp resp;
    absl::Status status = AwaitUnlessGone(
        [&call] { return call.responder.ClientGone(); },
        [&](DhpService::Done done, std::shared_ptr<CancelSignal> cancel) {
          authz_.CallAsync(call.authorization, call.method, method, req, &resp, std::move(done),
                           std::move(cancel));
        });
    if (!status.ok()) return rest_internal::SendError(call.responder, status);
    call.responder.Respond(http::status::ok, rest_internal::kJson,
                           ProtoToJson(resp, call.pretty) + "\n");
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

}  // namespace dhp::api

#endif  // DHP_API_REST_ROUTER_H_
