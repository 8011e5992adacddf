// RestGateway: the REST/JSON face of DhpService, served over HTTP/1.1 (api/http_server.h).
//
// Bodies and responses are the dhp.v1 request/response messages in the proto JSON mapping
// (proto field names; bodies may also use the lowerCamelCase JSON names). Bodies are read by
// protobuf's JSON parser (api/rest_body.h), as gRPC reads the binary form: an unknown key, a
// wrong type or text that is not UTF-8 is a 400 naming the field. The Content-Type picks the
// format: application/json (or none, or application/*+json) for JSON; YAML
// (application/yaml, text/yaml) only for a job spec; anything else is 415. A body without
// bytes needs no type. Text in the path and the query must be UTF-8 too (400 naming it).
// Ids in the path fill (and override) the id fields of the request.
//
//   POST /v1/jobs                    SubmitJob   JSON SubmitJobRequest; a YAML body
//                                                (Content-Type application/yaml or
//                                                text/yaml) is the spec, as spec_text.
//                                                ?dry_run=true
//   GET  /v1/jobs                    ListJobs    ?state=running (repeatable, or comma-separated;
//                                                short or full names) &label=team=vision
//                                                (repeatable) &owner=alice &page_size=N
//                                                &page_token=T
//   GET  /v1/jobs/{id}               GetJob
//   POST /v1/jobs/{id}:cancel        CancelJob   optional body {"reason": "..."}
//   POST /v1/jobs/{id}:resume        ResumeJob   optional body of layout fields, e.g.
//                                                {"text_degree": 2, "data_parallel_size": 2,
//                                                "placement": "PLACEMENT_SEPARATE"}
//   POST /v1/jobs/{id}:checkpoint    CheckpointJob
//   POST /v1/jobs/{id}:export        ExportCheckpoint  optional body {"checkpoint_id": N,
//                                                "dtype": "fp32"}
//   GET  /v1/jobs/{id}/exports       ListExports
//   GET  /v1/exports/{id}            GetExport
//   GET  /v1/jobs/{id}/events        WatchJob    ?after=N &follow=true
//   GET  /v1/events                  WatchJob    all jobs and nodes; ?after=N &follow=true
//   GET  /v1/jobs/{id}/logs          GetLogs     ?attempt=N (0 or absent: the current one)
//                                                &rank=R (repeatable, or comma-separated; none:
//                                                every rank with output) &offset=O (repeatable,
//                                                parallel to rank) &max_bytes=M. Chunk data is
//                                                base64 (proto JSON of bytes)
//   POST /v1/jobs/{id}/progress      ReportProgress
//   POST /v1/jobs/{id}/checkpoints   ReportCheckpoint
//   POST /v1/jobs/{id}/checkpoints:reject  RejectCheckpoint
//   GET  /v1/nodes                   ListNodes
//   POST /v1/nodes/{id}:drain        DrainNode
//   POST /v1/nodes/{id}:uncordon     UncordonNode
//   POST /v1/nodes:register          RegisterNode
//   POST /v1/nodes/{id}:heartbeat    Heartbeat
//   POST /v1/nodes/{id}/logs         AppendLogs  (node_id from the path)
//   POST /v1/kv:set|get|add|wait|check|delete   KvSet ... KvDelete
//   GET  /healthz                    Healthz     200 "ok", or 503 and the reason
//   GET  /metrics                    Metrics     Prometheus text, version 0.0.4
//   GET  /openapi.json               OpenApi     the OpenAPI 3.0 document of these routes,
//                                                built from this table and the dhp.v1
//                                                descriptors (api/openapi.h)
//
// The routes of the RPCs come from api/methods.h (verb, path, summary), and every call goes
// through api/authz.h (who may call what).
//
// Every /v1 route also takes ?pretty for indented JSON; other query parameters are refused
// (400 naming them), as are malformed values (page_size=abc, state=bogus, rank=x, more
// offsets than ranks).
//
// Watch streams are newline-delimited JSON (application/x-ndjson, chunked), one Event per
// line, flushed per event. Headers go out with the first event, or once the service has been
// waiting ~50 ms (it polls EventSink::IsCancelled while idle), so an error found before the
// first event (NOT_FOUND) is still a proper HTTP error. An error after that ends the stream
// with a line {"error": {"code": ..., "status": ..., "message": ...}}.
//
// Errors are {"code": <grpc code>, "status": "NOT_FOUND", "message": "..."} with the HTTP
// status of HttpStatusFor: INVALID_ARGUMENT 400, NOT_FOUND 404, ALREADY_EXISTS and
// FAILED_PRECONDITION 409, RESOURCE_EXHAUSTED 429, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// UNIMPLEMENTED 501, UNAVAILABLE 503, DEADLINE_EXCEEDED 504, others 500. An unknown path is
// 404, a known path with the wrong method 405 (with Allow), a body over the limit 413 (code
// RESOURCE_EXHAUSTED in the JSON), a body of another Content-Type 415 (INVALID_ARGUMENT), a
// request that is not HTTP 400. Messages stay valid UTF-8:
// bytes echoed from a request that are not are written as \xNN.
//
// Limits (HttpServer): a request's headers must arrive within header_timeout (10 s; also a new
// connection's first byte) and its body within body_timeout (60 s), else 408; with auth on, a
// request without the token is 401 before its body is read or 100 Continue is sent; past
// max_connections (1024), 16 more connections serve /healthz and /metrics only (503 else).
//
// Thread-safety: requests are served concurrently (one thread per connection), so the
// service and the observer are called from many threads at once. Start/Stop as HttpServer.
#ifndef DHP_API_REST_GATEWAY_H_
#define DHP_API_REST_GATEWAY_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "api/auth.h"
#include "api/http_server.h"
#include "api/service.h"

namespace dhp::api {

struct RestGatewayOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 0;                // 0: ephemeral; RestGateway::port() tells which
  size_t max_body_bytes = 4 << 20;  // 413 beyond
  // Past max_connections, 16 more are served for /healthz and /metrics only (HttpServer).
  size_t max_connections = 1024;
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(2)};
  std::chrono::milliseconds header_timeout{std::chrono::seconds(10)};  // 408 beyond
  std::chrono::milliseconds body_timeout{std::chrono::seconds(60)};    // 408 beyond
  TokenAuth auth;  // when enabled, /v1 routes need the bearer token (401, before any body)
  std::shared_ptr<boost::asio::ssl::context> tls;  // HTTPS only (MakeHttpTlsContext); null: HTTP
};

// Called once per request after it is answered (for streams: when the stream ends), with the
// route's RPC name ("SubmitJob", "WatchJob", ..., "Healthz", "Metrics", "OpenApi"; "Unknown"
// for 404/405 on unmatched routes; "Unrouted" for what the HTTP server refuses itself: 400,
// 401 before the body, 408, 413, 503), the HTTP status sent, the seconds spent, and whether
// the request reached the service (false: the gateway answered it, e.g. a bad query
// parameter, a body that does not parse, a missing token). Called concurrently.
using RestRequestObserver = std::function<void(std::string_view route_name, int http_status,
                                               double seconds, bool reached_service)>;

class RestGateway {
 public:
  // `service` must outlive the gateway. `observer` may be empty.
  RestGateway(DhpService& service, RestGatewayOptions options,
              RestRequestObserver observer = nullptr);
  ~RestGateway();  // Stops.
  RestGateway(const RestGateway&) = delete;
  RestGateway& operator=(const RestGateway&) = delete;

  // Binds and serves. UNAVAILABLE when the port cannot be bound.
  absl::Status Start();
  // The bound port (the real one when options.port was 0); 0 before Start.
  uint16_t port() const;
  // Stops accepting, disconnects clients (watch streams see IsCancelled), waits for handlers
  // still inside the service to return. Idempotent.
  void Stop();

 private:
  class Router;
  std::unique_ptr<Router> router_;
  std::unique_ptr<HttpServer> server_;
};

// The HTTP status for a Status code (see the table above); 200 for OK.
int HttpStatusFor(absl::StatusCode code);
// {"code": 5, "status": "NOT_FOUND", "message": "..."} for a non-OK status.
std::string StatusToJson(const absl::Status& status);

}  // namespace dhp::api

#endif  // DHP_API_REST_GATEWAY_H_
