#include "api/grpc_server.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "api/authz.h"
#include "api/grpc_decode.h"
#include "api/grpc_status.h"
#include "common/call_pool.h"
#include "common/cancel_signal.h"
#include "common/serial_worker.h"
#include "dhp/v1/service.grpc.pb.h"
#include "google/protobuf/arena.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"

namespace dhp::api {
namespace {

// The "authorization" metadata of a call, empty when absent.
std::string_view Authorization(const grpc::ServerContextBase* ctx) {
  auto it = ctx->client_metadata().find("authorization");
  if (it == ctx->client_metadata().end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

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

// `Base` with each of `Raw` layered on top (the first outermost): a service whose listed
// methods are raw callback methods.
template <class Base, template <class> class... Raw>
struct Layered {
  using type = Base;
};
template <class Base, template <class> class First, template <class> class... Rest>
struct Layered<Base, First, Rest...> {
  using type = First<typename Layered<Base, Rest...>::type>;
};

// Every unary method of api/methods.h is a raw callback method: gRPC hands over the request's
// bytes and holds no thread while the call waits. dhp decodes the bytes itself so that a
// request protobuf refuses (ill-formed UTF-8 in a string field, truncated bytes) is answered
// INVALID_ARGUMENT naming the field, where gRPC's own decoding would answer UNIMPLEMENTED with
// no message. (A method missing from these lists fails to compile: its `override` in
// GrpcServices has nothing to override.) WatchJob, the one streaming method, too.
using RawJobService =
    Layered<v1::JobService::Service, v1::JobService::WithRawCallbackMethod_SubmitJob,
            v1::JobService::WithRawCallbackMethod_GetJob,
            v1::JobService::WithRawCallbackMethod_ListJobs,
            v1::JobService::WithRawCallbackMethod_CancelJob,
            v1::JobService::WithRawCallbackMethod_ResumeJob,
            v1::JobService::WithRawCallbackMethod_CheckpointJob,
            v1::JobService::WithRawCallbackMethod_GetLogs,
            v1::JobService::WithRawCallbackMethod_ExportCheckpoint,
            v1::JobService::WithRawCallbackMethod_ListExports,
            v1::JobService::WithRawCallbackMethod_GetExport,
            v1::JobService::WithRawCallbackMethod_WatchJob>::type;
using RawNodeService =
    Layered<v1::NodeService::Service, v1::NodeService::WithRawCallbackMethod_ListNodes,
            v1::NodeService::WithRawCallbackMethod_DrainNode,
            v1::NodeService::WithRawCallbackMethod_UncordonNode>::type;
using RawWorkerService =
    Layered<v1::WorkerService::Service, v1::WorkerService::WithRawCallbackMethod_RegisterNode,
            v1::WorkerService::WithRawCallbackMethod_Heartbeat,
            v1::WorkerService::WithRawCallbackMethod_HeartbeatBatch,
            v1::WorkerService::WithRawCallbackMethod_HeartbeatStream,
            v1::WorkerService::WithRawCallbackMethod_AppendLogs,
            v1::WorkerService::WithRawCallbackMethod_KvSet,
            v1::WorkerService::WithRawCallbackMethod_KvGet,
            v1::WorkerService::WithRawCallbackMethod_KvAdd,
            v1::WorkerService::WithRawCallbackMethod_KvWait,
            v1::WorkerService::WithRawCallbackMethod_KvCheck,
            v1::WorkerService::WithRawCallbackMethod_KvDelete,
            v1::WorkerService::WithRawCallbackMethod_ReportProgress,
            v1::WorkerService::WithRawCallbackMethod_ReportCheckpoint,
            v1::WorkerService::WithRawCallbackMethod_RejectCheckpoint>::type;

// The methods that MayBlock (api/methods.h) run on the CallPool, as WatchJob's streams do. The
// rendezvous waits (KvGet, KvWait) hold no thread: DhpService::KvGetAsync and KvWaitAsync end
// them. The others are handed to DhpService::Dispatch, which runs them on the loop.

// The asynchronous form of a method, for the rendezvous waits; nullptr for the others.
template <typename Req, typename Resp>
constexpr auto AsyncMethod() {
  if constexpr (std::is_same_v<Req, v1::KvGetRequest>) {
    return &DhpService::KvGetAsync;
  } else if constexpr (std::is_same_v<Req, v1::KvWaitRequest>) {
    return &DhpService::KvWaitAsync;
  } else {
    return nullptr;
  }
}

// A rendezvous wait's call (KvGet, KvWait). The wait holds no thread; when the client gives
// up (it cancelled, or its deadline passed) gRPC calls OnCancel, and `cancel` ends the wait
// at once, so that it does not hold a place until its own timeout (RendezvousKv::kMaxWaits).
// A unary call's request and response on one arena, freed together when the call ends rather
// than object by object: a HeartbeatBatch from a relay holds ~25 agents' heartbeats, each with
// its ranks' statuses and progress, and its answer a launch per rank, ~1,000 messages and
// strings in all.
template <typename Req, typename Resp>
struct CallMessages {
  static google::protobuf::ArenaOptions Options() {
    google::protobuf::ArenaOptions o;
    o.start_block_size = 4096;
    o.max_block_size = 64 << 10;
    return o;
  }
  google::protobuf::Arena arena{Options()};
  Req* const req = google::protobuf::Arena::CreateMessage<Req>(&arena);
  Resp* const resp = google::protobuf::Arena::CreateMessage<Resp>(&arena);
};

class WaitReactor final : public grpc::ServerUnaryReactor {
 public:
  void OnCancel() override { cancel->Cancel(); }
  void OnDone() override { delete this; }

  const std::shared_ptr<CancelSignal> cancel = std::make_shared<CancelSignal>();
};

// One WatchJob stream. The watch runs on a CallPool thread (DhpService::WatchJob blocks until
// the stream ends); each event is written with StartWrite, and Write waits for its
// OnWriteDone, so that one event is in flight at a time and the buffer is not reused early.
// The pool thread's last act is Finish; gRPC then calls OnDone, which deletes the reactor.
class WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public EventSink {
 public:
  bool Write(const v1::Event& event) override {
    bool own_buffer = false;
    buffer_.Clear();  // the previous event's, written by now
    if (!grpc::SerializationTraits<v1::Event>::Serialize(event, &buffer_, &own_buffer).ok()) {
      return false;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cancelled_) return false;
    write_pending_ = true;
    lock.unlock();  // OnWriteDone takes the lock, and gRPC may call it before StartWrite returns
    StartWrite(&buffer_);
    lock.lock();
    cv_.wait(lock, [this] { return !write_pending_; });  // a cancelled write ends with ok false
    return write_ok_;
  }
  bool IsCancelled() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    write_pending_ = false;
    write_ok_ = ok;
    cv_.notify_all();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer buffer_;  // the event being written
  mutable std::mutex mu_;    // guards the flags below
  std::condition_variable cv_;
  bool write_pending_ = false;
  bool write_ok_ = true;
  bool cancelled_ = false;
};

// One agent's HeartbeatStream. Each request read is decoded, run on the loop as a Heartbeat
// call (DhpService::Dispatch, through the Authorizer with the stream's credential, so that every
// request is checked as a unary one is) and its answer written on the finisher, before the next
// is read. One operation is in flight at a time, so whichever step ends the stream calls Finish,
// once: the agent closing its side or cancelling (a read that fails) ends it OK, a refused
// request with Heartbeat's status. gRPC then calls OnDone, which deletes the reactor; a call
// still on the loop keeps it alive, since Finish waits for it.
class HeartbeatStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  HeartbeatStreamReactor(std::string token, DhpService& service, const Authorizer& authz,
                         SerialWorker& finisher)
      : token_(std::move(token)), service_(service), authz_(authz), finisher_(finisher) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    auto req = std::make_shared<v1::HeartbeatRequest>();
    absl::Status decoded = DecodeRequest(in_, req.get());
    in_.Clear();
    if (!decoded.ok()) {  // who first: a stranger learns nothing about what it sent
      absl::StatusOr<Identity> who = authz_.auth().Authenticate(token_);
      Finish(ToGrpcStatus(who.ok() ? decoded : who.status()));
      return;
    }
    auto resp = std::make_shared<v1::HeartbeatResponse>();
    service_.Dispatch(
        [this, req, resp] {
          return authz_.Call(token_, "Heartbeat", &DhpService::Heartbeat, *req, resp.get());
        },
        [this, resp](const absl::Status& s) {
          finisher_.Post([this, resp, s] { Answer(s, *resp); });
        },
        Lane::kWorker);
  }

  void OnWriteDone(bool ok) override {
    if (ok) {
      StartRead(&in_);
    } else {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "HeartbeatStream: the agent has gone"));
    }
  }

  void OnDone() override { delete this; }

 private:
  void Answer(const absl::Status& s, const v1::HeartbeatResponse& resp) {
    grpc::Status status = ToGrpcStatus(s);
    bool own_buffer = false;
    out_.Clear();
    if (status.ok()) {
      status =
          grpc::SerializationTraits<v1::HeartbeatResponse>::Serialize(resp, &out_, &own_buffer);
    }
    if (status.ok()) {
      StartWrite(&out_);
    } else {
      Finish(status);
    }
  }

  const std::string token_;
  DhpService& service_;
  const Authorizer& authz_;
  SerialWorker& finisher_;
  grpc::ByteBuffer in_;   // the request being read
  grpc::ByteBuffer out_;  // the answer being written
};

}  // namespace

// The three gRPC services of dhp.v1 in one object: each method of api/methods.h forwards to
// the same-named DhpService method through the Authorizer (api/authz.h). Registered once per
// service.
class GrpcServices final : public RawJobService, public RawNodeService, public RawWorkerService {
 public:
  GrpcServices(DhpService& service, const TokenAuth& auth, int max_threads)
      : service_(service), authz_(auth, service), calls_("dhp-grpc-call", max_threads) {}
  ~GrpcServices() override {
    calls_.Stop();
    finisher_.Stop();
  }

#define DHP_GRPC_UNARY(S, M, A, V, P, D)                                                      \
  grpc::ServerUnaryReactor* M(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req, \
                              grpc::ByteBuffer* resp) override {                              \
    return Serve<v1::M##Request, v1::M##Response>(ctx, #M, &DhpService::M, *req, resp);       \
  }
  DHP_UNARY_METHODS(DHP_GRPC_UNARY)
#undef DHP_GRPC_UNARY

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* HeartbeatStream(
      grpc::CallbackServerContext* ctx) override {
    return new HeartbeatStreamReactor(std::string(Authorization(ctx)), service_, authz_,
                                      finisher_);
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* bytes) override {
    auto* reactor = new WatchReactor();
    std::string token(Authorization(ctx));
    auto req = std::make_shared<v1::WatchJobRequest>();
    if (absl::Status s = Decode(bytes, token, req.get()); !s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    if (!calls_.TryRun([this, reactor, token = std::move(token), req] {
          reactor->Finish(ToGrpcStatus(authz_.Watch(token, *req, *reactor)));
        })) {
      reactor->Finish(Busy("WatchJob"));
    }
    return reactor;
  }

 private:
  // One call: decoded here, on gRPC's thread; run on the loop (DhpService::Dispatch) or, for
  // the methods that may block, on calls_; finished from there. SubmitJob's stateless part
  // (authentication, the spec parsed and validated) runs first, here, so that the loop does
  // not parse YAML. A call the loop ran is finished (the response serialized and written) on
  // finisher_: Finish does that work inline, and on the loop it was ~40% of the loop's time.
  template <typename Req, typename Resp>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, const char* method,
                                  absl::Status (DhpService::*call)(const Req&, Resp*),
                                  const grpc::ByteBuffer& bytes, grpc::ByteBuffer* out) {
    grpc::ServerUnaryReactor* reactor = nullptr;
    std::shared_ptr<CancelSignal> cancel;  // the rendezvous waits': see WaitReactor
    if constexpr (AsyncMethod<Req, Resp>() != nullptr) {
      auto* wait = new WaitReactor();
      cancel = wait->cancel;
      reactor = wait;
    } else {
      reactor = ctx->DefaultReactor();
    }
    std::string token(Authorization(ctx));
    auto m = std::make_shared<CallMessages<Req, Resp>>();  // kept alive by the lambdas below
    Req* const req = m->req;
    Resp* const resp = m->resp;
    if (absl::Status s = Decode(&bytes, token, req); !s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    if constexpr (std::is_same_v<Req, v1::SubmitJobRequest>) {
      if (absl::Status s = authz_.Prepare(token, req); !s.ok()) {
        reactor->Finish(ToGrpcStatus(s));
        return reactor;
      }
    }
    auto finish = [reactor, m, resp, out](const absl::Status& s) {
      grpc::Status status = ToGrpcStatus(s);
      bool own_buffer = false;
      if (status.ok()) status = grpc::SerializationTraits<Resp>::Serialize(*resp, out, &own_buffer);
      reactor->Finish(status);
    };
    if constexpr (std::is_same_v<Req, v1::SubmitJobRequest>) {  // queued; stored in batches
      authz_.SubmitAsync(token, *req, resp, [this, finish](const absl::Status& s) {
        finisher_.Post([finish, s] { finish(s); });
      });
      return reactor;
    }
    if constexpr (AsyncMethod<Req, Resp>() != nullptr) {
      authz_.CallAsync(token, method, AsyncMethod<Req, Resp>(), *req, resp,
                       [this, finish](const absl::Status& s) {
                         finisher_.Post([finish, s] { finish(s); });
                       },
                       std::move(cancel));
      return reactor;
    }
    auto run = [this, token = std::move(token), method, call, m, req, resp] {
      return authz_.Call(token, method, call, *req, resp);
    };
    if (MayBlock(method)) {
      if (!calls_.TryRun([run = std::move(run), finish] { finish(run()); })) {
        reactor->Finish(Busy(method));
      }
      return reactor;
    }
    service_.Dispatch(
        std::move(run),
        [this, finish](const absl::Status& s) { finisher_.Post([finish, s] { finish(s); }); },
        LaneOf(method));
    return reactor;
  }

  // The request decoded, or why not: the caller is authenticated first (who, before what).
  absl::Status Decode(const grpc::ByteBuffer* bytes, std::string_view token,
                      google::protobuf::Message* req) const {
    absl::Status s = DecodeRequest(*bytes, req);
    if (s.ok()) return s;
    absl::StatusOr<Identity> who = authz_.auth().Authenticate(token);
    return who.ok() ? s : who.status();
  }

  grpc::Status Busy(std::string_view method) const {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        std::string(method) + ": the controller is already running " +
                            std::to_string(calls_.Threads()) +
                            " calls that may block (listen.grpc_max_threads); retry later");
  }

  DhpService& service_;
  const Authorizer authz_;
  CallPool calls_;                            // the methods that MayBlock; stopped first
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
  auto services = std::make_unique<GrpcServices>(service, s->auth_, max_threads);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, ServerCredentials(tls), &s->port_);
  builder.RegisterService(static_cast<v1::JobService::Service*>(services.get()));
  builder.RegisterService(static_cast<v1::NodeService::Service*>(services.get()));
  builder.RegisterService(static_cast<v1::WorkerService::Service*>(services.get()));
  s->services_ = std::move(services);
  builder.SetMaxReceiveMessageSize(16 << 20);
  // No BDP probing: it sends a PING (and reads its ACK) on connections that receive data, and
  // each of 10,000 agents' connections gets a heartbeat every 2 s; that cost ~10% of the CPU
  // per heartbeat (bench/results/control_plane.md, stop 42). The window it would have tuned is
  // fixed instead, at 1 MiB per stream: uploads (AppendLogs, SubmitJob) run at 1 GB/s at 1 ms RTT.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1 << 20);
  if (max_threads > 0) {  // gRPC's own synchronous threads (server reflection)
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
