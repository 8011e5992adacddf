// A rank's rendezvous client (worker/comm GrpcKvClient) against a real controller over gRPC on
// loopback, across controller restarts (issue 15 §5): the controller is stopped and started
// again on the same database and port, as a restarted dhp-controller would be.
//
// Before: the client returned UNAVAILABLE at once and the controller kept the keys in memory
// only, so a restart during rendezvous failed the attempt. Now the client retries UNAVAILABLE
// within its deadline, the keys survive in the store, and an Add or Delete whose reply was lost
// (applied, then the connection or the controller went away) is applied once, not twice.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "api/client.h"
#include "api/grpc_server.h"
#include "api/service.h"
#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "controller/controller.h"
#include "controller/store.h"
#include "gtest/gtest.h"
#include "worker/comm/grpc_kv_client.h"

namespace dhp {
namespace {

using namespace std::chrono_literals;

constexpr char kSpec[] =
    "name: demo\n"
    "model: {preset: tiny}\n"
    "training: {max_steps: 10}\n"
    "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";

// Forwards every call to the controller, except that it can lose the reply of one call (the
// call runs, its caller gets UNAVAILABLE) and then play dead (every later call UNAVAILABLE), as
// a controller that crashed after applying a change and before answering.
class LossyService : public api::DhpService {
 public:
  explicit LossyService(api::DhpService& inner) : inner_(inner) {}

  // The next call of `method` (e.g. "KvAdd") loses its reply; with `then_down`, so do all later
  // calls, without running.
  void LoseNextReply(const std::string& method, bool then_down) {
    std::lock_guard<std::mutex> lock(mu_);
    lose_ = method;
    then_down_ = then_down;
  }
  // Waits up to 10 s for the reply to be lost; false if it was not.
  bool WaitUntilLost() {
    std::unique_lock<std::mutex> lock(mu_);
    return lost_cv_.wait_for(lock, 10s, [&] { return lost_; });
  }

#define DHP_LOSSY_UNARY(S, M, A, V, P, D)                                        \
  absl::Status M(const v1::M##Request& req, v1::M##Response* resp) override {   \
    if (down_) return absl::UnavailableError("down");                            \
    return AfterCall(#M, inner_.M(req, resp));                                   \
  }
  DHP_UNARY_METHODS(DHP_LOSSY_UNARY)
#undef DHP_LOSSY_UNARY
  absl::Status WatchJob(const v1::WatchJobRequest& req, api::EventSink& sink) override {
    return inner_.WatchJob(req, sink);
  }
  void Dispatch(std::function<absl::Status()> call, Done done, api::Lane lane) override {
    inner_.Dispatch(std::move(call), std::move(done), lane);
  }
  void KvGetAsync(const v1::KvGetRequest& req, v1::KvGetResponse* resp, Done done,
                  std::shared_ptr<CancelSignal> cancel) override {
    if (down_) return done(absl::UnavailableError("down"));
    inner_.KvGetAsync(
        req, resp, [this, done](const absl::Status& s) { done(AfterCall("KvGet", s)); },
        std::move(cancel));
  }
  void KvWaitAsync(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp, Done done,
                   std::shared_ptr<CancelSignal> cancel) override {
    if (down_) return done(absl::UnavailableError("down"));
    inner_.KvWaitAsync(
        req, resp, [this, done](const absl::Status& s) { done(AfterCall("KvWait", s)); },
        std::move(cancel));
  }
  absl::Status Health() override { return inner_.Health(); }
  std::string MetricsText() override { return inner_.MetricsText(); }

 private:
  absl::Status AfterCall(const char* method, absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (lose_ != method) return status;
    lose_.clear();
    lost_ = true;
    down_ = then_down_;
    lost_cv_.notify_all();
    return absl::UnavailableError("the reply was lost");
  }

  api::DhpService& inner_;
  std::mutex mu_;  // guards lose_, then_down_, lost_
  std::condition_variable lost_cv_;
  std::string lose_;
  bool then_down_ = false;
  bool lost_ = false;
  std::atomic<bool> down_{false};
};

class RendezvousRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
            std::to_string(getpid()) + ".db";
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
    options_.nodes.heartbeat_timeout_ms = 600000;
    Start();
    v1::SubmitJobRequest submit;  // queued: attempt 1 is current, its run PENDING
    submit.set_spec_text(kSpec);
    v1::SubmitJobResponse submitted;
    ASSERT_TRUE(controller_->SubmitJob(submit, &submitted).ok());
    job_id_ = submitted.job().id();
    client_ = std::make_unique<api::DhpClient>(target_, 10000);
  }
  void TearDown() override {
    Stop();
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
  }

  // Opens the store, starts a controller on it and serves it over gRPC: on a free port the
  // first time, on the same port after.
  void Start() {
    absl::StatusOr<std::unique_ptr<controller::Store>> store = controller::Store::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    metrics_ = std::make_unique<MetricsExposition>();
    controller_ =
        std::make_unique<controller::Controller>(*store_, clock_, *metrics_, options_);
    controller_->Start();
    lossy_ = std::make_unique<LossyService>(*controller_);
    absl::StatusOr<std::unique_ptr<api::GrpcServer>> grpc =
        api::GrpcServer::Start("127.0.0.1:" + std::to_string(port_), *lossy_);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = std::move(*grpc);
    port_ = grpc_->port();
    target_ = "127.0.0.1:" + std::to_string(port_);
  }
  // As dhp-controller exits (controller/main.cc): rendezvous waits end, then the gRPC server
  // and the controller stop; only the database is left.
  void Stop() {
    if (controller_) controller_->CloseRendezvous();
    if (grpc_) grpc_->Shutdown(0);
    grpc_.reset();
    if (controller_) controller_->Stop();
    controller_.reset();
    lossy_.reset();
    store_.reset();
    metrics_.reset();
  }

  std::string path_;
  controller::ControllerOptions options_;
  SystemClock clock_;
  std::unique_ptr<MetricsExposition> metrics_;
  std::unique_ptr<controller::Store> store_;
  std::unique_ptr<controller::Controller> controller_;
  std::unique_ptr<LossyService> lossy_;
  std::unique_ptr<api::GrpcServer> grpc_;
  int port_ = 0;
  std::string target_;
  std::string job_id_;
  std::unique_ptr<api::DhpClient> client_;
};

TEST_F(RendezvousRestartTest, CallsMadeWhileTheControllerIsDownSucceedOnceItIsBack) {
  comm::GrpcKvClient kv(*client_, job_id_, 1);
  ASSERT_TRUE(kv.Set("world/arrived/0", "0").ok());
  Stop();
  std::thread restart([&] {
    std::this_thread::sleep_for(1s);
    Start();
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status set = kv.Set("world/arrived/1", "1");  // nothing listens for about a second
  restart.join();
  ASSERT_TRUE(set.ok()) << set;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
  // The key set before the restart is still there, for the same attempt.
  absl::StatusOr<bool> both = kv.Check({"world/arrived/0", "world/arrived/1"});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(*both);
  absl::StatusOr<std::string> got = kv.Get("world/arrived/0", 5s);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "0");
}

TEST_F(RendezvousRestartTest, ACallGivesUpWhenItsRetryDeadlineHasPassed) {
  comm::GrpcKvClientOptions options;
  options.retry_for = 500ms;
  comm::GrpcKvClient kv(*client_, job_id_, 1, options);
  Stop();  // and it does not come back
  auto start = std::chrono::steady_clock::now();
  absl::Status set = kv.Set("k", "v");
  EXPECT_EQ(set.code(), absl::StatusCode::kUnavailable) << set;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 450ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  start = std::chrono::steady_clock::now();  // a wait retries up to its own, longer, timeout
  absl::StatusOr<std::string> got = kv.Get("k", 1500ms);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1400ms);
}

TEST_F(RendezvousRestartTest, AGetWaitingWhileTheControllerRestartsSeesTheKeySetAfter) {
  comm::GrpcKvClient kv(*client_, job_id_, 1);
  Stop();
  std::thread restart_then_set([&] {
    std::this_thread::sleep_for(1s);
    Start();
    std::this_thread::sleep_for(200ms);
    api::DhpClient other(target_, 10000);
    comm::GrpcKvClient peer(other, job_id_, 1);
    EXPECT_TRUE(peer.Set("world/arrived/1", "1").ok());
  });
  absl::StatusOr<std::string> got = kv.Get("world/arrived/1", 30s);
  restart_then_set.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "1");
}

TEST_F(RendezvousRestartTest, AWaitInFlightWhenTheControllerStopsIsReissuedToTheNextOne) {
  comm::GrpcKvClient kv(*client_, job_id_, 1);
  ASSERT_TRUE(kv.Set("world/arrived/0", "0").ok());
  std::thread restart_then_set([&] {
    std::this_thread::sleep_for(300ms);  // the wait below is in flight at the controller
    const auto stopping = std::chrono::steady_clock::now();
    Stop();
    // The wait ended with the controller instead of holding up its shutdown.
    EXPECT_LT(std::chrono::steady_clock::now() - stopping, 5s);
    std::this_thread::sleep_for(300ms);
    Start();
    api::DhpClient other(target_, 10000);
    comm::GrpcKvClient peer(other, job_id_, 1);
    EXPECT_TRUE(peer.Set("world/arrived/1", "1").ok());
  });
  absl::Status waited = kv.Wait({"world/arrived/0", "world/arrived/1"}, 30s);
  restart_then_set.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST_F(RendezvousRestartTest, AnAddOrDeleteWhoseReplyIsLostIsAppliedOnce) {
  comm::GrpcKvClient kv(*client_, job_id_, 1);
  lossy_->LoseNextReply("KvAdd", /*then_down=*/false);
  absl::StatusOr<int64_t> sum = kv.Add("world/store/counter", 5);
  ASSERT_TRUE(lossy_->WaitUntilLost());
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, 5);  // the retry got the first answer; it did not add again
  sum = kv.Add("world/store/counter", 1);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, 6);

  ASSERT_TRUE(kv.Set("gone", "x").ok());
  lossy_->LoseNextReply("KvDelete", /*then_down=*/false);
  absl::StatusOr<bool> deleted = kv.Delete("gone");
  ASSERT_TRUE(lossy_->WaitUntilLost());
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(*deleted);  // as the first try answered, not "there was nothing to delete"
}

TEST_F(RendezvousRestartTest, AnAddAppliedJustBeforeACrashIsAppliedOnce) {
  comm::GrpcKvClient kv(*client_, job_id_, 1);
  ASSERT_TRUE(kv.Add("world/store/counter", 2).ok());
  lossy_->LoseNextReply("KvAdd", /*then_down=*/true);
  std::thread crash_and_restart([&] {
    if (!lossy_->WaitUntilLost()) return;
    Stop();
    std::this_thread::sleep_for(300ms);
    Start();
  });
  absl::StatusOr<int64_t> sum = kv.Add("world/store/counter", 5);
  crash_and_restart.join();
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, 7);  // the new controller answered the retry from the store
  sum = kv.Add("world/store/counter", 1);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, 8);
}

}  // namespace
}  // namespace dhp
