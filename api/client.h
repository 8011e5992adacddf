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
#include "api/methods.h"
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

  // One method per unary row of api/methods.h:
  //   absl::StatusOr<v1::SubmitJobResponse> SubmitJob(const v1::SubmitJobRequest& req);
  // KvGet and KvWait add the request's timeout_ms to the deadline.
#define DHP_CLIENT_UNARY(S, M, A, V, P, D) \
  absl::StatusOr<v1::M##Response> M(const v1::M##Request& req);
  DHP_UNARY_METHODS(DHP_CLIENT_UNARY)
#undef DHP_CLIENT_UNARY
  // Streams events into `on_event` until the server ends the stream or `on_event` returns
  // false (which cancels the call). Has no deadline.
  absl::Status WatchJob(const v1::WatchJobRequest& req,
                        const std::function<bool(const v1::Event&)>& on_event);

 private:
  void Prepare(grpc::ClientContext* ctx, int timeout_ms) const;
  // The stub of a gRPC service, picked by the type of a (null) pointer.
  v1::JobService::Stub* StubFor(v1::JobService::Stub*) const { return jobs_.get(); }
  v1::NodeService::Stub* StubFor(v1::NodeService::Stub*) const { return nodes_.get(); }
  v1::WorkerService::Stub* StubFor(v1::WorkerService::Stub*) const { return workers_.get(); }
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
