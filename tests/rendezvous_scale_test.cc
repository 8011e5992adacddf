// A rendezvous as a large job's ranks run it, against a real controller over gRPC on loopback:
// thousands of ranks wait (KvGet, KvWait) for keys that rank 0 sets later, while the server
// may run only 4 threads for calls that block. Before, each wait held one of those threads,
// so the fifth rank was refused with RESOURCE_EXHAUSTED; now a wait holds no thread.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/client.h"
#include "api/grpc_server.h"
#include "api/rest_gateway.h"
#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "controller/controller.h"
#include "controller/store.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

using namespace std::chrono_literals;

constexpr char kSpec[] =
    "name: big\n"
    "model: {preset: tiny}\n"
    "training: {max_steps: 10}\n"
    "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";

size_t Threads() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& t : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// One rank's call in flight.
struct Call {
  grpc::ClientContext ctx;
  v1::KvGetRequest get;
  v1::KvGetResponse got;
  v1::KvWaitRequest wait;
  v1::KvWaitResponse waited;
  grpc::Status status;
  std::atomic<bool> done{false};
};

// A REST client's POST of `body` to `path` on its own connection, left waiting; the socket.
int RestPost(uint16_t port, const std::string& path, const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: " +
                          "application/json\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) return -1;
  return fd;
}

// What arrives on `fd` until it holds `until` (or 10 s pass, or the peer closes).
std::string ReadUntil(int fd, const std::string& until) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (got.find(until) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

class RendezvousScaleTest : public ::testing::Test {
 protected:
  static constexpr int kMaxThreads = 4;

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<controller::Store>> store = controller::Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    options_.nodes.heartbeat_timeout_ms = 600000;
    controller_ = std::make_unique<controller::Controller>(*store_, clock_, metrics_, options_);
    controller_->Start();
    absl::StatusOr<std::unique_ptr<api::GrpcServer>> grpc = api::GrpcServer::Start(
        "127.0.0.1:0", *controller_, api::TokenAuth(), api::TlsPems(), kMaxThreads);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = std::move(*grpc);
    target_ = "127.0.0.1:" + std::to_string(grpc_->port());
    for (int i = 0; i < 4; ++i) {  // ranks on a few connections, as nodes would be
      grpc::ChannelArguments args;
      args.SetInt("dhp.channel", i);  // distinct channels, not one shared subchannel
      stubs_.push_back(v1::WorkerService::NewStub(
          grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args)));
    }
    v1::SubmitJobRequest submit;  // queued: attempt 1 is current
    submit.set_spec_text(kSpec);
    v1::SubmitJobResponse submitted;
    ASSERT_TRUE(controller_->SubmitJob(submit, &submitted).ok());
    job_id_ = submitted.job().id();
  }
  void TearDown() override {
    controller_->CloseRendezvous();
    grpc_->Shutdown(0);
    grpc_.reset();
    controller_->Stop();
  }

  v1::KvScope Scope(int attempt = 1) const {
    v1::KvScope scope;
    scope.set_job_id(job_id_);
    scope.set_attempt(attempt);
    return scope;
  }
  // Rank i's KvGet of `key` (even i) or KvWait for {key, "world/size"} (odd i), 60 s timeout;
  // the client gives up after `deadline` if it is set.
  std::unique_ptr<Call> Start(int i, const std::string& key, int attempt = 1,
                              std::chrono::milliseconds deadline = 0ms) {
    auto call = std::make_unique<Call>();
    Call* c = call.get();
    if (deadline > 0ms) c->ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    auto& stub = stubs_[i % stubs_.size()];
    auto done = [c](grpc::Status s) {
      c->status = std::move(s);
      c->done = true;
    };
    if (i % 2 == 0) {
      *c->get.mutable_scope() = Scope(attempt);
      c->get.set_key(key);
      c->get.set_timeout_ms(60000);
      stub->async()->KvGet(&c->ctx, &c->get, &c->got, done);
    } else {
      *c->wait.mutable_scope() = Scope(attempt);
      c->wait.add_keys(key);
      c->wait.add_keys("world/size");
      c->wait.set_timeout_ms(60000);
      stub->async()->KvWait(&c->ctx, &c->wait, &c->waited, done);
    }
    return call;
  }
  void Set(const std::string& key, const std::string& value) {
    v1::KvSetRequest set;
    *set.mutable_scope() = Scope();
    set.set_key(key);
    set.set_value(value);
    api::DhpClient client(target_);
    ASSERT_TRUE(client.KvSet(set).ok());
  }
  // Waits up to `limit` for every call to be answered.
  static bool AllDone(const std::vector<std::unique_ptr<Call>>& calls,
                      std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (const auto& c : calls) {
      while (!c->done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
      if (!c->done) return false;
    }
    return true;
  }
  bool WaitForWaiting(size_t n) {
    for (int i = 0; i < 3000 && controller_->KvWaiting() != n; ++i) {
      std::this_thread::sleep_for(10ms);
    }
    return controller_->KvWaiting() == n;
  }

  SystemClock clock_;
  MetricsExposition metrics_;
  controller::ControllerOptions options_;
  std::unique_ptr<controller::Store> store_;
  std::unique_ptr<controller::Controller> controller_;
  std::unique_ptr<api::GrpcServer> grpc_;
  std::string target_;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs_;
  std::string job_id_;
};

TEST_F(RendezvousScaleTest, ThousandsOfRanksWaitForRankZerosKeysOnFourThreads) {
  constexpr int kRanks = 4000;
  std::vector<std::unique_ptr<Call>> warm;  // the channels and gRPC's own threads
  for (int i = 0; i < 8; i += 2) warm.push_back(Start(i, "warm-up"));  // KvGets (even i)
  Set("warm-up", "1");
  ASSERT_TRUE(AllDone(warm, 10s));
  const size_t threads = Threads();
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < kRanks; ++i) calls.push_back(Start(i, "rank0/addr"));
  ASSERT_TRUE(WaitForWaiting(kRanks)) << controller_->KvWaiting() << " waiting";
  EXPECT_LT(Threads(), threads + 16) << "threads before the waits: " << threads;
  for (const auto& c : calls) EXPECT_FALSE(c->done) << c->status.error_message();

  Set("rank0/addr", "10.0.0.1:29500");  // ends the KvGets; the KvWaits lack world/size
  std::vector<std::unique_ptr<Call>> gets, waits;
  for (int i = 0; i < kRanks; ++i) (i % 2 == 0 ? gets : waits).push_back(std::move(calls[i]));
  ASSERT_TRUE(AllDone(gets, 30s));
  for (const auto& c : gets) {
    ASSERT_TRUE(c->status.ok()) << c->status.error_message();
    EXPECT_EQ(c->got.value(), "10.0.0.1:29500");
  }
  EXPECT_EQ(controller_->KvWaiting(), static_cast<size_t>(kRanks / 2));
  const std::string metrics = controller_->MetricsText();
  EXPECT_NE(metrics.find("\ndhp_rendezvous_waits 2000\n"), std::string::npos) << metrics;
  for (const auto& c : waits) EXPECT_FALSE(c->done);
  Set("world/size", "4000");
  ASSERT_TRUE(AllDone(waits, 30s));
  for (const auto& c : waits) ASSERT_TRUE(c->status.ok()) << c->status.error_message();
  EXPECT_EQ(controller_->KvWaiting(), 0u);
}

TEST_F(RendezvousScaleTest, WaitsOfAnAttemptThatEndsAreCancelledAndOldAttemptsRefused) {
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < 100; ++i) calls.push_back(Start(i, "never"));
  ASSERT_TRUE(WaitForWaiting(100));
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job_id_);
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(controller_->CancelJob(cancel, &cancelled).ok());
  ASSERT_TRUE(AllDone(calls, 30s));
  EXPECT_EQ(calls[0]->status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(calls[0]->status.error_message(),
            "rendezvous of job " + job_id_ + " attempt 1 was closed while waiting for \"never\"");
  EXPECT_EQ(calls[1]->status.error_message(),
            "rendezvous of job " + job_id_ +
                " attempt 1 was closed while waiting for \"never\", \"world/size\"");
  for (const auto& c : calls) EXPECT_EQ(c->status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(controller_->KvWaiting(), 0u);

  std::vector<std::unique_ptr<Call>> late;  // the attempt is over: refused at once
  late.push_back(Start(0, "k"));
  late.push_back(Start(1, "k", /*attempt=*/0));
  ASSERT_TRUE(AllDone(late, 10s));
  EXPECT_EQ(late[0]->status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(late[0]->status.error_message(),
            "job " + job_id_ + " is CANCELLED: the rendezvous of its attempts is over");
  EXPECT_EQ(late[1]->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(late[1]->status.error_message(), "scope.attempt: 0 must be at least 1");
}

// Ranks that give up (a crashed rank's connection reset, a client cancel, a client deadline
// shorter than the wait's timeout) leave no wait behind: it ends when they go, not 60 s later.
TEST_F(RendezvousScaleTest, WaitsWhoseClientsGiveUpEndAtOnce) {
  std::vector<std::unique_ptr<Call>> cancelled, expired, kept;
  for (int i = 0; i < 100; ++i) cancelled.push_back(Start(i, "rank0/addr"));
  for (int i = 0; i < 100; ++i) expired.push_back(Start(i, "rank0/addr", 1, 1500ms));
  for (int i = 0; i < 100; ++i) kept.push_back(Start(i, "rank0/addr"));
  ASSERT_TRUE(WaitForWaiting(300)) << controller_->KvWaiting() << " waiting";
  for (const auto& c : cancelled) c->ctx.TryCancel();
  ASSERT_TRUE(AllDone(cancelled, 10s));
  ASSERT_TRUE(AllDone(expired, 10s));
  for (const auto& c : cancelled) EXPECT_EQ(c->status.error_code(), grpc::StatusCode::CANCELLED);
  for (const auto& c : expired) {
    EXPECT_EQ(c->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  ASSERT_TRUE(WaitForWaiting(100)) << controller_->KvWaiting() << " waiting, not 100";
  EXPECT_NE(controller_->MetricsText().find("\ndhp_rendezvous_waits 100\n"), std::string::npos);
  for (const auto& c : kept) EXPECT_FALSE(c->done) << c->status.error_message();
  Set("rank0/addr", "10.0.0.1:29500");
  Set("world/size", "100");
  ASSERT_TRUE(AllDone(kept, 30s));
  for (const auto& c : kept) EXPECT_TRUE(c->status.ok()) << c->status.error_message();
  EXPECT_EQ(controller_->KvWaiting(), 0u);
}

// The same over REST, where a wait holds its connection's thread: clients that close their
// connection leave no wait behind (the thread notices within 100 ms and cancels it); the others
// get their answer when the keys come.
TEST_F(RendezvousScaleTest, RestWaitsWhoseClientsCloseTheirConnectionEndAtOnce) {
  api::RestGatewayOptions rest_options;
  rest_options.address = "127.0.0.1";
  api::RestGateway rest(*controller_, rest_options);
  ASSERT_TRUE(rest.Start().ok());
  const std::string scope = "{\"job_id\": \"" + job_id_ + "\", \"attempt\": 1}";
  const std::string get = "{\"scope\": " + scope + ", \"key\": \"rank0/addr\", " +
                          "\"timeout_ms\": 60000}";
  const std::string wait = "{\"scope\": " + scope + ", \"keys\": [\"rank0/addr\", " +
                           "\"world/size\"], \"timeout_ms\": 60000}";
  std::vector<int> gone, kept_gets, kept_waits;
  for (int i = 0; i < 10; ++i) gone.push_back(RestPost(rest.port(), "/v1/kv:get", get));
  for (int i = 0; i < 10; ++i) gone.push_back(RestPost(rest.port(), "/v1/kv:wait", wait));
  for (int i = 0; i < 5; ++i) kept_gets.push_back(RestPost(rest.port(), "/v1/kv:get", get));
  for (int i = 0; i < 5; ++i) kept_waits.push_back(RestPost(rest.port(), "/v1/kv:wait", wait));
  ASSERT_TRUE(WaitForWaiting(30)) << controller_->KvWaiting() << " waiting, not 30";
  for (int fd : gone) close(fd);
  ASSERT_TRUE(WaitForWaiting(10)) << controller_->KvWaiting() << " waiting, not 10";
  Set("rank0/addr", "10.0.0.1:29500");
  Set("world/size", "100");
  for (int fd : kept_gets) {
    const std::string answer = ReadUntil(fd, "}");
    EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
    EXPECT_NE(answer.find("\"value\":\"MTAuMC4wLjE6Mjk1MDA=\""), std::string::npos) << answer;
    close(fd);
  }
  for (int fd : kept_waits) {
    const std::string answer = ReadUntil(fd, "}");
    EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
    close(fd);
  }
  EXPECT_EQ(controller_->KvWaiting(), 0u);
}

TEST_F(RendezvousScaleTest, ShuttingDownEndsTheWaitsWithUnavailable) {
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < 50; ++i) calls.push_back(Start(i, "never"));
  ASSERT_TRUE(WaitForWaiting(50));
  controller_->CloseRendezvous();
  ASSERT_TRUE(AllDone(calls, 10s));
  for (const auto& c : calls) {
    EXPECT_EQ(c->status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(c->status.error_message(), "the controller is shutting down");
  }
}

}  // namespace
}  // namespace dhp
