// DhpService: every operation of the controller's API, independent of transport.
//
// The controller implements it once (controller/controller_service.h); the gRPC services
// (api/grpc_server.h) and the REST gateway (api/rest_gateway.h) are thin adapters over it, so
// both transports share validation, errors and behaviour. Implementations must be thread-safe:
// both transports call in from their own threads.
#ifndef DHP_API_SERVICE_H_
#define DHP_API_SERVICE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "dhp/v1/service.pb.h"

namespace dhp::api {

// Where a streaming call writes. Write returns false once the client has gone away; the
// implementation must then return promptly. IsCancelled lets a stream notice a vanished client
// while it is waiting for the next event.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual bool Write(const dhp::v1::Event& event) = 0;
  virtual bool IsCancelled() const = 0;
};

class DhpService {
 public:
  virtual ~DhpService() = default;

  // Jobs.
  virtual absl::Status SubmitJob(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp) = 0;
  virtual absl::Status GetJob(const v1::GetJobRequest& req, v1::GetJobResponse* resp) = 0;
  virtual absl::Status ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) = 0;
  virtual absl::Status CancelJob(const v1::CancelJobRequest& req, v1::CancelJobResponse* resp) = 0;
  virtual absl::Status ResumeJob(const v1::ResumeJobRequest& req, v1::ResumeJobResponse* resp) = 0;
  // Blocks while streaming; returns when the stream is complete or the sink reports a
  // vanished client.
  virtual absl::Status WatchJob(const v1::WatchJobRequest& req, EventSink& sink) = 0;
  virtual absl::Status GetLogs(const v1::GetLogsRequest& req, v1::GetLogsResponse* resp) = 0;

  // Nodes.
  virtual absl::Status ListNodes(const v1::ListNodesRequest& req, v1::ListNodesResponse* resp) = 0;

  // Worker-facing.
  virtual absl::Status RegisterNode(const v1::RegisterNodeRequest& req,
                                    v1::RegisterNodeResponse* resp) = 0;
  virtual absl::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) = 0;
  virtual absl::Status KvSet(const v1::KvSetRequest& req, v1::KvSetResponse* resp) = 0;
  virtual absl::Status KvGet(const v1::KvGetRequest& req, v1::KvGetResponse* resp) = 0;
  virtual absl::Status KvAdd(const v1::KvAddRequest& req, v1::KvAddResponse* resp) = 0;
  virtual absl::Status KvWait(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp) = 0;
  virtual absl::Status KvCheck(const v1::KvCheckRequest& req, v1::KvCheckResponse* resp) = 0;
  virtual absl::Status KvDelete(const v1::KvDeleteRequest& req, v1::KvDeleteResponse* resp) = 0;
  virtual absl::Status ReportProgress(const v1::ReportProgressRequest& req,
                                      v1::ReportProgressResponse* resp) = 0;
  virtual absl::Status AppendLogs(const v1::AppendLogsRequest& req,
                                  v1::AppendLogsResponse* resp) = 0;
  virtual absl::Status ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                        v1::ReportCheckpointResponse* resp) = 0;
  virtual absl::Status RejectCheckpoint(const v1::RejectCheckpointRequest& req,
                                        v1::RejectCheckpointResponse* resp) = 0;

  // Health for /healthz and grpc.health.v1: OK while the controller can serve.
  virtual absl::Status Health() = 0;
  // The Prometheus text exposition for /metrics.
  virtual std::string MetricsText() = 0;
};

}  // namespace dhp::api

#endif  // DHP_API_SERVICE_H_
