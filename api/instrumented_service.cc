#include "api/instrumented_service.h"

#include <chrono>

#include "absl/status/status.h"

namespace dhp::api {

ApiMetrics::ApiMetrics(MetricsExposition& metrics)
    : requests(metrics.AddCounter("dhp_api_requests_total",
                                  "API requests by transport, method and status code.")),
      latency(metrics.AddHistogram("dhp_api_request_duration_seconds",
                                   "API request latency by transport, method and status code.")) {}

void ApiMetrics::Record(const std::string& transport, const std::string& method,
                        const std::string& code, double seconds) {
  const prometheus::Labels labels = {{"transport", transport}, {"method", method}, {"code", code}};
  requests.Add(labels).Increment();
  latency.Add(labels, LatencyBuckets()).Observe(seconds);
}

void CountGatewayAnswer(ApiMetrics& metrics, std::string_view route, int http_status,
                        double seconds) {
  if (http_status < 400) return;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  switch (http_status) {
    case 400:
    case 415:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case 401:
      code = absl::StatusCode::kUnauthenticated;
      break;
    case 404:
      code = absl::StatusCode::kNotFound;
      break;
    case 405:
      code = absl::StatusCode::kUnimplemented;
      break;
    case 408:
      code = absl::StatusCode::kDeadlineExceeded;
      break;
    case 413:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case 503:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      code = http_status >= 500 ? absl::StatusCode::kInternal : absl::StatusCode::kUnknown;
  }
  metrics.Record("rest", std::string(route), absl::StatusCodeToString(code), seconds);
}

InstrumentedService::InstrumentedService(DhpService& inner, ApiMetrics& metrics,
                                         std::string transport)
    : inner_(inner), metrics_(metrics), transport_(std::move(transport)) {}

template <typename F>
absl::Status InstrumentedService::Measure(const char* method, F&& call) {
  auto start = std::chrono::steady_clock::now();
  absl::Status s = call();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_.Record(transport_, method, absl::StatusCodeToString(s.code()), seconds);
  return s;
}

#define DHP_MEASURED(Method, Req, Resp)                                   \
  absl::Status InstrumentedService::Method(const Req& req, Resp resp) {   \
    return Measure(#Method, [&] { return inner_.Method(req, resp); });    \
  }

DHP_MEASURED(SubmitJob, v1::SubmitJobRequest, v1::SubmitJobResponse*)
DHP_MEASURED(GetJob, v1::GetJobRequest, v1::GetJobResponse*)
DHP_MEASURED(ListJobs, v1::ListJobsRequest, v1::ListJobsResponse*)
DHP_MEASURED(CancelJob, v1::CancelJobRequest, v1::CancelJobResponse*)
DHP_MEASURED(ResumeJob, v1::ResumeJobRequest, v1::ResumeJobResponse*)
DHP_MEASURED(WatchJob, v1::WatchJobRequest, EventSink&)
DHP_MEASURED(ListNodes, v1::ListNodesRequest, v1::ListNodesResponse*)
DHP_MEASURED(RegisterNode, v1::RegisterNodeRequest, v1::RegisterNodeResponse*)
DHP_MEASURED(Heartbeat, v1::HeartbeatRequest, v1::HeartbeatResponse*)
DHP_MEASURED(KvSet, v1::KvSetRequest, v1::KvSetResponse*)
DHP_MEASURED(KvGet, v1::KvGetRequest, v1::KvGetResponse*)
DHP_MEASURED(KvAdd, v1::KvAddRequest, v1::KvAddResponse*)
DHP_MEASURED(KvWait, v1::KvWaitRequest, v1::KvWaitResponse*)
DHP_MEASURED(KvCheck, v1::KvCheckRequest, v1::KvCheckResponse*)
DHP_MEASURED(KvDelete, v1::KvDeleteRequest, v1::KvDeleteResponse*)
DHP_MEASURED(ReportProgress, v1::ReportProgressRequest, v1::ReportProgressResponse*)
DHP_MEASURED(GetLogs, v1::GetLogsRequest, v1::GetLogsResponse*)
DHP_MEASURED(AppendLogs, v1::AppendLogsRequest, v1::AppendLogsResponse*)
DHP_MEASURED(ReportCheckpoint, v1::ReportCheckpointRequest, v1::ReportCheckpointResponse*)
DHP_MEASURED(RejectCheckpoint, v1::RejectCheckpointRequest, v1::RejectCheckpointResponse*)

#undef DHP_MEASURED

absl::Status InstrumentedService::Health() {
  return Measure("Health", [&] { return inner_.Health(); });
}

}  // namespace dhp::api
