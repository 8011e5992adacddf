#include "worker/relay/relay_server.h"

#include <chrono>
#include <utility>

#include "api/grpc_status.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace dhp::worker {

class RelayServer::Service final : public v1::WorkerService::CallbackService {
 public:
  explicit Service(HeartbeatBatcher& batcher) : batcher_(batcher) {}

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    std::string authorization;
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end()) authorization.assign(it->second.data(), it->second.size());
    // gRPC keeps `resp` until Finish, which the answer calls last.
    batcher_.Submit(std::move(authorization), *req,
                    [reactor, resp](const absl::Status& s, v1::HeartbeatResponse answer) {
                      if (s.ok()) *resp = std::move(answer);
                      reactor->Finish(api::ToGrpcStatus(s));
                    });
    return reactor;
  }

 private:
  HeartbeatBatcher& batcher_;
};

namespace {

std::shared_ptr<grpc::ServerCredentials> Credentials(const api::TlsPems& tls) {
  if (tls.cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({tls.key, tls.cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RelayServer>> RelayServer::Start(const std::string& address,
                                                                HeartbeatBatcher& batcher,
                                                                const api::TlsPems& tls) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<RelayServer> s(new RelayServer());
  s->service_ = std::make_unique<Service>(batcher);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, Credentials(tls), &s->port_);
  builder.RegisterService(s->service_.get());
  // As the controller's server: no BDP pings on thousands of agents' connections.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError("cannot listen for gRPC on " + address +
                                  " (address in use or not local?)");
  }
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  return s;
}

RelayServer::~RelayServer() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

}  // namespace dhp::worker
