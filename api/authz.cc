#include "api/authz.h"

#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/heartbeat_limits.h"
#include "google/protobuf/arena.h"

namespace dhp::api {
namespace {

// Debian's Abseil has its own string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

RequestScope JobScope(std::string_view job_id, int32_t attempt = -1) {
  RequestScope scope;
  scope.job_id = job_id;
  scope.attempt = attempt;
  scope.has_job = true;
  return scope;
}

RequestScope NodeScope(std::string_view node_id) {
  RequestScope scope;
  scope.node_id = node_id;
  scope.has_node = true;
  return scope;
}

absl::Status Denied(const Identity& who, std::string_view method, std::string_view why) {
  return absl::PermissionDeniedError(absl::StrCat(Sv(method), ": ", Sv(RoleName(who.role)), " \"",
                                                  who.name, "\" ", Sv(why)));
}

// An event stream of the jobs a user owns (and node events): other jobs' events are dropped.
class OwnJobsSink final : public EventSink {
 public:
  OwnJobsSink(EventSink& inner, DhpService& service, std::string owner)
      : inner_(inner), service_(service), owner_(std::move(owner)) {}

  bool Write(const v1::Event& event) override {
    if (!event.job_id().empty() && !Owns(event.job_id())) return !inner_.IsCancelled();
    return inner_.Write(event);
  }
  bool IsCancelled() const override { return inner_.IsCancelled(); }

 private:
  bool Owns(const std::string& job_id) {
    auto it = owns_.find(job_id);
    if (it != owns_.end()) return it->second;
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::GetJobResponse resp;
    const bool owns = service_.GetJob(req, &resp).ok() && resp.job().owner() == owner_;
    owns_.emplace(job_id, owns);
    return owns;
  }

  EventSink& inner_;
  DhpService& service_;
  const std::string owner_;
  std::map<std::string, bool> owns_;  // job id -> owned by owner_; the stream's thread only
};

}  // namespace

RequestScope ScopeOf(const google::protobuf::Message&) { return {}; }
RequestScope ScopeOf(const v1::GetJobRequest& req) { return JobScope(req.job_id()); }
RequestScope ScopeOf(const v1::CancelJobRequest& req) { return JobScope(req.job_id()); }
RequestScope ScopeOf(const v1::ResumeJobRequest& req) { return JobScope(req.job_id()); }
RequestScope ScopeOf(const v1::CheckpointJobRequest& req) { return JobScope(req.job_id()); }
RequestScope ScopeOf(const v1::ExportCheckpointRequest& req) { return JobScope(req.job_id()); }
RequestScope ScopeOf(const v1::ListExportsRequest& req) { return JobScope(req.job_id()); }
RequestScope ScopeOf(const v1::GetLogsRequest& req) { return JobScope(req.job_id()); }
RequestScope ScopeOf(const v1::WatchJobRequest& req) {
  // The all-jobs stream (no job id) is filtered for users instead.
  return req.job_id().empty() ? RequestScope{} : JobScope(req.job_id());
}
RequestScope ScopeOf(const v1::DrainNodeRequest& req) { return NodeScope(req.node_id()); }
RequestScope ScopeOf(const v1::UncordonNodeRequest& req) { return NodeScope(req.node_id()); }
RequestScope ScopeOf(const v1::RegisterNodeRequest& req) {
  // The controller names a node by its id, or by its hostname when the id is empty.
  return NodeScope(req.node().id().empty() ? req.node().hostname() : req.node().id());
}
RequestScope ScopeOf(const v1::HeartbeatRequest& req) { return NodeScope(req.node_id()); }
RequestScope ScopeOf(const v1::AppendLogsRequest& req) { return NodeScope(req.node_id()); }
RequestScope ScopeOf(const v1::ReportProgressRequest& req) {
  return JobScope(req.job_id(), req.attempt());
}
RequestScope ScopeOf(const v1::ReportCheckpointRequest& req) {
  return JobScope(req.job_id(), req.attempt());
}
RequestScope ScopeOf(const v1::RejectCheckpointRequest& req) {
  return JobScope(req.job_id(), req.attempt());
}
RequestScope ScopeOf(const v1::KvScope& scope) { return JobScope(scope.job_id(), scope.attempt()); }

absl::Status Authorizer::Check(const Identity& who, std::string_view method,
                               const RequestScope& scope) const {
  if (who.role == Role::kAdmin) return absl::OkStatus();
  const MethodInfo* info = FindMethod(method);
  if (info == nullptr) return Denied(who, method, "may not call an unknown method");
  switch (info->access) {
    case Access::kRead:
      if (who.role == Role::kViewer) return absl::OkStatus();
      // A rank reads its own job (GetJob: the spec, its run, the checkpoint to resume from).
      if (who.role == Role::kRank && scope.has_job && scope.job_id == who.job_id) {
        return absl::OkStatus();
      }
      if (who.role != Role::kUser) return Denied(who, method, "may not read jobs or nodes");
      return scope.has_job ? CheckOwner(who, method, scope.job_id) : absl::OkStatus();
    case Access::kSubmit:
      if (who.role == Role::kUser) return absl::OkStatus();
      return Denied(who, method, "may not submit jobs (roles user or admin may)");
    case Access::kOwnJob:
      if (who.role != Role::kUser) {
        return Denied(who, method, "may not change jobs (roles user or admin may)");
      }
      return CheckOwner(who, method, scope.job_id);
    case Access::kNode:
      if (who.role != Role::kNode) return Denied(who, method, "is not a node's agent");
      if (scope.node_id != who.name) {
        return Denied(who, method,
                      absl::StrCat("may act only for its own node, not \"", Sv(scope.node_id), "\""));
      }
      return absl::OkStatus();
    case Access::kRank:
      if (who.role != Role::kRank) return Denied(who, method, "is not a rank of a run");
      if (scope.job_id != who.job_id || scope.attempt != who.attempt) {
        return Denied(who, method,
                      absl::StrCat("may act only for its own job and attempt, not \"",
                                   Sv(scope.job_id), "/", scope.attempt, "\""));
      }
      return absl::OkStatus();
    case Access::kRelay:
      if (who.role == Role::kNode) return absl::OkStatus();
      return Denied(who, method, "is not a node's agent (a relay holds a node's token)");
    case Access::kAdmin:
      return Denied(who, method, "may not change nodes (only admins may)");
  }
  return Denied(who, method, "has no access");
}

absl::Status Authorizer::CheckOwner(const Identity& who, std::string_view method,
                                    std::string_view job_id) const {
  v1::GetJobRequest req;
  req.set_job_id(std::string(job_id));
  v1::GetJobResponse resp;
  if (absl::Status s = service_.GetJob(req, &resp); !s.ok()) return s;
  if (resp.job().owner() == who.name) return absl::OkStatus();
  return Denied(who, method, absl::StrCat("does not own job ", Sv(job_id)));
}

absl::Status Authorizer::Prepare(std::string_view authorization,
                                 v1::SubmitJobRequest* req) const {
  absl::StatusOr<Identity> who = auth_.Authenticate(authorization);
  if (!who.ok()) return who.status();
  if (absl::Status s = Restrict(*who, req); !s.ok()) return s;
  return service_.PrepareSubmitJob(req);
}

void Authorizer::SubmitAsync(std::string_view authorization, const v1::SubmitJobRequest& req,
                             v1::SubmitJobResponse* resp, DhpService::Done done) const {
  absl::StatusOr<Identity> who = auth_.Authenticate(authorization);
  if (!who.ok()) return done(who.status());
  v1::SubmitJobRequest restricted = req;
  if (absl::Status s = Restrict(*who, &restricted); !s.ok()) return done(s);
  service_.SubmitJobAsync(restricted, resp, std::move(done), nullptr);
}

absl::Status Authorizer::Restrict(const Identity& who, v1::SubmitJobRequest* req) const {
  if (who.role == Role::kAdmin) {
    // An admin may submit for anyone; by default the job is theirs.
    if (req->owner().empty()) req->set_owner(who.name);
    return absl::OkStatus();
  }
  if (absl::Status s = Check(who, "SubmitJob", {}); !s.ok()) return s;
  if (!req->owner().empty() && req->owner() != who.name) {
    return Denied(who, "SubmitJob", absl::StrCat("may not submit for \"", req->owner(), "\""));
  }
  req->set_owner(who.name);
  return absl::OkStatus();
}

absl::Status Authorizer::Restrict(const Identity& who, v1::ListJobsRequest* req) const {
  if (absl::Status s = Check(who, "ListJobs", {}); !s.ok()) return s;
  if (who.role != Role::kUser) return absl::OkStatus();
  if (!req->owner().empty() && req->owner() != who.name) {
    return Denied(who, "ListJobs", absl::StrCat("may list only their own jobs, not \"",
                                                req->owner(), "\"'s"));
  }
  req->set_owner(who.name);
  return absl::OkStatus();
}

absl::Status Authorizer::RelayHeartbeats(const v1::HeartbeatBatchRequest& req,
                                         v1::HeartbeatBatchResponse* resp) const {
  if (absl::Status s = CheckBatchLimits(req); !s.ok()) return s;
  // Each heartbeat is checked as its agent's own Heartbeat call; the refused are answered here
  // and the rest go to the service together, in order.
  std::vector<int> allowed;  // their indices in req
  allowed.reserve(req.heartbeats_size());
  resp->mutable_answers()->Reserve(req.heartbeats_size());
  for (int i = 0; i < req.heartbeats_size(); ++i) {
    const v1::RelayedHeartbeat& entry = req.heartbeats(i);
    v1::HeartbeatAnswer* answer = resp->add_answers();
    absl::StatusOr<Identity> who = auth_.Authenticate(entry.authorization());
    absl::Status s =
        who.ok() ? Check(*who, "Heartbeat", ScopeOf(entry.heartbeat())) : who.status();
    if (s.ok()) {
      allowed.push_back(i);
      continue;
    }
    answer->set_code(static_cast<int>(s.code()));
    answer->set_message(std::string(s.message()));
  }
  // On resp's arena (if it has one), so that each answer moves into resp without a copy.
  google::protobuf::Arena* const arena = resp->GetArena();
  v1::HeartbeatBatchResponse& served =
      *google::protobuf::Arena::CreateMessage<v1::HeartbeatBatchResponse>(arena);
  std::unique_ptr<v1::HeartbeatBatchResponse> owned(arena == nullptr ? &served : nullptr);
  if (static_cast<int>(allowed.size()) == req.heartbeats_size()) {
    if (absl::Status s = service_.HeartbeatBatch(req, &served); !s.ok()) return s;
  } else if (!allowed.empty()) {
    v1::HeartbeatBatchRequest some;
    for (int i : allowed) *some.add_heartbeats() = req.heartbeats(i);
    if (absl::Status s = service_.HeartbeatBatch(some, &served); !s.ok()) return s;
  }
  if (served.answers_size() != static_cast<int>(allowed.size())) {
    return absl::InternalError(absl::StrCat("HeartbeatBatch: ", served.answers_size(),
                                            " answers to ", allowed.size(), " heartbeats"));
  }
  for (size_t k = 0; k < allowed.size(); ++k) {
    v1::HeartbeatAnswer* answer = resp->mutable_answers(allowed[k]);
    *answer = std::move(*served.mutable_answers(static_cast<int>(k)));
    if (answer->code() == 0) AddRankTokens(answer->mutable_response());
  }
  return absl::OkStatus();
}

void Authorizer::AddRankTokens(v1::HeartbeatResponse* resp) const {
  if (!auth_.enabled()) return;  // no credentials to hand out
  for (v1::RankLaunch& launch : *resp->mutable_ranks()) {
    launch.set_credential(auth_.RankToken(launch.job_id(), launch.attempt()));
  }
}

absl::Status Authorizer::Watch(std::string_view authorization, const v1::WatchJobRequest& req,
                               EventSink& sink) const {
  absl::StatusOr<Identity> who = auth_.Authenticate(authorization);
  if (!who.ok()) return who.status();
  if (absl::Status s = Check(*who, "WatchJob", ScopeOf(req)); !s.ok()) return s;
  if (who->role == Role::kUser && req.job_id().empty()) {
    OwnJobsSink own(sink, service_, who->name);
    return service_.WatchJob(req, own);
  }
  return service_.WatchJob(req, sink);
}

}  // namespace dhp::api
