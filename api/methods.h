// The controller's API, described once: every method with its gRPC service, its REST route and
// who may call it. The transports and the client expand this table instead of listing the
// methods again:
//   api/service.h               DhpService's pure virtual methods
//   api/instrumented_service.*  the counting decorator
//   api/grpc_server.cc          the three gRPC services
//   api/client.*                DhpClient's methods
//   api/rest_gateway.cc         the REST routes (verb, path, summary) and /openapi.json
//   api/authz.*                 who may call what (Access)
// Adding a unary RPC: the proto, one row here, the controller's implementation, and (when its
// REST form is not "a POST whose body is the request") a handler in rest_gateway.cc.
//
// DHP_UNARY_METHODS(X) calls X(Service, Method, Access, Verb, Path, Summary) once per unary
// method, where Service is the gRPC service (JobService, NodeService, WorkerService), Access a
// member of api::Access, Verb the REST verb (GET or POST) and Path its REST path ({id} is the
// job id under /v1/jobs/, the node id under /v1/nodes/ and the export id under /v1/exports/). WatchJob, the one streaming
// method, is DHP_STREAM_METHOD(X) with the same arguments; its second REST route, GET
// /v1/events (every job's events), is added by the gateway.
#ifndef DHP_API_METHODS_H_
#define DHP_API_METHODS_H_

#include <string_view>

namespace dhp::api {

// Who may call a method (api/authz.h). Admins may call everything.
enum class Access {
  kRead,    // viewers, users (their own jobs) and admins
  kSubmit,  // users and admins; the job's owner is the caller
  kOwnJob,  // a job's owner and admins (cancel, resume, checkpoint)
  kNode,    // an agent, for the node its credential names
  kRank,    // a rank, for the job and attempt its credential names
  kRelay,   // any node's agent (a heartbeat relay); what it relays is checked entry by entry
  kAdmin,   // admins only (node operations: drain, uncordon)
};

// clang-format off
#define DHP_UNARY_METHODS(X)                                                                      \
  X(JobService, SubmitJob, kSubmit, POST, "/v1/jobs", "Validate and submit a job")               \
  X(JobService, ListJobs, kRead, GET, "/v1/jobs", "Jobs, newest first")                          \
  X(JobService, GetJob, kRead, GET, "/v1/jobs/{id}", "A job with its runs and checkpoints")      \
  X(JobService, CancelJob, kOwnJob, POST, "/v1/jobs/{id}:cancel", "Cancel a job")                \
  X(JobService, ResumeJob, kOwnJob, POST, "/v1/jobs/{id}:resume",                                \
    "A new run from the latest checkpoint, optionally on a new layout")                           \
  X(JobService, CheckpointJob, kOwnJob, POST, "/v1/jobs/{id}:checkpoint",                        \
    "Checkpoint a running job at its next step boundary")                                         \
  X(JobService, GetLogs, kRead, GET, "/v1/jobs/{id}/logs", "Rank output of an attempt")          \
  X(JobService, ExportCheckpoint, kOwnJob, POST, "/v1/jobs/{id}:export",                         \
    "Export a checkpoint as a Hugging Face model directory, written by the controller")           \
  X(JobService, ListExports, kRead, GET, "/v1/jobs/{id}/exports", "A job's exports, newest first") \
  X(JobService, GetExport, kRead, GET, "/v1/exports/{id}", "An export and its state")            \
  X(WorkerService, ReportProgress, kRank, POST, "/v1/jobs/{id}/progress",                        \
    "Worker-facing: a rank's progress")                                                           \
  X(WorkerService, ReportCheckpoint, kRank, POST, "/v1/jobs/{id}/checkpoints",                   \
    "Worker-facing: a checkpoint shard written")                                                  \
  X(WorkerService, RejectCheckpoint, kRank, POST, "/v1/jobs/{id}/checkpoints:reject",            \
    "Worker-facing: a checkpoint that failed verification")                                       \
  X(NodeService, ListNodes, kRead, GET, "/v1/nodes", "Worker nodes with their GPUs or CPU slots") \
  X(NodeService, DrainNode, kAdmin, POST, "/v1/nodes/{id}:drain",                                \
    "Cordon a node and checkpoint and stop the runs on it")                                       \
  X(NodeService, UncordonNode, kAdmin, POST, "/v1/nodes/{id}:uncordon",                          \
    "Let the scheduler place ranks on a node again")                                              \
  X(WorkerService, RegisterNode, kNode, POST, "/v1/nodes:register",                              \
    "Worker-facing: an agent registers")                                                          \
  X(WorkerService, Heartbeat, kNode, POST, "/v1/nodes/{id}:heartbeat",                           \
    "Worker-facing: an agent's heartbeat")                                                        \
  X(WorkerService, HeartbeatBatch, kRelay, POST, "/v1/nodes:heartbeatBatch",                     \
    "Worker-facing: many agents' heartbeats, from a heartbeat relay")                             \
  X(WorkerService, AppendLogs, kNode, POST, "/v1/nodes/{id}/logs", "Worker-facing: rank output") \
  X(WorkerService, KvSet, kRank, POST, "/v1/kv:set", "Rendezvous: set a key")                    \
  X(WorkerService, KvGet, kRank, POST, "/v1/kv:get", "Rendezvous: get a key")                    \
  X(WorkerService, KvAdd, kRank, POST, "/v1/kv:add", "Rendezvous: add to a counter")             \
  X(WorkerService, KvWait, kRank, POST, "/v1/kv:wait", "Rendezvous: wait for keys")              \
  X(WorkerService, KvCheck, kRank, POST, "/v1/kv:check", "Rendezvous: whether keys exist")       \
  X(WorkerService, KvDelete, kRank, POST, "/v1/kv:delete", "Rendezvous: delete a key")

#define DHP_STREAM_METHOD(X) \
  X(JobService, WatchJob, kRead, GET, "/v1/jobs/{id}/events", "A job's events")
// clang-format on

// Which of the controller's queues a call waits in for its loop (DhpService::Dispatch). Users'
// calls (JobService, NodeService) go ahead of the agents' and ranks' (WorkerService: heartbeats,
// relays' batches of them, progress, rendezvous), which are sent on a schedule and tolerate
// seconds; while both wait, the controller takes one from each in turn, so that no flood of
// user calls can starve the heartbeats.
enum class Lane { kUser, kWorker };

#define DHP_LANE_OF_ROW(S, M, A, V, P, D) \
  if (method == #M) return std::string_view(#S) == "WorkerService" ? Lane::kWorker : Lane::kUser;
constexpr Lane LaneOf(std::string_view method) {
  DHP_UNARY_METHODS(DHP_LANE_OF_ROW)
  return Lane::kUser;
}
#undef DHP_LANE_OF_ROW

// The methods that may block on something other than the controller's loop (a log or export
// file): gRPC runs them on its CallPool, as it runs WatchJob's streams.
constexpr bool MayBlock(std::string_view method) {
  return method == "GetLogs" || method == "AppendLogs" || method == "ExportCheckpoint" ||
         method == "ListExports" || method == "GetExport";
}

// Whether the whole of a call's time is time the controller's loop spends on it, so that the
// calls queued behind it wait as long: not for a stream (WatchJob lasts as long as its client
// follows) nor for the methods that MayBlock on files.
constexpr bool HoldsTheLoop(std::string_view method) {
  return method != "WatchJob" && !MayBlock(method);
}

// One row of the table, for code that looks methods up at run time.
struct MethodInfo {
  std::string_view service;  // "JobService"
  std::string_view name;     // "SubmitJob"
  Access access;
  std::string_view verb;  // "GET" or "POST"
  std::string_view path;  // "/v1/jobs/{id}:cancel"
  std::string_view summary;
  bool streaming;
};

#define DHP_METHOD_INFO_ROW(S, M, A, V, P, D) MethodInfo{#S, #M, Access::A, #V, P, D, false},
#define DHP_METHOD_INFO_STREAM_ROW(S, M, A, V, P, D) MethodInfo{#S, #M, Access::A, #V, P, D, true},
inline constexpr MethodInfo kMethods[] = {
    DHP_UNARY_METHODS(DHP_METHOD_INFO_ROW) DHP_STREAM_METHOD(DHP_METHOD_INFO_STREAM_ROW)};
#undef DHP_METHOD_INFO_ROW
#undef DHP_METHOD_INFO_STREAM_ROW

// The row of `name`, or nullptr.
constexpr const MethodInfo* FindMethod(std::string_view name) {
  for (const MethodInfo& m : kMethods) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// "read", "submit", "own-job", "node", "rank", "relay", "admin".
constexpr std::string_view AccessName(Access access) {
  switch (access) {
    case Access::kRead: return "read";
    case Access::kSubmit: return "submit";
    case Access::kOwnJob: return "own-job";
    case Access::kNode: return "node";
    case Access::kRank: return "rank";
    case Access::kRelay: return "relay";
    case Access::kAdmin: return "admin";
  }
  return "?";
}

}  // namespace dhp::api

#endif  // DHP_API_METHODS_H_
