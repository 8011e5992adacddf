// Authorizer: the one place where both transports check who may call what, then call.
//
// Each call is authenticated (api/auth.h) and checked against its method's Access
// (api/methods.h):
//   admin    anything
//   viewer   kRead: every job, node and event
//   user     kRead and kOwnJob for the jobs they own (ListJobs and the all-jobs event stream
//            show only those; GetJob, GetLogs, WatchJob, CancelJob, ResumeJob, ExportCheckpoint
//            and GetExport of another's job are PERMISSION_DENIED); kSubmit, the job owned by
//            them
//   node     kNode for its own node id (RegisterNode's node.id or hostname, Heartbeat's and
//            AppendLogs' node_id)
//   node     kRelay (HeartbeatBatch) for any node: each relayed heartbeat is then checked with
//            its own credential as that agent's Heartbeat call, and a refused one is answered
//            in its place without stopping the others
//   rank     kRank for its own job and attempt (KV scope, progress, checkpoints), and kRead
//            of its own job (GetJob, GetLogs, WatchJob of that job id)
// Anything else is PERMISSION_DENIED naming the method, the role and what it lacks. A
// heartbeat's launch list gets each rank's token (RankLaunch.credential) when the controller
// has a rank key. Thread-safe if the service is.
#ifndef DHP_API_AUTHZ_H_
#define DHP_API_AUTHZ_H_

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "api/auth.h"
#include "api/methods.h"
#include "api/service.h"

namespace dhp::api {

// What a request is about, for the checks: a job (and attempt, for ranks) or a node.
struct RequestScope {
  std::string_view job_id;
  int32_t attempt = -1;  // -1: not part of the request
  std::string_view node_id;
  bool has_job = false;
  bool has_node = false;
};

class Authorizer {
 public:
  // `service` is called for owners' checks (GetJob) and must outlive this.
  Authorizer(const TokenAuth& auth, DhpService& service) : auth_(auth), service_(service) {}

  const TokenAuth& auth() const { return auth_; }

  // Authenticates `authorization`, checks `method`'s access for `req`, calls it.
  template <typename Req, typename Resp>
  absl::Status Call(std::string_view authorization, std::string_view method,
                    absl::Status (DhpService::*call)(const Req&, Resp*), const Req& req,
                    Resp* resp) const;
  // SubmitJob's stateless part, for gRPC's thread before the call is dispatched: the caller
  // authenticated, the request restricted to what they may submit, then
  // DhpService::PrepareSubmitJob. Call then checks the same again (cheaply) on the loop.
  absl::Status Prepare(std::string_view authorization, v1::SubmitJobRequest* req) const;
  absl::Status Watch(std::string_view authorization, const v1::WatchJobRequest& req,
                     EventSink& sink) const;
  // Call for the asynchronous methods (DhpService::KvGetAsync, KvWaitAsync): `done` gets the
  // refusal at once, or is handed to the method with `cancel`.
  template <typename Req, typename Resp>
  void CallAsync(std::string_view authorization, std::string_view method,
                 void (DhpService::*call)(const Req&, Resp*, DhpService::Done,
                                          std::shared_ptr<CancelSignal>),
                 const Req& req, Resp* resp, DhpService::Done done,
                 std::shared_ptr<CancelSignal> cancel) const;

  // DhpService::SubmitJobAsync as Call would run SubmitJob: `done` gets the refusal at once.
  void SubmitAsync(std::string_view authorization, const v1::SubmitJobRequest& req,
                   v1::SubmitJobResponse* resp, DhpService::Done done) const;

  // The checks alone, for a caller already known (tests use them too).
  absl::Status Check(const Identity& who, std::string_view method,
                     const RequestScope& scope) const;

 private:
  // A user's copy of SubmitJob and ListJobs: owned by them, only theirs.
  absl::Status Restrict(const Identity& who, v1::SubmitJobRequest* req) const;
  absl::Status Restrict(const Identity& who, v1::ListJobsRequest* req) const;
  // HeartbeatBatch once the relay may call it: every entry checked, the allowed applied.
  absl::Status RelayHeartbeats(const v1::HeartbeatBatchRequest& req,
                               v1::HeartbeatBatchResponse* resp) const;
  void AddRankTokens(v1::HeartbeatResponse* resp) const;
  absl::Status CheckOwner(const Identity& who, std::string_view method,
                          std::string_view job_id) const;

  const TokenAuth& auth_;
  DhpService& service_;
};

// What `req` is about (overloads for the requests that name a job or a node).
RequestScope ScopeOf(const google::protobuf::Message& req);
RequestScope ScopeOf(const v1::GetJobRequest& req);
RequestScope ScopeOf(const v1::CancelJobRequest& req);
RequestScope ScopeOf(const v1::ResumeJobRequest& req);
RequestScope ScopeOf(const v1::CheckpointJobRequest& req);
RequestScope ScopeOf(const v1::ExportCheckpointRequest& req);
RequestScope ScopeOf(const v1::ListExportsRequest& req);
RequestScope ScopeOf(const v1::DrainNodeRequest& req);
RequestScope ScopeOf(const v1::UncordonNodeRequest& req);
RequestScope ScopeOf(const v1::GetLogsRequest& req);
RequestScope ScopeOf(const v1::WatchJobRequest& req);
RequestScope ScopeOf(const v1::RegisterNodeRequest& req);
RequestScope ScopeOf(const v1::HeartbeatRequest& req);
RequestScope ScopeOf(const v1::AppendLogsRequest& req);
RequestScope ScopeOf(const v1::ReportProgressRequest& req);
RequestScope ScopeOf(const v1::ReportCheckpointRequest& req);
RequestScope ScopeOf(const v1::RejectCheckpointRequest& req);
RequestScope ScopeOf(const v1::KvScope& scope);
template <typename KvRequest>
auto ScopeOf(const KvRequest& req) -> decltype(ScopeOf(req.scope())) {
  return ScopeOf(req.scope());
}

template <typename Req, typename Resp>
absl::Status Authorizer::Call(std::string_view authorization, std::string_view method,
                              absl::Status (DhpService::*call)(const Req&, Resp*),
                              const Req& req, Resp* resp) const {
  absl::StatusOr<Identity> who = auth_.Authenticate(authorization);
  if (!who.ok()) return who.status();
  if constexpr (std::is_same_v<Req, v1::SubmitJobRequest> ||
                std::is_same_v<Req, v1::ListJobsRequest>) {
    Req restricted = req;
    if (absl::Status s = Restrict(*who, &restricted); !s.ok()) return s;
    return (service_.*call)(restricted, resp);
  } else {
    if (absl::Status s = Check(*who, method, ScopeOf(req)); !s.ok()) return s;
    if constexpr (std::is_same_v<Req, v1::HeartbeatBatchRequest>) {
      return RelayHeartbeats(req, resp);
    }
    absl::Status s = (service_.*call)(req, resp);
    if constexpr (std::is_same_v<Resp, v1::HeartbeatResponse>) {
      if (s.ok()) AddRankTokens(resp);
    }
    if constexpr (std::is_same_v<Resp, v1::GetExportResponse>) {
      // The request names only the export: a user may see it once it is known to be of
      // their own job.
      if (s.ok() && who->role == Role::kUser) {
        s = CheckOwner(*who, method, resp->export_().job_id());
        if (!s.ok()) resp->Clear();
      }
    }
    return s;
  }
}

template <typename Req, typename Resp>
void Authorizer::CallAsync(std::string_view authorization, std::string_view method,
                           void (DhpService::*call)(const Req&, Resp*, DhpService::Done,
                                                    std::shared_ptr<CancelSignal>),
                           const Req& req, Resp* resp, DhpService::Done done,
                           std::shared_ptr<CancelSignal> cancel) const {
  absl::StatusOr<Identity> who = auth_.Authenticate(authorization);
  if (!who.ok()) return done(who.status());
  if (absl::Status s = Check(*who, method, ScopeOf(req)); !s.ok()) return done(s);
  (service_.*call)(req, resp, std::move(done), std::move(cancel));
}

}  // namespace dhp::api

#endif  // DHP_API_AUTHZ_H_
