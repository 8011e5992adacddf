#include "api/client.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

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
  // An agent's channel gets an answer every 2 s; BDP probing would PING the controller after
  // many of them, which it must read and answer. A fixed 1 MiB window per stream instead
  // (GetLogs, ExportCheckpoint downloads: 1 GB/s at 1 ms RTT), as the server sets it.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1 << 20);
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

// What a stream's reactor and HeartbeatStream share; HeartbeatStream owns it. It holds the
// reactor open (AddHold) for as long as it may call it, so that OnDone comes only after
// Release. The reactor deletes itself in OnDone and then sets `released`, its last touch: only
// then is this destroyed, on HeartbeatStream's thread. The context (which holds the channel) is
// here, not in the reactor, so that the channel never goes on one of gRPC's threads: a channel
// released there can end gRPC's callback queue from its own thread, which aborts.
struct HeartbeatStream::State {
  grpc::ClientContext ctx;
  v1::HeartbeatRequest req;
  v1::HeartbeatResponse resp;
  std::mutex mu;  // guards the flags and status
  std::condition_variable cv;
  bool write_pending = false, read_pending = false, read_ok = false, done = false;
  grpc::Status status;
  std::atomic<bool> released{false};
};

// The stream itself: a callback reactor that Beat drives one request at a time.
class HeartbeatStream::Call final
    : public grpc::ClientBidiReactor<v1::HeartbeatRequest, v1::HeartbeatResponse> {
 public:
  // Starts the call, held open; the reactor lives until OnDone, which comes after Release.
  static Call* Open(DhpClient& client, State* state) {
    client.Prepare(&state->ctx, 0);  // the stream has no deadline; each beat has its own
    Call* call = new Call(state);
    client.workers_->async()->HeartbeatStream(&call->st_->ctx, call);
    call->AddHold();
    call->StartCall();
    return call;
  }

  void Send() {  // state->req, one at a time (Beat waits for both to complete)
    StartWrite(&st_->req);
    StartRead(&st_->resp);
  }
  void Close() { StartWritesDone(); }
  void Release() { RemoveHold(); }

  void OnWriteDone(bool) override {  // a failed write shows as a failed read
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->write_pending = false;
    st_->cv.notify_all();
  }
  void OnReadDone(bool ok) override {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->read_pending = false;
    st_->read_ok = ok;
    st_->cv.notify_all();
  }
  void OnDone(const grpc::Status& s) override {
    State* st = st_;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      st->done = true;
      st->status = s;
      st->cv.notify_all();
    }
    delete this;
    st->released.store(true, std::memory_order_release);
  }

 private:
  explicit Call(State* state) : st_(state) {}
  State* st_;
};

HeartbeatStream::HeartbeatStream(DhpClient& client) : client_(client) {}

HeartbeatStream::~HeartbeatStream() {
  if (call_ == nullptr) return;
  call_->Close();  // the controller ends the stream when it has read the end of ours
  std::unique_lock<std::mutex> lock(state_->mu);
  Release(lock);
  if (!state_->cv.wait_for(lock, std::chrono::seconds(2), [this] { return state_->done; })) {
    state_->ctx.TryCancel();
  }
  WaitEnded(lock);
}

void HeartbeatStream::WaitEnded(std::unique_lock<std::mutex>& lock) {
  state_->cv.wait(lock, [this] { return state_->done; });
  lock.unlock();
  while (!state_->released.load(std::memory_order_acquire)) std::this_thread::yield();
  lock.lock();
}

void HeartbeatStream::Release(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  call_->Release();  // OnDone may run, and delete it, from here on
  call_ = nullptr;
  lock.lock();
}

absl::StatusOr<v1::HeartbeatResponse> HeartbeatStream::Beat(const v1::HeartbeatRequest& req) {
  if (unary_) return client_.Heartbeat(req);
  const bool reused = call_ != nullptr;
  if (!reused) Open();
  absl::StatusOr<v1::HeartbeatResponse> resp = Send(req);
  if (!resp.ok() && reused && resp.status().code() == absl::StatusCode::kUnavailable) {
    Open();  // the stream may have ended between beats (a controller restart): once more
    resp = Send(req);
  }
  if (resp.status().code() == absl::StatusCode::kUnimplemented) {  // an older controller
    unary_ = true;
    return client_.Heartbeat(req);
  }
  return resp;
}

void HeartbeatStream::Open() {
  state_ = std::make_unique<State>();
  call_ = Call::Open(client_, state_.get());
  ++opened_;
}

absl::StatusOr<v1::HeartbeatResponse> HeartbeatStream::Send(const v1::HeartbeatRequest& req) {
  State& st = *state_;
  std::unique_lock<std::mutex> lock(st.mu);
  st.req = req;
  st.write_pending = st.read_pending = true;
  lock.unlock();  // the callbacks take the lock, and may run before these return
  call_->Send();
  lock.lock();
  auto settled = [&st] { return !st.read_pending && !st.write_pending; };
  const int timeout_ms = client_.timeout_ms_;
  if (!st.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), settled)) {
    st.ctx.TryCancel();
    st.cv.wait(lock, settled);
    Release(lock);
    WaitEnded(lock);
    return absl::DeadlineExceededError("heartbeat to " + client_.target_ +
                                       ": no answer within " + std::to_string(timeout_ms) +
                                       " ms");
  }
  if (st.read_ok) return st.resp;
  Release(lock);  // the read failed: the stream is over, and its status follows
  WaitEnded(lock);
  if (st.status.ok()) {
    return absl::UnavailableError("controller at " + client_.target_ +
                                  " ended the heartbeat stream");
  }
  if (st.status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Unavailable(client_.target_, st.status);
  }
  return FromGrpcStatus(st.status);
}

}  // namespace dhp::api
