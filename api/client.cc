#include "api/client.h"

#include <chrono>

#include "api/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace dhp::api {
namespace {

template <typename Stub, typename Req, typename Resp>
using UnaryMethod = grpc::Status (Stub::*)(grpc::ClientContext*, const Req&, Resp*);

absl::Status Unavailable(const std::string& target, const grpc::Status& s) {
  return absl::UnavailableError("controller at " + target + " is unavailable: " +
                                s.error_message());
}

// The deadline of a call: the default, plus the time the request asks the server to wait.
int WaitMs(const v1::KvGetRequest& req) { return req.timeout_ms(); }
int WaitMs(const v1::KvWaitRequest& req) { return req.timeout_ms(); }
int WaitMs(const google::protobuf::Message&) { return 0; }

}  // namespace

void DhpClient::Prepare(grpc::ClientContext* ctx, int timeout_ms) const {
  if (timeout_ms > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  }
  if (!authorization_.empty()) ctx->AddMetadata("authorization", authorization_);
}

template <typename Stub, typename Req, typename Resp>
absl::StatusOr<Resp> DhpClient::Call(Stub* stub, UnaryMethod<Stub, Req, Resp> method,
                                     const Req& req, int timeout_ms) const {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout_ms);
  Resp resp;
  grpc::Status s = (stub->*method)(&ctx, req, &resp);
  if (s.ok()) return resp;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) return Unavailable(target_, s);
  return FromGrpcStatus(s);
}

DhpClient::DhpClient(const std::string& target, int default_timeout_ms, std::string token,
                     const TlsPems& tls)
    : target_(target),
      timeout_ms_(default_timeout_ms),
      authorization_(token.empty() ? "" : "Bearer " + token) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Agents and ranks outlive controller restarts: reconnect within ~2 s once it is back
  // (gRPC's default backoff grows to 120 s).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!tls.ca.empty()) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = tls.ca;
    options.pem_private_key = tls.key;
    options.pem_cert_chain = tls.cert;
    credentials = grpc::SslCredentials(options);
  }
  channel_ = grpc::CreateCustomChannel(target, credentials, args);
  jobs_ = v1::JobService::NewStub(channel_);
  nodes_ = v1::NodeService::NewStub(channel_);
  workers_ = v1::WorkerService::NewStub(channel_);
}

#define DHP_CLIENT_CALL(S, M, A, V, P, D)                                                      \
  absl::StatusOr<v1::M##Response> DhpClient::M(const v1::M##Request& req) {                   \
    return Call(StubFor(static_cast<v1::S::Stub*>(nullptr)), &v1::S::Stub::M, req,                \
                timeout_ms_ + WaitMs(req));                                                    \
  }
DHP_UNARY_METHODS(DHP_CLIENT_CALL)
#undef DHP_CLIENT_CALL

absl::Status DhpClient::WatchJob(const v1::WatchJobRequest& req,
                                 const std::function<bool(const v1::Event&)>& on_event) {
  grpc::ClientContext ctx;
  Prepare(&ctx, 0);
  std::unique_ptr<grpc::ClientReader<v1::Event>> reader = jobs_->WatchJob(&ctx, req);
  v1::Event event;
  bool stopped = false;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      stopped = true;
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (stopped) return absl::OkStatus();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) return Unavailable(target_, s);
  return FromGrpcStatus(s);
}

}  // namespace dhp::api
