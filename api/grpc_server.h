// GrpcServer: serves dhp.v1.JobService, NodeService and WorkerService over gRPC, plus the
// standard grpc.health.v1 health service and server reflection, all forwarding to one
// DhpService.
//
// Thread-safety: gRPC calls the service from its own thread pool; DhpService must be
// thread-safe. Shutdown may be called from any thread, once.
#ifndef DHP_API_GRPC_SERVER_H_
#define DHP_API_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "api/auth.h"
#include "api/service.h"
#include "api/tls.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace dhp::api {

class GrpcServices;  // the dhp.v1 services, in grpc_server.cc

class GrpcServer {
 public:
  // Listens on `address` ("127.0.0.1:0" picks a free port; see port()). Metrics are
  // recorded by wrapping `service` (api/instrumented_service.h). With `auth` enabled, dhp's
  // services refuse calls without the bearer token (health and reflection stay open). With
  // `tls.cert` set it serves TLS only (api/tls.h), verifying client certificates against
  // `tls.ca` when set. The methods dispatched through DhpService::Dispatch hold no thread while
  // they wait, and so do the rendezvous waits (DhpService::KvGetAsync, KvWaitAsync).
  // `max_threads` > 0 bounds the threads of the methods that may block (logs, exports, WatchJob
  // streams: one per call in flight); past it such calls get RESOURCE_EXHAUSTED. A request
  // protobuf cannot decode is INVALID_ARGUMENT naming the field (after authentication).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const std::string& address,
                                                           DhpService& service,
                                                           TokenAuth auth = TokenAuth(),
                                                           const TlsPems& tls = TlsPems(),
                                                           int max_threads = 0);
  ~GrpcServer();

  int port() const { return port_; }
  // Marks the health service NOT_SERVING, then stops accepting calls and waits up to
  // `grace_ms` for calls in flight (open Watch streams are cancelled after that).
  void Shutdown(int grace_ms = 2000);

 private:
  GrpcServer() = default;

  std::unique_ptr<GrpcServices> services_;
  std::unique_ptr<grpc::Server> server_;
  TokenAuth auth_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace dhp::api

#endif  // DHP_API_GRPC_SERVER_H_
