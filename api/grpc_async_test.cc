// Tests the gRPC server's asynchronous methods: a call handed to DhpService::Dispatch holds no
// server thread while it waits, and is answered once the service runs it.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/fake_owners_service.h"
#include "api/grpc_server.h"
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
  void Dispatch(std::function<absl::Status()> call, Done done) override {
    std::lock_guard<std::mutex> lock(mu_);
    held_.emplace_back(std::move(call), std::move(done));
    cv_.notify_all();
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

TEST(GrpcAsyncTest, SynchronousMethodsStillAnswer) {
  HeldService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 64);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::WorkerService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::KvGetRequest req;
  req.mutable_scope()->set_job_id("j-1");
  v1::KvGetResponse resp;
  const grpc::Status s = stub->KvGet(&ctx, req, &resp);  // not dispatched: answered at once
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(service.calls, 1);
  (*server)->Shutdown();
}

}  // namespace
}  // namespace dhp::api
