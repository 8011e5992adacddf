// InstrumentedService: a DhpService decorator that counts every call and its latency.
//
//   dhp_api_requests_total{transport="grpc|rest",method="GetJob",code="OK"}
//   dhp_api_request_duration_seconds{transport,method,code}   (histogram)
//
// Each transport wraps the same inner service in its own decorator (same families, its own
// transport label), so both are measured identically. Thread-safe if the inner service is.
#ifndef DHP_API_INSTRUMENTED_SERVICE_H_
#define DHP_API_INSTRUMENTED_SERVICE_H_

#include <string>
#include <string_view>

#include "api/service.h"
#include "common/metrics_exposition.h"

namespace dhp::api {

struct ApiMetrics {
  explicit ApiMetrics(MetricsExposition& metrics);
  // Counts one answered call and its latency.
  void Record(const std::string& transport, const std::string& method, const std::string& code,
              double seconds);

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Histogram>& latency;
};

// Counts a REST request the gateway answered without calling the service (a bad query
// parameter, a body that does not parse, no token, an unknown route, a body too large; see
// RestRequestObserver) as transport "rest", method `route`, and the code of its HTTP status
// (400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND, 405 UNIMPLEMENTED,
// 408 DEADLINE_EXCEEDED, 413 RESOURCE_EXHAUSTED, 415 INVALID_ARGUMENT, 503 UNAVAILABLE).
// Answers below 400 are not counted (health, metrics and the OpenAPI document).
void CountGatewayAnswer(ApiMetrics& metrics, std::string_view route, int http_status,
                        double seconds);

class InstrumentedService : public DhpService {
 public:
  InstrumentedService(DhpService& inner, ApiMetrics& metrics, std::string transport);

  absl::Status SubmitJob(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp) override;
  absl::Status GetJob(const v1::GetJobRequest& req, v1::GetJobResponse* resp) override;
  absl::Status ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) override;
  absl::Status CancelJob(const v1::CancelJobRequest& req, v1::CancelJobResponse* resp) override;
  absl::Status ResumeJob(const v1::ResumeJobRequest& req, v1::ResumeJobResponse* resp) override;
  absl::Status WatchJob(const v1::WatchJobRequest& req, EventSink& sink) override;
  absl::Status GetLogs(const v1::GetLogsRequest& req, v1::GetLogsResponse* resp) override;
  absl::Status ListNodes(const v1::ListNodesRequest& req, v1::ListNodesResponse* resp) override;
  absl::Status RegisterNode(const v1::RegisterNodeRequest& req,
                            v1::RegisterNodeResponse* resp) override;
  absl::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) override;
  absl::Status KvSet(const v1::KvSetRequest& req, v1::KvSetResponse* resp) override;
  absl::Status KvGet(const v1::KvGetRequest& req, v1::KvGetResponse* resp) override;
  absl::Status KvAdd(const v1::KvAddRequest& req, v1::KvAddResponse* resp) override;
  absl::Status KvWait(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp) override;
  absl::Status KvCheck(const v1::KvCheckRequest& req, v1::KvCheckResponse* resp) override;
  absl::Status KvDelete(const v1::KvDeleteRequest& req, v1::KvDeleteResponse* resp) override;
  absl::Status ReportProgress(const v1::ReportProgressRequest& req,
                              v1::ReportProgressResponse* resp) override;
  absl::Status AppendLogs(const v1::AppendLogsRequest& req, v1::AppendLogsResponse* resp) override;
  absl::Status ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                v1::ReportCheckpointResponse* resp) override;
  absl::Status RejectCheckpoint(const v1::RejectCheckpointRequest& req,
                                v1::RejectCheckpointResponse* resp) override;
  absl::Status Health() override;
  std::string MetricsText() override { return inner_.MetricsText(); }

 private:
  template <typename F>
  absl::Status Measure(const char* method, F&& call);

  DhpService& inner_;
  ApiMetrics& metrics_;
  const std::string transport_;
};

}  // namespace dhp::api

#endif  // DHP_API_INSTRUMENTED_SERVICE_H_
