// RelayServer: dhp-relay's gRPC server. Agents (dhp-worker --heartbeat-relay) send it their
// WorkerService.Heartbeat calls; it hands each, with the caller's `authorization`, to a
// HeartbeatBatcher and answers the call with what the controller answered to that heartbeat.
// A request that does not decode is INVALID_ARGUMENT saying why (told to the observer as an
// answer, so that dhp_relay_heartbeats_total counts it), and so is a heartbeat the controller
// would refuse (api::CheckHeartbeatLimits: the batcher refuses it unsent). Every other
// method is UNIMPLEMENTED: agents register, ship logs and take rank tokens from the controller
// itself, and ranks never talk to a relay. grpc.health.v1 answers SERVING.
//
// Thread-safety: construct and destroy on one thread; gRPC calls in from its own threads.
#ifndef DHP_WORKER_RELAY_RELAY_SERVER_H_
#define DHP_WORKER_RELAY_RELAY_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "api/tls.h"
#include "worker/relay/heartbeat_batcher.h"

namespace grpc {
class Server;
}

namespace dhp::worker {

class RelayServer {
 public:
  // Listens on `address` (host:port; port 0 picks one), with TLS when `tls.cert` is set.
  // UNAVAILABLE naming the address when it cannot listen. `observer` (optional; it must
  // outlive this) hears of the requests refused here, before the batcher.
  static absl::StatusOr<std::unique_ptr<RelayServer>> Start(
      const std::string& address, HeartbeatBatcher& batcher, const api::TlsPems& tls,
      HeartbeatBatcherObserver* observer = nullptr);
  ~RelayServer();  // stops listening; calls in flight are cancelled after 1 s
  RelayServer(const RelayServer&) = delete;
  RelayServer& operator=(const RelayServer&) = delete;

  int port() const { return port_; }

 private:
  class Service;
  RelayServer() = default;

  int port_ = 0;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace dhp::worker

#endif  // DHP_WORKER_RELAY_RELAY_SERVER_H_
