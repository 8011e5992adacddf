#include "api/grpc_server.h"

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>

#include "api/authz.h"
#include "api/grpc_status.h"
#include "common/serial_worker.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"

namespace dhp::api {
namespace {

using grpc::ServerContext;

// The "authorization" metadata of a call, empty when absent.
std::string_view Authorization(const grpc::ServerContextBase* ctx) {
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

// The methods served with gRPC's callback API: those that wait only for the controller's loop.
// Each is handed to DhpService::Dispatch, which runs it on the loop and finishes the call from
// there, so that a call waiting for the loop holds no thread. SubmitJob first does its stateless
// part (DhpService::PrepareSubmitJob) on gRPC's thread. The rest (WatchJob, GetLogs,
// AppendLogs, KvGet, KvWait) may wait for other things (events, files, keys) and stay
// synchronous, one gRPC thread per call in flight.
using AsyncJobService = v1::JobService::WithCallbackMethod_SubmitJob<
    v1::JobService::WithCallbackMethod_GetJob<v1::JobService::WithCallbackMethod_ListJobs<
        v1::JobService::WithCallbackMethod_CancelJob<v1::JobService::WithCallbackMethod_ResumeJob<
            v1::JobService::WithCallbackMethod_CheckpointJob<v1::JobService::Service>>>>>>;
using AsyncNodeService = v1::NodeService::WithCallbackMethod_ListNodes<
    v1::NodeService::WithCallbackMethod_DrainNode<
        v1::NodeService::WithCallbackMethod_UncordonNode<v1::NodeService::Service>>>;
using AsyncWorkerService = v1::WorkerService::WithCallbackMethod_RegisterNode<
    v1::WorkerService::WithCallbackMethod_Heartbeat<v1::WorkerService::WithCallbackMethod_KvSet<
        v1::WorkerService::WithCallbackMethod_KvAdd<v1::WorkerService::WithCallbackMethod_KvCheck<
            v1::WorkerService::WithCallbackMethod_KvDelete<
                v1::WorkerService::WithCallbackMethod_ReportProgress<
                    v1::WorkerService::WithCallbackMethod_ReportCheckpoint<
                        v1::WorkerService::WithCallbackMethod_RejectCheckpoint<
                            v1::WorkerService::Service>>>>>>>>>;

// The three gRPC services of dhp.v1 in one object: each method of api/methods.h forwards to
// the same-named DhpService method through the Authorizer (api/authz.h). Registered once per
// service.
class GrpcServices final : public AsyncJobService,
                           public AsyncNodeService,
                           public AsyncWorkerService {
 public:
  GrpcServices(DhpService& service, const TokenAuth& auth)
      : service_(service), authz_(auth, service) {}

  // Both forms of every method: gRPC calls the synchronous one for the methods left
  // synchronous and the callback one for the others (the callback form of a synchronous method
  // overrides nothing and is never called).
#define DHP_GRPC_UNARY(S, M, A, V, P, D)                                                      \
  grpc::Status M(ServerContext* ctx, const v1::M##Request* req, v1::M##Response* resp)        \
      override {                                                                              \
    return ToGrpcStatus(authz_.Call(Authorization(ctx), #M, &DhpService::M, *req, resp));    \
  }                                                                                           \
  grpc::ServerUnaryReactor* M(grpc::CallbackServerContext* ctx, const v1::M##Request* req,   \
                              v1::M##Response* resp) {                                        \
    return Dispatched(ctx, #M, &DhpService::M, req, resp);                                    \
  }
  DHP_UNARY_METHODS(DHP_GRPC_UNARY)
#undef DHP_GRPC_UNARY

  grpc::Status WatchJob(ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::Event>* writer) override {
    GrpcEventSink sink(ctx, writer);
    return ToGrpcStatus(authz_.Watch(Authorization(ctx), *req, sink));
  }

 private:
  // A callback method's call, handed to DhpService::Dispatch and finished from where it ran.
  // SubmitJob's stateless part (authentication, the spec parsed and validated) runs first,
  // here on gRPC's thread, so that the loop does not parse YAML.
  // The call is finished (the response serialized and written) on finisher_, not where it
  // ran: Finish does that work inline, and on the loop it was ~40% of the loop's time.
  template <typename Req, typename Resp>
  grpc::ServerUnaryReactor* Dispatched(grpc::CallbackServerContext* ctx, const char* method,
                                       absl::Status (DhpService::*call)(const Req&, Resp*),
                                       const Req* req, Resp* resp) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    auto finish = [this, reactor](const absl::Status& s) {
      finisher_.Post([reactor, status = ToGrpcStatus(s)] { reactor->Finish(status); });
    };
    std::string token(Authorization(ctx));
    std::shared_ptr<const Req> prepared;  // SubmitJob: the request after its stateless part
    if constexpr (std::is_same_v<Req, v1::SubmitJobRequest>) {
      auto copy = std::make_shared<v1::SubmitJobRequest>(*req);
      if (absl::Status s = authz_.Prepare(token, copy.get()); !s.ok()) {
        reactor->Finish(ToGrpcStatus(s));  // already on gRPC's thread
        return reactor;
      }
      prepared = std::move(copy);
    }
    service_.Dispatch(
        [this, token = std::move(token), method, call, req, prepared, resp] {
          return authz_.Call(token, method, call, prepared ? *prepared : *req, resp);
        },
        finish);
    return reactor;
  }

  DhpService& service_;
  const Authorizer authz_;
  SerialWorker finisher_{"dhp-grpc-finish"};  // stopped (drained) before the services go
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& address,
                                                              DhpService& service, TokenAuth auth,
                                                              const TlsPems& tls,
                                                              int max_threads) {
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
  if (max_threads > 0) {
    grpc::ResourceQuota quota("dhp-grpc");
    quota.SetMaxThreads(max_threads);
    builder.SetResourceQuota(quota);
  }
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
