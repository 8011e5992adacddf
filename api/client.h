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
#include <mutex>
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

  friend class HeartbeatStream;

  std::string target_;
  int timeout_ms_;
  std::string authorization_;  // "Bearer <token>" or empty
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::NodeService::Stub> nodes_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
};

// An agent's heartbeats on one WorkerService.HeartbeatStream, so that a heartbeat costs the
// controller a message rather than a call. Beat writes the request and waits for its answer, up
// to the client's default deadline, and returns what the unary Heartbeat would: the response,
// or the status that ended the stream (NOT_FOUND when the controller forgot the node,
// UNAVAILABLE naming the address, ...; a deadline cancels the stream and is DEADLINE_EXCEEDED).
// The first Beat opens the stream, and the first after one ended opens the next. Against a
// controller without HeartbeatStream (UNIMPLEMENTED) this and every later Beat is a unary
// Heartbeat. Not thread-safe: one caller (the agent's loop); `client` must outlive it.
class HeartbeatStream {
 public:
  explicit HeartbeatStream(DhpClient& client);
  ~HeartbeatStream();  // closes the stream, waiting up to 2 s for the controller to end it
  HeartbeatStream(const HeartbeatStream&) = delete;
  HeartbeatStream& operator=(const HeartbeatStream&) = delete;

  absl::StatusOr<v1::HeartbeatResponse> Beat(const v1::HeartbeatRequest& req);
  // Whether beats go on the stream: false after the fallback to unary calls.
  bool streaming() const { return !unary_; }
  // Streams opened so far (the first, and one after each that ended).
  int opened() const { return opened_; }

 private:
  class Call;
  struct State;
  void Open();
  // The answer on the open stream, or the status that ended it (then it is over: released).
  absl::StatusOr<v1::HeartbeatResponse> Send(const v1::HeartbeatRequest& req);
  // Lets the open stream end (OnDone); `lock` (state_->mu) is dropped meanwhile.
  void Release(std::unique_lock<std::mutex>& lock);
  // Waits for the released stream's OnDone to have run to its end.
  void WaitEnded(std::unique_lock<std::mutex>& lock);

  DhpClient& client_;
  Call* call_ = nullptr;  // the open stream's reactor, held open until released
  std::unique_ptr<State> state_;  // its state, which outlives it
  bool unary_ = false;
  int opened_ = 0;
};

}  // namespace dhp::api

#endif  // DHP_API_CLIENT_H_
