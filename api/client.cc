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

#define DHP_CLIENT_CALL(stub, Method, timeout)                                               \
  absl::StatusOr<v1::Method##Response> DhpClient::Method(const v1::Method##Request& req) {   \
    return Call(stub.get(), &std::remove_reference_t<decltype(*stub)>::Method, req, timeout); \
  }

DHP_CLIENT_CALL(jobs_, SubmitJob, timeout_ms_)
DHP_CLIENT_CALL(jobs_, GetJob, timeout_ms_)
DHP_CLIENT_CALL(jobs_, ListJobs, timeout_ms_)
DHP_CLIENT_CALL(jobs_, CancelJob, timeout_ms_)
DHP_CLIENT_CALL(jobs_, ResumeJob, timeout_ms_)
DHP_CLIENT_CALL(nodes_, ListNodes, timeout_ms_)
DHP_CLIENT_CALL(workers_, RegisterNode, timeout_ms_)
DHP_CLIENT_CALL(workers_, Heartbeat, timeout_ms_)
DHP_CLIENT_CALL(workers_, KvSet, timeout_ms_)
DHP_CLIENT_CALL(workers_, KvGet, timeout_ms_ + req.timeout_ms())
DHP_CLIENT_CALL(workers_, KvAdd, timeout_ms_)
DHP_CLIENT_CALL(workers_, KvWait, timeout_ms_ + req.timeout_ms())
DHP_CLIENT_CALL(workers_, KvCheck, timeout_ms_)
DHP_CLIENT_CALL(workers_, KvDelete, timeout_ms_)
DHP_CLIENT_CALL(workers_, ReportProgress, timeout_ms_)
DHP_CLIENT_CALL(jobs_, GetLogs, timeout_ms_)
DHP_CLIENT_CALL(workers_, AppendLogs, timeout_ms_)
DHP_CLIENT_CALL(workers_, ReportCheckpoint, timeout_ms_)
DHP_CLIENT_CALL(workers_, RejectCheckpoint, timeout_ms_)

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
