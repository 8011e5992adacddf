#include "worker/relay/relay_server.h"

#include <chrono>
#include <utility>

#include "api/grpc_decode.h"
#include "api/grpc_status.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace dhp::worker {

// Heartbeat as a raw method: the relay decodes the request itself, so that bytes protobuf
// refuses get INVALID_ARGUMENT saying why (as the controller answers them), not gRPC's bare
// UNIMPLEMENTED. Every other WorkerService method stays UNIMPLEMENTED.
class RelayServer::Service final
    : public v1::WorkerService::WithRawCallbackMethod_Heartbeat<
          v1::WorkerService::CallbackService> {
 public:
  Service(HeartbeatBatcher& batcher, HeartbeatBatcherObserver* observer)
      : batcher_(batcher), observer_(observer) {}

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    v1::HeartbeatRequest heartbeat;
    if (absl::Status s = api::DecodeRequest(*req, &heartbeat); !s.ok()) {
      if (observer_ != nullptr) observer_->OnAnswer(s.code(), 0);
      reactor->Finish(api::ToGrpcStatus(s));
      return reactor;
    }
    std::string authorization;
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end()) {
      authorization.assign(it->second.data(), it->second.size());
    }
    // gRPC keeps `resp` until Finish, which the answer calls last.
    batcher_.Submit(std::move(authorization), std::move(heartbeat),
                    [reactor, resp](const absl::Status& s, v1::HeartbeatResponse answer) {
                      if (!s.ok()) {
                        reactor->Finish(api::ToGrpcStatus(s));
                        return;
                      }
                      bool own_buffer = false;
                      reactor->Finish(grpc::SerializationTraits<v1::HeartbeatResponse>::Serialize(
                          answer, resp, &own_buffer));
                    });
    return reactor;
  }

 private:
  HeartbeatBatcher& batcher_;
  HeartbeatBatcherObserver* const observer_;  // may be null
};

namespace {

std::shared_ptr<grpc::ServerCredentials> Credentials(const api::TlsPems& tls) {
  if (tls.cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({tls.key, tls.cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RelayServer>> RelayServer::Start(
    const std::string& address, HeartbeatBatcher& batcher, const api::TlsPems& tls,
    HeartbeatBatcherObserver* observer) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<RelayServer> s(new RelayServer());
  s->service_ = std::make_unique<Service>(batcher, observer);
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
