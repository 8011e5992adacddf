// DhpService: every operation of the controller's API, independent of transport.
//
// The controller implements it once (controller/controller_service.h); the gRPC services
// (api/grpc_server.h) and the REST gateway (api/rest_gateway.h) are thin adapters over it, so
// both transports share validation, errors and behaviour. Implementations must be thread-safe:
// both transports call in from their own threads.
#ifndef DHP_API_SERVICE_H_
#define DHP_API_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "api/methods.h"
#include "common/cancel_signal.h"
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

// The most length-delimited fields (messages, strings, bytes) and groups one gRPC request may
// hold, at every depth (common/proto_wire_budget.h): about 60 MB once parsed at worst. A 16 MiB
// request of empty messages would otherwise be 8 million of them, 1.8 GB parsed. A REST body
// may hold as many JSON values (api/rest_body.h).
inline constexpr int64_t kMaxRequestElements = 262144;
// HeartbeatBatchRequest.heartbeats: the most one batch may carry.
inline constexpr int kMaxHeartbeatBatch = 1024;
// HeartbeatRequest.progress: the most reports one heartbeat may relay.
inline constexpr int kMaxRelayedProgress = 1024;
// HeartbeatRequest.ranks: the most rank processes one heartbeat may report (a node's slots).
inline constexpr int kMaxHeartbeatRanks = 4096;
// HeartbeatBatchRequest: the most progress reports its heartbeats may relay together (8 ranks
// on each of 1,024 nodes), so that one batch holds the controller's loop for a bounded time.
inline constexpr int kMaxBatchProgress = 8192;

class DhpService {
 public:
  virtual ~DhpService() = default;

  // One pure virtual method per row of api/methods.h:
  //   absl::Status SubmitJob(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp);
  // WatchJob blocks while streaming; it returns when the stream is complete or the sink
  // reports a vanished client.
#define DHP_SERVICE_UNARY(S, M, A, V, P, D) \
  virtual absl::Status M(const v1::M##Request& req, v1::M##Response* resp) = 0;
  DHP_UNARY_METHODS(DHP_SERVICE_UNARY)
#undef DHP_SERVICE_UNARY
  virtual absl::Status WatchJob(const v1::WatchJobRequest& req, EventSink& sink) = 0;

  // Runs `call` (a unary call into this service) and then `done` with its status. The default
  // runs both at once on the calling thread. The Controller overrides it to queue the call on
  // its loop thread, in `lane` (api/methods.h: LaneOf), and run `done` there, so that the gRPC
  // server's asynchronous methods hold no thread while a call waits for the loop
  // (api/grpc_server.cc). Only for methods that do not wait for anything but the loop: not the
  // Kv waits, logs or streams.
  using Done = std::function<void(const absl::Status&)>;
  virtual void Dispatch(std::function<absl::Status()> call, Done done, Lane /*lane*/) {
    done(call());
  }

  // The rendezvous waits without holding the calling thread: `done` runs once, on any thread,
  // when the keys are there (resp filled in) or the wait ended otherwise (timeout, the attempt
  // ended, shutdown, `cancel`). `req` is read before this returns; `resp` must live until
  // `done`. The gRPC server calls these, so that 80,000 ranks waiting for one key hold no
  // thread. `cancel` (may be null) is signalled when the caller gives up (gRPC: the client
  // cancelled, or its deadline passed): the wait then ends at once with CANCELLED instead of
  // holding a place until its timeout. The defaults call the blocking methods on the calling
  // thread and ignore `cancel`.
  virtual void KvGetAsync(const v1::KvGetRequest& req, v1::KvGetResponse* resp, Done done,
                          std::shared_ptr<CancelSignal> /*cancel*/) {
    done(KvGet(req, resp));
  }
  virtual void KvWaitAsync(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp, Done done,
                           std::shared_ptr<CancelSignal> /*cancel*/) {
    done(KvWait(req, resp));
  }

  // SubmitJob without holding the calling thread: `done` runs once, on any thread, with resp
  // filled in. `req` is read before this returns; `resp` must live until `done`. `taken` (may
  // be null) runs when the submit stops waiting and starts to run (the wait for the loop is
  // measured with it), unless it is refused first. The Controller queues submits and stores
  // those that arrive while its loop is busy together, in one transaction (group commit). The
  // default calls SubmitJob on the calling thread.
  virtual void SubmitJobAsync(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp,
                              Done done, std::function<void()> taken) {
    if (taken) taken();
    done(SubmitJob(req, resp));
  }
  // The part of SubmitJob that needs no state, for the calling thread to do before it
  // dispatches the rest: the controller parses and validates spec_text here and puts the
  // result in spec, so that the YAML is not parsed on its loop. SubmitJob must give the same
  // job for the request before and after. An error here is the call's answer. The default
  // changes nothing.
  virtual absl::Status PrepareSubmitJob(v1::SubmitJobRequest* /*req*/) {
    return absl::OkStatus();
  }

  // Health for /healthz and grpc.health.v1: OK while the controller can serve.
  virtual absl::Status Health() = 0;
  // The Prometheus text exposition for /metrics.
  virtual std::string MetricsText() = 0;
};

}  // namespace dhp::api

#endif  // DHP_API_SERVICE_H_
