#include "api/grpc_server.h"

#include <chrono>

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

// Forwards a unary RPC to the same-named DhpService method, after the token check.
#define DHP_UNARY(Method)                                                               \
  grpc::Status Method(ServerContext* ctx, const v1::Method##Request* req,               \
                      v1::Method##Response* resp) override {                            \
    if (absl::Status s = auth_.Check(Authorization(ctx)); !s.ok()) return ToGrpcStatus(s); \
    return ToGrpcStatus(service_.Method(*req, resp));                                   \
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

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(DhpService& service, const TokenAuth& auth) : service_(service), auth_(auth) {}
  DHP_UNARY(SubmitJob)
  DHP_UNARY(GetJob)
  DHP_UNARY(GetLogs)
  DHP_UNARY(ListJobs)
  DHP_UNARY(CancelJob)
  DHP_UNARY(ResumeJob)

  grpc::Status WatchJob(ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::Event>* writer) override {
    if (absl::Status s = auth_.Check(Authorization(ctx)); !s.ok()) return ToGrpcStatus(s);
    GrpcEventSink sink(ctx, writer);
    return ToGrpcStatus(service_.WatchJob(*req, sink));
  }

 private:
  DhpService& service_;
  const TokenAuth& auth_;
};

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  NodeServiceImpl(DhpService& service, const TokenAuth& auth) : service_(service), auth_(auth) {}
  DHP_UNARY(ListNodes)

 private:
  DhpService& service_;
  const TokenAuth& auth_;
};

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  WorkerServiceImpl(DhpService& service, const TokenAuth& auth) : service_(service), auth_(auth) {}
  DHP_UNARY(RegisterNode)
  DHP_UNARY(Heartbeat)
  DHP_UNARY(KvSet)
  DHP_UNARY(KvGet)
  DHP_UNARY(KvAdd)
  DHP_UNARY(KvWait)
  DHP_UNARY(KvCheck)
  DHP_UNARY(KvDelete)
  DHP_UNARY(ReportProgress)
  DHP_UNARY(AppendLogs)
  DHP_UNARY(ReportCheckpoint)
  DHP_UNARY(RejectCheckpoint)

 private:
  DhpService& service_;
  const TokenAuth& auth_;
};

#undef DHP_UNARY

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

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& address,
                                                              DhpService& service, TokenAuth auth,
                                                              const TlsPems& tls) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<GrpcServer> s(new GrpcServer());
  s->auth_ = std::move(auth);
  s->jobs_ = std::make_unique<JobServiceImpl>(service, s->auth_);
  s->nodes_ = std::make_unique<NodeServiceImpl>(service, s->auth_);
  s->workers_ = std::make_unique<WorkerServiceImpl>(service, s->auth_);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, ServerCredentials(tls), &s->port_);
  builder.RegisterService(s->jobs_.get());
  builder.RegisterService(s->nodes_.get());
  builder.RegisterService(s->workers_.get());
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
