// DhpClient: a C++ client for the controller's gRPC API, used by dhpctl, the worker agent,
// ranks, tests and benchmarks.
//
// Every call has a deadline (default 30 s; Kv waits add their own timeout) and returns the
// server's status unchanged, so callers see the same INVALID_ARGUMENT message the server wrote.
// An unreachable server is UNAVAILABLE naming the address. Thread-safe: one client may be used
// from many threads (gRPC channels and stubs are).
#ifndef DHP_API_CLIENT_H_
#define DHP_API_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "api/tls.h"
#include "dhp/v1/service.grpc.pb.h"

namespace dhp::api {

class DhpClient {
 public:
  // `target` is host:port. Does not connect until the first call. A non-empty `token` is
  // sent as `authorization: Bearer <token>` with every call. With `tls.ca` set the channel is
  // TLS, checking the server's certificate against that CA (and presenting `tls.cert` when
  // set); the server's certificate must name the host of `target`.
  explicit DhpClient(const std::string& target, int default_timeout_ms = 30000,
                     std::string token = "", const TlsPems& tls = TlsPems());

  const std::string& target() const { return target_; }

  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(const v1::SubmitJobRequest& req);
  absl::StatusOr<v1::GetJobResponse> GetJob(const v1::GetJobRequest& req);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req);
  absl::StatusOr<v1::CancelJobResponse> CancelJob(const v1::CancelJobRequest& req);
  absl::StatusOr<v1::ResumeJobResponse> ResumeJob(const v1::ResumeJobRequest& req);
  // Streams events into `on_event` until the server ends the stream or `on_event` returns
  // false (which cancels the call). Has no deadline.
  absl::Status WatchJob(const v1::WatchJobRequest& req,
                        const std::function<bool(const v1::Event&)>& on_event);

  absl::StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& req);

  absl::StatusOr<v1::RegisterNodeResponse> RegisterNode(const v1::RegisterNodeRequest& req);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req);
  absl::StatusOr<v1::KvSetResponse> KvSet(const v1::KvSetRequest& req);
  absl::StatusOr<v1::KvGetResponse> KvGet(const v1::KvGetRequest& req);
  absl::StatusOr<v1::KvAddResponse> KvAdd(const v1::KvAddRequest& req);
  absl::StatusOr<v1::KvWaitResponse> KvWait(const v1::KvWaitRequest& req);
  absl::StatusOr<v1::KvCheckResponse> KvCheck(const v1::KvCheckRequest& req);
  absl::StatusOr<v1::KvDeleteResponse> KvDelete(const v1::KvDeleteRequest& req);
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest& req);
  absl::StatusOr<v1::GetLogsResponse> GetLogs(const v1::GetLogsRequest& req);
  absl::StatusOr<v1::AppendLogsResponse> AppendLogs(const v1::AppendLogsRequest& req);
  absl::StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(
      const v1::ReportCheckpointRequest& req);
  absl::StatusOr<v1::RejectCheckpointResponse> RejectCheckpoint(
      const v1::RejectCheckpointRequest& req);

 private:
  void Prepare(grpc::ClientContext* ctx, int timeout_ms) const;
  template <typename Stub, typename Req, typename Resp>
  absl::StatusOr<Resp> Call(Stub* stub,
                            grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                            const Req& req, int timeout_ms) const;

  std::string target_;
  int timeout_ms_;
  std::string authorization_;  // "Bearer <token>" or empty
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::NodeService::Stub> nodes_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
};

}  // namespace dhp::api

#endif  // DHP_API_CLIENT_H_
