// RankReporter against a real gRPC server on loopback with a fake DhpService that records
// ReportProgress calls: newest step, rate limiting, heartbeats, the stop flag, the watchdog's
// waiting_on, and a training thread that never waits for a slow or absent controller.
#include "worker/rank/rank_reporter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "api/grpc_server.h"
#include "api/service.h"
#include "worker/comm/inflight.h"

namespace dhp {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Received {
  v1::ReportProgressRequest req;
  Clock::time_point at;
};

// Answers ReportProgress from its knobs and records every request; everything else is
// UNIMPLEMENTED. Thread-safe (mu_ guards all state).
class FakeProgressService : public api::DhpService {
 public:
  void SetStop(bool stop) {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = stop;
  }
  void SetCheckpointAt(int64_t step) {  // -1: no checkpoint asked
    std::lock_guard<std::mutex> lock(mu_);
    checkpoint_at_ = step;
  }
  void SetPreempt(std::string reason) {  // "": not asked
    std::lock_guard<std::mutex> lock(mu_);
    preempt_reason_ = std::move(reason);
  }
  void SetError(absl::Status error) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
  }
  void SetNextReportMs(int ms) {
    std::lock_guard<std::mutex> lock(mu_);
    next_report_ms_ = ms;
  }
  void SetDelay(milliseconds delay) {
    std::lock_guard<std::mutex> lock(mu_);
    delay_ = delay;
  }
  std::vector<Received> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_.size();
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    received_.clear();
  }
  // Waits until some request satisfies `pred`; returns it.
  std::optional<Received> WaitFor(const std::function<bool(const v1::ReportProgressRequest&)>& pred,
                                  milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<Received> found;
    cv_.wait_for(lock, timeout, [&] {
      for (const Received& r : received_) {
        if (pred(r.req)) {
          found = r;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  absl::Status ReportProgress(const v1::ReportProgressRequest& req,
                              v1::ReportProgressResponse* resp) override {
    milliseconds delay;
    {
      std::lock_guard<std::mutex> lock(mu_);
      delay = delay_;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::lock_guard<std::mutex> lock(mu_);
    received_.push_back({req, Clock::now()});
    cv_.notify_all();
    if (!error_.ok()) return error_;
    resp->set_stop(stop_);
    if (checkpoint_at_ >= 0) {
      resp->set_checkpoint(true);
      resp->set_checkpoint_at_step(checkpoint_at_);
    }
    resp->set_preempt(!preempt_reason_.empty());
    resp->set_preempt_reason(preempt_reason_);
    resp->set_next_report_ms(next_report_ms_);
    return absl::OkStatus();
  }

#define DHP_FAKE_UNIMPLEMENTED(Method)                                          \
  absl::Status Method(const v1::Method##Request&, v1::Method##Response*) override { \
    return absl::UnimplementedError(#Method);                                   \
  }
  DHP_FAKE_UNIMPLEMENTED(SubmitJob)
  DHP_FAKE_UNIMPLEMENTED(GetJob)
  DHP_FAKE_UNIMPLEMENTED(ListJobs)
  DHP_FAKE_UNIMPLEMENTED(CancelJob)
  DHP_FAKE_UNIMPLEMENTED(ResumeJob)
  DHP_FAKE_UNIMPLEMENTED(CheckpointJob)
  DHP_FAKE_UNIMPLEMENTED(GetLogs)
  DHP_FAKE_UNIMPLEMENTED(ExportCheckpoint)
  DHP_FAKE_UNIMPLEMENTED(GetExport)
  DHP_FAKE_UNIMPLEMENTED(ListExports)
  DHP_FAKE_UNIMPLEMENTED(ListNodes)
  DHP_FAKE_UNIMPLEMENTED(DrainNode)
  DHP_FAKE_UNIMPLEMENTED(UncordonNode)
  DHP_FAKE_UNIMPLEMENTED(RegisterNode)
  DHP_FAKE_UNIMPLEMENTED(Heartbeat)
  DHP_FAKE_UNIMPLEMENTED(HeartbeatBatch)
  DHP_FAKE_UNIMPLEMENTED(KvSet)
  DHP_FAKE_UNIMPLEMENTED(KvGet)
  DHP_FAKE_UNIMPLEMENTED(KvAdd)
  DHP_FAKE_UNIMPLEMENTED(KvWait)
  DHP_FAKE_UNIMPLEMENTED(KvCheck)
  DHP_FAKE_UNIMPLEMENTED(KvDelete)
  DHP_FAKE_UNIMPLEMENTED(AppendLogs)
  DHP_FAKE_UNIMPLEMENTED(ReportCheckpoint)
  DHP_FAKE_UNIMPLEMENTED(RejectCheckpoint)
#undef DHP_FAKE_UNIMPLEMENTED
  absl::Status WatchJob(const v1::WatchJobRequest&, api::EventSink&) override {
    return absl::UnimplementedError("WatchJob");
  }
  absl::Status Health() override { return absl::OkStatus(); }
  std::string MetricsText() override { return ""; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t checkpoint_at_ = -1;
  std::string preempt_reason_;
  absl::Status error_;
  int next_report_ms_ = 0;
  milliseconds delay_{0};
  std::vector<Received> received_;
};

class RankReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartServer("127.0.0.1:0");
    client_ = std::make_unique<api::DhpClient>("127.0.0.1:" + std::to_string(port_), 3000);
  }
  void TearDown() override { StopServer(); }

  void StartServer(const std::string& address) {
    absl::StatusOr<std::unique_ptr<api::GrpcServer>> server =
        api::GrpcServer::Start(address, service_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    port_ = server_->port();
  }
  void StopServer() {
    if (server_ != nullptr) server_->Shutdown(0);
    server_.reset();
  }

  std::unique_ptr<RankReporter> Make(RankReporter::Options options) {
    return std::make_unique<RankReporter>(*client_, "j-1", 2, 3, options);
  }

  static StepReport Step(int64_t step, double loss = 1.0) {
    StepReport r;
    r.step = step;
    r.loss = loss;
    r.total_steps = 1000;
    r.tokens_per_second = 1234.5;
    r.step_seconds = 0.25;
    r.metrics["vision_tokens_per_s"] = 99;
    return r;
  }

  static auto StepIs(int64_t step) {
    return [step](const v1::ReportProgressRequest& r) { return r.step() == step; };
  }

  FakeProgressService service_;
  std::unique_ptr<api::GrpcServer> server_;
  int port_ = 0;
  std::unique_ptr<api::DhpClient> client_;
};

TEST_F(RankReporterTest, SendsTheNewestStepWithEveryFieldAndFlushWaitsForIt) {
  RankReporter::Options options;
  options.heartbeat_ms = 60000;
  auto reporter = Make(options);
  reporter->StepStarted(7);
  // Before any step finished: the steps before the first one are done; no loss yet (NaN).
  std::optional<Received> hello = service_.WaitFor(
      [](const v1::ReportProgressRequest&) { return true; }, milliseconds(5000));
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->req.job_id(), "j-1");
  EXPECT_EQ(hello->req.attempt(), 2);
  EXPECT_EQ(hello->req.rank(), 3);
  EXPECT_TRUE(std::isnan(hello->req.loss()));

  StepReport r = Step(7, 2.5);
  r.metrics["text_peak_memory_bytes"] = 4096;
  reporter->StepFinished(r);
  reporter->Flush(milliseconds(5000));
  std::vector<Received> got = service_.received();
  ASSERT_FALSE(got.empty());
  const v1::ReportProgressRequest& last = got.back().req;
  EXPECT_EQ(last.job_id(), "j-1");
  EXPECT_EQ(last.attempt(), 2);
  EXPECT_EQ(last.rank(), 3);
  EXPECT_EQ(last.step(), 7);
  EXPECT_EQ(last.loss(), 2.5);
  EXPECT_EQ(last.total_steps(), 1000);
  EXPECT_EQ(last.tokens_per_second(), 1234.5);
  EXPECT_EQ(last.step_seconds(), 0.25);
  EXPECT_EQ(last.metrics().at("vision_tokens_per_s"), 99);
  EXPECT_EQ(last.metrics().at("text_peak_memory_bytes"), 4096);
  EXPECT_EQ(last.waiting_on(), "");
  EXPECT_FALSE(reporter->stop_requested());

  // A rank without a text role: NaN travels as NaN.
  reporter->StepFinished(Step(8, NAN));
  reporter->Flush(milliseconds(5000));
  EXPECT_EQ(service_.received().back().req.step(), 8);
  EXPECT_TRUE(std::isnan(service_.received().back().req.loss()));
}

TEST_F(RankReporterTest, ATightLoopIsRateLimitedAndTheNewestStepStillArrives) {
  RankReporter::Options options;
  options.min_interval_ms = 200;
  options.heartbeat_ms = 60000;
  auto reporter = Make(options);
  const Clock::time_point t0 = Clock::now();
  for (int64_t s = 1; s <= 100; ++s) {
    reporter->StepStarted(s);
    reporter->StepFinished(Step(s));
  }
  // No Flush: the newest step goes out on its own, within about one interval.
  ASSERT_TRUE(service_.WaitFor(StepIs(100), milliseconds(5000)).has_value());
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::this_thread::sleep_for(milliseconds(400));  // nothing more to send
  std::vector<Received> got = service_.received();
  // One RPC at start-up, then at most one per 200 ms.
  EXPECT_LE(got.size(), 2 + static_cast<size_t>(elapsed_ms / 200)) << elapsed_ms << " ms";
  EXPECT_LE(got.size(), 6u);
  EXPECT_EQ(got.back().req.step(), 100);
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_GE(got[i].req.step(), got[i - 1].req.step());  // never an older step after a newer
  }
}

TEST_F(RankReporterTest, HeartbeatsResendTheNewestStateWhenIdle) {
  RankReporter::Options options;
  options.heartbeat_ms = 100;
  auto reporter = Make(options);
  reporter->StepStarted(1);
  reporter->StepFinished(Step(1, 0.5));
  reporter->Flush(milliseconds(5000));
  service_.Clear();
  std::this_thread::sleep_for(milliseconds(800));
  std::vector<Received> got = service_.received();
  EXPECT_GE(got.size(), 3u);
  EXPECT_LE(got.size(), 10u);
  for (const Received& r : got) {
    EXPECT_EQ(r.req.step(), 1);
    EXPECT_EQ(r.req.loss(), 0.5);
  }
}

TEST_F(RankReporterTest, TheControllersPaceHoldsBackStepsAndHeartbeatsButNotAFlush) {
  RankReporter::Options options;
  options.min_interval_ms = 10;
  options.heartbeat_ms = 50;
  service_.SetNextReportMs(3000);
  auto reporter = Make(options);
  reporter->StepFinished(Step(1));
  reporter->Flush(milliseconds(5000));
  ASSERT_EQ(service_.received().back().req.step(), 1);
  service_.Clear();
  // At its own pace the rank would send ~30 reports in these 1.5 s; paced, none.
  for (int64_t s = 2; s <= 76; ++s) {
    reporter->StepStarted(s);
    std::this_thread::sleep_for(milliseconds(20));
    reporter->StepFinished(Step(s));
  }
  EXPECT_EQ(service_.count(), 0u);
  // A flush (the rank exiting) is not held back; its answer lifts the pace again.
  service_.SetNextReportMs(0);
  const Clock::time_point t0 = Clock::now();
  reporter->Flush(milliseconds(5000));
  EXPECT_LT(Clock::now() - t0, milliseconds(1000));
  ASSERT_EQ(service_.count(), 1u);
  EXPECT_EQ(service_.received().back().req.step(), 76);
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_GE(service_.count(), 4u);  // heartbeats every 50 ms again
}

TEST_F(RankReporterTest, StopFromTheControllerIsPropagatedAndReportingGoesOn) {
  RankReporter::Options options;
  options.min_interval_ms = 10;
  auto reporter = Make(options);
  reporter->StepFinished(Step(1));
  reporter->Flush(milliseconds(5000));
  EXPECT_FALSE(reporter->stop_requested());
  service_.SetStop(true);
  reporter->StepFinished(Step(2));
  reporter->Flush(milliseconds(5000));
  EXPECT_TRUE(reporter->stop_requested());
  // The final steps still arrive.
  reporter->StepFinished(Step(3));
  reporter->Flush(milliseconds(5000));
  EXPECT_EQ(service_.received().back().req.step(), 3);
}

TEST_F(RankReporterTest, ACheckpointRequestRaisesTheStepAskedForAndNeverLowersIt) {
  RankReporter::Options options;
  options.min_interval_ms = 10;
  auto reporter = Make(options);
  reporter->StepFinished(Step(1));
  reporter->Flush(milliseconds(5000));
  EXPECT_EQ(reporter->checkpoint_requested_at(), -1);
  service_.SetCheckpointAt(2);
  reporter->StepFinished(Step(2));
  reporter->Flush(milliseconds(5000));
  EXPECT_EQ(reporter->checkpoint_requested_at(), 2);
  service_.SetCheckpointAt(1);  // an older answer arriving late
  reporter->StepFinished(Step(3));
  reporter->Flush(milliseconds(5000));
  EXPECT_EQ(reporter->checkpoint_requested_at(), 2);
  EXPECT_FALSE(reporter->stop_requested());
}

TEST_F(RankReporterTest, APreemptRequestIsKeptOnceAnswered) {
  RankReporter::Options options;
  options.min_interval_ms = 10;
  auto reporter = Make(options);
  reporter->StepFinished(Step(1));
  reporter->Flush(milliseconds(5000));
  EXPECT_FALSE(reporter->preempt_requested());
  service_.SetPreempt("node n1 was drained");
  reporter->StepFinished(Step(2));
  reporter->Flush(milliseconds(5000));
  EXPECT_TRUE(reporter->preempt_requested());
  service_.SetPreempt("");  // a later answer without it does not take it back
  reporter->StepFinished(Step(3));
  reporter->Flush(milliseconds(5000));
  EXPECT_TRUE(reporter->preempt_requested());
  EXPECT_FALSE(reporter->stop_requested());
}

TEST_F(RankReporterTest, AStaleAttemptRequestsStopAndEndsReporting) {
  for (absl::Status error : {absl::FailedPreconditionError("attempt 2 of job j-1 is not current"),
                             absl::NotFoundError("job j-1 not found")}) {
    SCOPED_TRACE(error.ToString());
    service_.SetError(error);
    service_.Clear();
    RankReporter::Options options;
    options.min_interval_ms = 10;
    options.heartbeat_ms = 50;
    auto reporter = Make(options);
    reporter->StepFinished(Step(1));
    reporter->Flush(milliseconds(5000));
    EXPECT_TRUE(reporter->stop_requested());
    const size_t calls = service_.count();
    std::this_thread::sleep_for(milliseconds(300));  // no heartbeats any more
    EXPECT_EQ(service_.count(), calls);
    reporter->StepFinished(Step(2));
    const Clock::time_point t0 = Clock::now();
    reporter->Flush(milliseconds(5000));  // nothing to wait for
    EXPECT_LT(Clock::now() - t0, milliseconds(100));
  }
  service_.SetError(absl::OkStatus());
}

// Through an agent that relays no progress (its controller predates relaying): the reporter
// goes to the controller itself for good, with the report the agent refused.
TEST_F(RankReporterTest, AnAgentThatRelaysNoProgressSendsTheRankToTheController) {
  FakeProgressService agent;
  agent.SetError(absl::UnimplementedError("the controller takes no relayed reports"));
  absl::StatusOr<std::unique_ptr<api::GrpcServer>> agent_server =
      api::GrpcServer::Start("127.0.0.1:0", agent);
  ASSERT_TRUE(agent_server.ok()) << agent_server.status();
  api::DhpClient agent_client("127.0.0.1:" + std::to_string((*agent_server)->port()), 3000);
  RankReporter::Options options;
  options.heartbeat_ms = 60000;
  {
    RankReporter reporter(agent_client, "j-1", 2, 3, options, client_.get());
    reporter.StepFinished(Step(4));
    reporter.Flush(milliseconds(5000));
    ASSERT_TRUE(service_.WaitFor(StepIs(4), milliseconds(5000)).has_value());
    reporter.StepFinished(Step(5));
    reporter.Flush(milliseconds(5000));
    ASSERT_TRUE(service_.WaitFor(StepIs(5), milliseconds(5000)).has_value());
    EXPECT_FALSE(reporter.stop_requested());
  }
  EXPECT_EQ(agent.count(), 1u);  // asked once, then never again
  (*agent_server)->Shutdown(0);
}

TEST_F(RankReporterTest, OtherErrorsDoNotStopTheRank) {
  service_.SetError(absl::InvalidArgumentError("step: -1 must not be negative"));
  RankReporter::Options options;
  options.min_interval_ms = 10;
  auto reporter = Make(options);
  reporter->StepFinished(Step(1));
  reporter->Flush(milliseconds(5000));
  EXPECT_FALSE(reporter->stop_requested());
  service_.SetError(absl::OkStatus());
  reporter->StepFinished(Step(2));
  reporter->Flush(milliseconds(5000));
  EXPECT_EQ(service_.received().back().req.step(), 2);
}

TEST_F(RankReporterTest, WatchdogNamesTheOldestCollectiveInFlightThenTheComputation) {
  RankReporter::Options options;
  options.min_interval_ms = 50;
  options.heartbeat_ms = 100;
  options.watchdog_ms = 300;
  ::testing::internal::CaptureStderr();
  auto reporter = Make(options);
  reporter->StepStarted(4);
  reporter->StepFinished(Step(4));
  const Clock::time_point t0 = Clock::now();
  reporter->StepStarted(5);
  Clock::time_point t_end;
  {
    comm::InFlightScope op(&comm::InFlightRegistry::Global(), "text.tp0", "all_reduce", 57);
    std::optional<Received> stalled = service_.WaitFor(
        [](const v1::ReportProgressRequest& r) {
          return absl::StartsWith(r.waiting_on(), "all_reduce on group text.tp0 (call 57) for ");
        },
        milliseconds(5000));
    ASSERT_TRUE(stalled.has_value());
    EXPECT_EQ(stalled->req.step(), 4);  // the newest finished step
    // Let the stall last a few watchdog periods (logged once per period).
    std::this_thread::sleep_for(milliseconds(700));
    t_end = Clock::now();
  }
  // The collective finished but the step goes on: the rank is computing.
  std::optional<Received> computing = service_.WaitFor(
      [](const v1::ReportProgressRequest& r) {
        return absl::StartsWith(r.waiting_on(), "computing step 5 for ");
      },
      milliseconds(5000));
  ASSERT_TRUE(computing.has_value());
  reporter->StepFinished(Step(5));
  reporter->Flush(milliseconds(5000));
  EXPECT_EQ(service_.received().back().req.waiting_on(), "");
  reporter.reset();
  const std::string err = ::testing::internal::GetCapturedStderr();

  // Nothing was reported stalled before the watchdog period had passed.
  for (const Received& r : service_.received()) {
    if (!r.req.waiting_on().empty()) {
      EXPECT_GE(r.at - t0, milliseconds(300)) << r.req.waiting_on();
    }
  }
  // The stall was logged, at most once per period.
  size_t lines = 0;
  for (size_t pos = err.find("all_reduce on group text.tp0 (call 57)"); pos != std::string::npos;
       pos = err.find("all_reduce on group text.tp0 (call 57)", pos + 1)) {
    ++lines;
  }
  const double stalled_ms =
      std::chrono::duration<double, std::milli>(t_end - t0).count() - options.watchdog_ms;
  EXPECT_GE(lines, 1u) << err;
  EXPECT_LE(lines, 2 + static_cast<size_t>(stalled_ms / options.watchdog_ms)) << err;
  EXPECT_NE(err.find("watchdog: rank 3 of job j-1 (attempt 2), step 5 running for"),
            std::string::npos)
      << err;
}

TEST_F(RankReporterTest, WatchdogSeesACollectiveStalledBetweenSteps) {
  RankReporter::Options options;
  options.heartbeat_ms = 100;
  options.watchdog_ms = 300;
  auto reporter = Make(options);
  comm::InFlightOp op;
  op.group = "world";
  op.op = "broadcast";
  op.call = 1;
  op.start = Clock::now() - milliseconds(1000);  // e.g. the initial weights, before step 1
  const comm::InFlightRegistry::Token token = comm::InFlightRegistry::Global().Begin(op);
  std::optional<Received> stalled = service_.WaitFor(
      [](const v1::ReportProgressRequest& r) {
        return absl::StartsWith(r.waiting_on(), "broadcast on group world (call 1) for ");
      },
      milliseconds(5000));
  comm::InFlightRegistry::Global().End(token);
  ASSERT_TRUE(stalled.has_value());
  EXPECT_EQ(stalled->req.step(), 0);
  // Once it is gone, heartbeats say nothing about waiting.
  service_.Clear();
  ASSERT_TRUE(service_
                  .WaitFor([](const v1::ReportProgressRequest& r) { return r.waiting_on().empty(); },
                           milliseconds(5000))
                  .has_value());
}

TEST_F(RankReporterTest, TrainingIsNotBlockedWhileTheControllerIsDownAndReportsResumeAfter) {
  RankReporter::Options options;
  options.min_interval_ms = 50;
  options.heartbeat_ms = 200;
  auto reporter = Make(options);
  reporter->StepFinished(Step(1));
  reporter->Flush(milliseconds(5000));
  ASSERT_EQ(service_.received().back().req.step(), 1);

  StopServer();
  std::vector<double> us;
  for (int64_t s = 2; s <= 200; ++s) {
    reporter->StepStarted(s);
    const Clock::time_point t = Clock::now();
    reporter->StepFinished(Step(s));
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    if (s % 20 == 0) std::this_thread::sleep_for(milliseconds(20));  // let the sender fail
  }
  std::sort(us.begin(), us.end());
  EXPECT_LT(us[us.size() / 2], 1000.0) << "median StepFinished, us";
  EXPECT_LT(us[us.size() * 9 / 10], 1000.0) << "90th percentile StepFinished, us";
  EXPECT_LT(us.back(), 100000.0) << "slowest StepFinished, us (never a network timeout)";
  EXPECT_FALSE(reporter->stop_requested());
  // Flush gives up at its timeout.
  const Clock::time_point t0 = Clock::now();
  reporter->Flush(milliseconds(300));
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
  EXPECT_LT(Clock::now() - t0, milliseconds(3000));

  // The controller comes back on the same address: the newest step arrives.
  service_.Clear();
  StartServer("127.0.0.1:" + std::to_string(port_));
  std::optional<Received> back = service_.WaitFor(StepIs(200), milliseconds(20000));
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(reporter->stop_requested());
}

TEST_F(RankReporterTest, ASlowControllerDoesNotBlockTraining) {
  service_.SetDelay(milliseconds(1000));
  RankReporter::Options options;
  options.min_interval_ms = 10;
  auto reporter = Make(options);
  std::this_thread::sleep_for(milliseconds(100));  // the first report is now being answered
  std::vector<double> us;
  for (int64_t s = 1; s <= 50; ++s) {
    reporter->StepStarted(s);
    const Clock::time_point t = Clock::now();
    reporter->StepFinished(Step(s));
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  }
  std::sort(us.begin(), us.end());
  EXPECT_LT(us[us.size() / 2], 1000.0) << "median StepFinished, us";
  EXPECT_LT(us.back(), 100000.0) << "slowest StepFinished, us";
  service_.SetDelay(milliseconds(0));
  reporter->Flush(milliseconds(10000));
  EXPECT_EQ(service_.received().back().req.step(), 50);
}

TEST_F(RankReporterTest, DestructionIsBoundedWhenTheControllerIsDown) {
  RankReporter::Options options;
  auto reporter = Make(options);
  reporter->StepFinished(Step(1));
  reporter->Flush(milliseconds(5000));
  StopServer();
  reporter->StepFinished(Step(2));  // never delivered
  const Clock::time_point t0 = Clock::now();
  reporter.reset();  // flushes for at most 2 s
  EXPECT_LT(Clock::now() - t0, milliseconds(4000));
}

}  // namespace
}  // namespace dhp
