// Tests the gRPC server's asynchronous methods: a call handed to DhpService::Dispatch holds no
// server thread while it waits, and is answered once the service runs it.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <future>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/fake_owners_service.h"
#include "api/grpc_server.h"
#include "common/test_gate.h"
#include "dhp/v1/service.grpc.pb.h"

namespace dhp::api {
namespace {

// Threads of this process (/proc/self/status).
int ThreadCount() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "Threads:") {
      int n = 0;
      status >> n;
      return n;
    }
  }
  return -1;
}

// Holds every dispatched call until RunHeld(), as a busy controller loop would.
class HeldService : public FakeOwnersService {
 public:
  void Dispatch(std::function<absl::Status()> call, Done done, Lane lane) override {
    std::lock_guard<std::mutex> lock(mu_);
    held_.emplace_back(std::move(call), std::move(done));
    lanes_.push_back(lane);
    cv_.notify_all();
  }
  std::vector<Lane> lanes() {
    std::lock_guard<std::mutex> lock(mu_);
    return lanes_;
  }
  bool WaitHeld(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return held_.size() >= n; });
  }
  void RunHeld() {  // on this thread, one at a time (the fake is not thread-safe)
    std::vector<std::pair<std::function<absl::Status()>, Done>> calls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls.swap(held_);
    }
    for (auto& [call, done] : calls) done(call());
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::function<absl::Status()>, Done>> held_;
  std::vector<Lane> lanes_;  // of every call dispatched
};

struct PendingBeat {
  grpc::ClientContext ctx;
  v1::HeartbeatRequest req;
  v1::HeartbeatResponse resp;
  grpc::Status status;
  bool done = false;
};

TEST(GrpcAsyncTest, CallsWaitingForTheServiceHoldNoServerThread) {
  HeldService service;
  service.record_names = false;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 64);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::WorkerService::NewStub(channel);
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));

  constexpr int kCalls = 300;  // more than the server's 64 threads
  const int threads_before = ThreadCount();
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<std::unique_ptr<PendingBeat>> beats;
  for (int i = 0; i < kCalls; ++i) {
    auto beat = std::make_unique<PendingBeat>();
    beat->req.set_node_id("n" + std::to_string(i));
    PendingBeat* b = beat.get();
    stub->async()->Heartbeat(&b->ctx, &b->req, &b->resp, [&, b](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      b->status = std::move(s);
      b->done = true;
      ++finished;
      cv.notify_all();
    });
    beats.push_back(std::move(beat));
  }
  ASSERT_TRUE(service.WaitHeld(kCalls));
  // 300 calls wait, none answered: a synchronous server would hold a thread for each (and
  // could not, with at most 64).
  const int threads_waiting = ThreadCount();
  std::printf("threads: %d before the calls, %d while %d wait\n", threads_before, threads_waiting, kCalls);
  EXPECT_LT(threads_waiting - threads_before, 40)
      << threads_before << " threads before the calls, " << threads_waiting << " while they wait";
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(finished, 0);
  }
  service.RunHeld();
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return finished == kCalls; }));
  for (const auto& b : beats) {
    ASSERT_TRUE(b->done);
    EXPECT_TRUE(b->status.ok()) << b->status.error_message();
    ASSERT_EQ(b->resp.ranks_size(), 1);  // the fake launches one rank of j-1
    EXPECT_EQ(b->resp.ranks(0).job_id(), "j-1");
  }
  EXPECT_EQ(service.calls, kCalls);
  lock.unlock();
  (*server)->Shutdown();
}

static_assert(LaneOf("Heartbeat") == Lane::kWorker && LaneOf("HeartbeatBatch") == Lane::kWorker &&
              LaneOf("ReportProgress") == Lane::kWorker && LaneOf("KvSet") == Lane::kWorker);
static_assert(LaneOf("SubmitJob") == Lane::kUser && LaneOf("GetJob") == Lane::kUser &&
              LaneOf("ListNodes") == Lane::kUser && LaneOf("DrainNode") == Lane::kUser);

// Each call is dispatched in its method's lane: users' calls can go ahead of the workers'.
TEST(GrpcAsyncTest, CallsAreDispatchedInTheirMethodsLane) {
  HeldService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 64);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto workers = v1::WorkerService::NewStub(channel);
  auto jobs = v1::JobService::NewStub(channel);
  std::promise<grpc::Status> beat_done, get_done;
  grpc::ClientContext beat_ctx, get_ctx;
  v1::HeartbeatRequest beat;
  beat.set_node_id("n1");
  v1::HeartbeatResponse beat_resp;
  workers->async()->Heartbeat(&beat_ctx, &beat, &beat_resp,
                              [&](grpc::Status s) { beat_done.set_value(std::move(s)); });
  ASSERT_TRUE(service.WaitHeld(1));
  v1::GetJobRequest get;
  get.set_job_id("j-1");
  v1::GetJobResponse get_resp;
  jobs->async()->GetJob(&get_ctx, &get, &get_resp,
                        [&](grpc::Status s) { get_done.set_value(std::move(s)); });
  ASSERT_TRUE(service.WaitHeld(2));
  EXPECT_EQ(service.lanes(), (std::vector<Lane>{Lane::kWorker, Lane::kUser}));
  service.RunHeld();
  EXPECT_TRUE(beat_done.get_future().get().ok());
  get_done.get_future().get();  // answered (the fake may not know the job)
  (*server)->Shutdown();
}

TEST(GrpcAsyncTest, MethodsRunOffTheLoopAnswerWithoutDispatch) {
  HeldService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 64);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::WorkerService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::KvGetRequest req;
  req.mutable_scope()->set_job_id("j-1");
  v1::KvGetResponse resp;
  const grpc::Status s = stub->KvGet(&ctx, req, &resp);  // KvGetAsync: answered at once
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(service.calls, 1);
  (*server)->Shutdown();
}

// GetLogs held in the service until the gate opens, as a read of a large log file would be.
class BlockingLogsService : public FakeOwnersService {
 public:
  absl::Status GetLogs(const v1::GetLogsRequest&, v1::GetLogsResponse*) override {
    ++calls_waited;
    gate.Block();
    return absl::OkStatus();
  }
  std::atomic<int> calls_waited{0};
  Gate gate;
};

struct PendingLogs {
  grpc::ClientContext ctx;
  v1::GetLogsRequest req;
  v1::GetLogsResponse resp;
  grpc::Status status;
  std::atomic<bool> done{false};
};

// Methods that may block run on a pool bounded by max_threads: past the bound a call is
// refused at once with RESOURCE_EXHAUSTED, and the pool's threads serve later calls.
TEST(GrpcAsyncTest, CallsThatMayBlockAreBoundedByMaxThreads) {
  BlockingLogsService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 2);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::JobService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  std::vector<std::unique_ptr<PendingLogs>> calls;
  for (int i = 0; i < 2; ++i) {
    auto c = std::make_unique<PendingLogs>();
    PendingLogs* p = c.get();
    p->req.set_job_id("j-1");
    stub->async()->GetLogs(&p->ctx, &p->req, &p->resp, [p](grpc::Status s) {
      p->status = std::move(s);
      p->done = true;
    });
    calls.push_back(std::move(c));
  }
  ASSERT_TRUE(service.gate.WaitBlocked(2));
  v1::GetLogsRequest req;
  req.set_job_id("j-1");
  {
    grpc::ClientContext ctx;
    v1::GetLogsResponse resp;
    const grpc::Status s = stub->GetLogs(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_EQ(s.error_message(),
              "GetLogs: the controller is already running 2 calls that may block "
              "(listen.grpc_max_threads); retry later");
  }
  service.gate.Release();
  for (const auto& c : calls) {
    for (int i = 0; i < 2000 && !c->done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(c->done);
    EXPECT_TRUE(c->status.ok()) << c->status.error_message();
  }
  grpc::ClientContext ctx;
  v1::GetLogsResponse resp;
  EXPECT_TRUE(stub->GetLogs(&ctx, req, &resp).ok());  // a freed thread serves it
  EXPECT_EQ(service.calls_waited.load(), 3);
  (*server)->Shutdown();
}

// KvWait the asynchronous way: every call is held (its `done` kept) until EndAll.
class AsyncKvService : public FakeOwnersService {
 public:
  void KvWaitAsync(const v1::KvWaitRequest&, v1::KvWaitResponse*, Done done,
                   std::shared_ptr<CancelSignal>) override {
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back(std::move(done));
    cv_.notify_all();
  }
  bool WaitHeld(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return held_.size() >= n; });
  }
  void EndAll() {
    std::vector<Done> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (Done& done : held) done(absl::OkStatus());
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Done> held_;
};

struct PendingWait {
  grpc::ClientContext ctx;
  v1::KvWaitRequest req;
  v1::KvWaitResponse resp;
  grpc::Status status;
  std::atomic<bool> done{false};
};

// A rendezvous of more ranks than max_threads: 1,000 KvWait calls wait at once with a bound of
// 2 threads, none is refused, no thread is started for them, and all are answered when the
// service ends them.
TEST(GrpcAsyncTest, KvWaitsHoldNoThreadAndAreNotBoundedByMaxThreads) {
  constexpr size_t kWaits = 1000;
  AsyncKvService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 2);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::WorkerService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  {  // warm up: the channel and gRPC's own threads
    auto p = std::make_unique<PendingWait>();
    stub->async()->KvWait(&p->ctx, &p->req, &p->resp, [&](grpc::Status) { p->done = true; });
    ASSERT_TRUE(service.WaitHeld(1));
    service.EndAll();
    for (int i = 0; i < 1000 && !p->done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(p->done);
  }
  const int threads_before = ThreadCount();
  std::vector<std::unique_ptr<PendingWait>> waits;
  for (size_t i = 0; i < kWaits; ++i) {
    auto w = std::make_unique<PendingWait>();
    PendingWait* p = w.get();
    stub->async()->KvWait(&p->ctx, &p->req, &p->resp, [p](grpc::Status s) {
      p->status = std::move(s);
      p->done = true;
    });
    waits.push_back(std::move(w));
  }
  ASSERT_TRUE(service.WaitHeld(kWaits));
  EXPECT_LT(ThreadCount(), threads_before + 10) << "threads before: " << threads_before;
  service.EndAll();
  for (const auto& w : waits) {
    for (int i = 0; i < 2000 && !w->done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(w->done);
    EXPECT_TRUE(w->status.ok()) << w->status.error_message();
  }
  (*server)->Shutdown();
}

// A watch that streams one event per 10 ms until its client goes.
class EndlessWatchService : public FakeOwnersService {
 public:
  absl::Status WatchJob(const v1::WatchJobRequest& req, EventSink& sink) override {
    ++watches;
    v1::Event event;
    event.set_job_id(req.job_id());
    while (!sink.IsCancelled()) {
      if (!sink.Write(event)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ++ended;
    return absl::OkStatus();
  }
  std::atomic<int> watches{0};
  std::atomic<int> ended{0};
};

// Watch streams hold a thread of the bounded pool each, stream their events, and give the
// thread back when the client cancels.
TEST(GrpcAsyncTest, WatchStreamsShareTheBoundAndFreeItWhenCancelled) {
  EndlessWatchService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 2);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::JobService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  v1::WatchJobRequest req;
  req.set_job_id("j-7");
  grpc::ClientContext a, b;
  auto first = stub->WatchJob(&a, req);
  auto second = stub->WatchJob(&b, req);
  v1::Event event;
  for (int i = 0; i < 3; ++i) {  // both stream
    ASSERT_TRUE(first->Read(&event));
    EXPECT_EQ(event.job_id(), "j-7");
    ASSERT_TRUE(second->Read(&event));
  }
  {
    grpc::ClientContext c;
    auto third = stub->WatchJob(&c, req);
    EXPECT_FALSE(third->Read(&event));
    const grpc::Status s = third->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  a.TryCancel();
  while (first->Read(&event)) {
  }
  EXPECT_EQ(first->Finish().error_code(), grpc::StatusCode::CANCELLED);
  for (int i = 0; i < 500 && service.ended < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(service.ended.load(), 1);  // the server's watch saw the cancel and returned
  // The freed thread serves a fourth, once it has finished the first call (it may still be
  // doing so just after the watch returned: then the fourth is refused and asked again).
  std::unique_ptr<grpc::ClientContext> d;
  std::unique_ptr<grpc::ClientReader<v1::Event>> fourth;
  for (int i = 0; i < 100; ++i) {
    d = std::make_unique<grpc::ClientContext>();
    fourth = stub->WatchJob(d.get(), req);
    if (fourth->Read(&event)) break;
    EXPECT_EQ(fourth->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    fourth.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(fourth, nullptr);
  EXPECT_EQ(service.watches.load(), 3);
  b.TryCancel();
  d->TryCancel();
  while (second->Read(&event) || fourth->Read(&event)) {
  }
  second->Finish();
  fourth->Finish();
  (*server)->Shutdown();
}

// Who the caller is comes before what they sent: undecodable bytes without the token are
// UNAUTHENTICATED, with it INVALID_ARGUMENT.
TEST(GrpcAsyncTest, UndecodableRequestsAreAuthenticatedFirst) {
  FakeOwnersService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth("s3cret"), TlsPems(), 8);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::NodeService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  v1::DrainNodeRequest req;
  req.set_node_id("n\xff");  // the generated stub sends it (protobuf only logs a complaint)
  for (const bool with_token : {false, true}) {
    grpc::ClientContext ctx;
    if (with_token) ctx.AddMetadata("authorization", "Bearer s3cret");
    v1::DrainNodeResponse resp;
    const grpc::Status s = stub->DrainNode(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), with_token ? grpc::StatusCode::INVALID_ARGUMENT
                                         : grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();
  }
  EXPECT_EQ(service.calls, 0);
  (*server)->Shutdown();
}

}  // namespace
}  // namespace dhp::api
