#include "api/grpc_server.h"

#include <chrono>

#include "api/authz.h"
#include "api/grpc_status.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"

namespace dhp::api {
namespace {

using grpc::ServerContext;

// The "authorization" metadata of a call, empty when absent.
std::string_view Authorization(const ServerContext* ctx) {
  auto it = ctx->client_metadata().find("authorization");
  if (it == ctx->client_metadata().end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

class GrpcEventSink : public EventSink {
 public:
  GrpcEventSink(ServerContext* ctx, grpc::ServerWriter<v1::Event>* writer)
      : ctx_(ctx), writer_(writer) {}
  bool Write(const v1::Event& event) override { return writer_->Write(event); }
  bool IsCancelled() const override { return ctx_->IsCancelled(); }

 private:
  ServerContext* ctx_;
  grpc::ServerWriter<v1::Event>* writer_;
};

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsPems& tls) {
  if (tls.cert.empty()) return grpc::InsecureServerCredentials();
  grpc_ssl_client_certificate_request_type request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  if (!tls.ca.empty()) {
    request = tls.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                      : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  grpc::SslServerCredentialsOptions options(request);
  options.pem_root_certs = tls.ca;
  options.pem_key_cert_pairs.push_back({tls.key, tls.cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace

// The three gRPC services of dhp.v1 in one object: each method of api/methods.h forwards to
// the same-named DhpService method through the Authorizer (api/authz.h). Registered once per
// service.
class GrpcServices final : public v1::JobService::Service,
                           public v1::NodeService::Service,
                           public v1::WorkerService::Service {
 public:
  GrpcServices(DhpService& service, const TokenAuth& auth) : authz_(auth, service) {}

#define DHP_GRPC_UNARY(S, M, A, V, P, D)                                                   \
  grpc::Status M(ServerContext* ctx, const v1::M##Request* req, v1::M##Response* resp)     \
      override {                                                                           \
    return ToGrpcStatus(authz_.Call(Authorization(ctx), #M, &DhpService::M, *req, resp)); \
  }
  DHP_UNARY_METHODS(DHP_GRPC_UNARY)
#undef DHP_GRPC_UNARY

  grpc::Status WatchJob(ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::Event>* writer) override {
    GrpcEventSink sink(ctx, writer);
    return ToGrpcStatus(authz_.Watch(Authorization(ctx), *req, sink));
  }

 private:
  const Authorizer authz_;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& address,
                                                              DhpService& service, TokenAuth auth,
                                                              const TlsPems& tls) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<GrpcServer> s(new GrpcServer());
  s->auth_ = std::move(auth);
  auto services = std::make_unique<GrpcServices>(service, s->auth_);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, ServerCredentials(tls), &s->port_);
  builder.RegisterService(static_cast<v1::JobService::Service*>(services.get()));
  builder.RegisterService(static_cast<v1::NodeService::Service*>(services.get()));
  builder.RegisterService(static_cast<v1::WorkerService::Service*>(services.get()));
  s->services_ = std::move(services);
  builder.SetMaxReceiveMessageSize(16 << 20);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError("cannot listen for gRPC on " + address +
                                  " (address in use or not local?)");
  }
  // The server as a whole ("") and each service by its full name, as probes ask for them.
  grpc::HealthCheckServiceInterface* health = s->server_->GetHealthCheckService();
  health->SetServingStatus(true);
  for (const char* name :
       {v1::JobService::service_full_name(), v1::NodeService::service_full_name(),
        v1::WorkerService::service_full_name()}) {
    health->SetServingStatus(name, true);
  }
  return s;
}

void GrpcServer::Shutdown(int grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server_->Wait();
}

GrpcServer::~GrpcServer() {
  if (server_ != nullptr) Shutdown(0);
}

}  // namespace dhp::api
