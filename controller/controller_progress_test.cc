// A running job's step figures as reads see them: reports are kept in memory and written in
// batches (Supervisor::SaveProgress), every read shows the newest, and a controller that stops
// writes what it has not yet saved.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "controller/checkpoint_tracker.h"
#include "controller/controller_test_fixture.h"
#include "controller/store.h"
#include "controller/time_util.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

class ControllerProgressTest : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    StartController();
  }
  v1::ReportProgressResponse Progress(const v1::Job& job, int64_t step) {
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_attempt(1);
    req.set_rank(0);
    req.set_step(step);
    req.set_loss(10.0 - step);
    req.set_total_steps(100);
    v1::ReportProgressResponse resp;
    absl::Status s = controller_->ReportProgress(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }
  v1::GetJobResponse Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    absl::Status s = controller_->GetJob(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }
  // The job as the database file holds it, read on a connection of its own.
  v1::Job StoredJob(const std::string& id) {
    absl::StatusOr<std::unique_ptr<Store>> other = Store::Open(path_);
    EXPECT_TRUE(other.ok()) << other.status();
    absl::StatusOr<v1::Job> job = (*other)->GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }
};

TEST_F(ControllerProgressTest, ReadsShowTheNewestStepAndAStopWritesIt) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  LaunchRankZero(job);
  Progress(job, 1);  // RUNNING: written at once
  ASSERT_EQ(StoredJob(job.id()).state(), v1::JOB_STATE_RUNNING);
  Progress(job, 7);

  EXPECT_EQ(StoredJob(job.id()).latest_step(), 1);  // not saved yet (every 30 s)
  const v1::GetJobResponse got = Get(job.id());
  EXPECT_EQ(got.job().latest_step(), 7);
  EXPECT_DOUBLE_EQ(got.job().latest_loss(), 3.0);
  EXPECT_EQ(got.job().message(), "training: step 7 of 100 done");
  ASSERT_EQ(got.runs_size(), 1);
  EXPECT_EQ(got.runs(0).last_step(), 7);
  v1::ListJobsResponse list;
  ASSERT_TRUE(controller_->ListJobs(v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).latest_step(), 7);

  StopController();  // writes the figures not yet saved
  EXPECT_EQ(StoredJob(job.id()).latest_step(), 7);
  StartController();
  EXPECT_EQ(Get(job.id()).job().latest_step(), 7);
  EXPECT_EQ(Get(job.id()).job().message(), "training: step 7 of 100 done");
}

// The persist tick, on the controller's own clock: step figures and heartbeat times that come
// due (every 30 s) are written by the tick, each time they come due, not only at a stop.
class ControllerPersistTickTest : public ControllerProgressTest {
 protected:
  void SetUp() override {
    use_fake_clock_ = true;
    options_.nodes.heartbeat_timeout_ms = 3600 * 1000;  // 31 s jumps lose no node
    ControllerProgressTest::SetUp();
  }
  // Waits up to 5 s (the tick is every 25 ms) for `done` to hold.
  template <typename F>
  bool Within5s(F done) {
    for (int i = 0; i < 500 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }
  int64_t StoredBeat(const std::string& node) {
    absl::StatusOr<std::unique_ptr<Store>> other = Store::Open(path_);
    if (!other.ok()) return -1;
    absl::StatusOr<v1::Node> n = (*other)->GetNode(node);
    return n.ok() ? TimestampToMicros(n->last_heartbeat_time()) : -1;
  }
};

TEST_F(ControllerPersistTickTest, DueFiguresAndHeartbeatTimesAreWrittenTickAfterTick) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  const v1::HeartbeatRequest beat = LaunchRankZero(job);
  Progress(job, 1);  // RUNNING: written at once
  int64_t stored = 1;
  for (int64_t step : {7, 9}) {
    Progress(job, step);
    EXPECT_EQ(StoredJob(job.id()).latest_step(), stored);  // not due yet
    fake_clock_.AdvanceMicros(31 * 1000000LL);
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(controller_->Heartbeat(beat, &resp).ok());
    const int64_t beat_at = fake_clock_.NowMicros();
    EXPECT_TRUE(Within5s([&] { return StoredJob(job.id()).latest_step() == step; }))
        << "step " << step << " was not written; stored " << StoredJob(job.id()).latest_step();
    EXPECT_TRUE(Within5s([&] { return StoredBeat("n1") == beat_at; }))
        << "the heartbeat at " << beat_at << " was not written; stored " << StoredBeat("n1");
    stored = step;
  }
}

// The controller's progress_reports_per_s reaches the ranks: each is asked to report at most
// once per (placed ranks / that) seconds.
TEST_F(ControllerProgressTest, RanksAreAskedToSpreadTheControllersReportBudget) {
  StopController();
  options_.progress_reports_per_s = 1;
  StartController();
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  LaunchRankZero(job);
  const v1::ReportProgressResponse resp = Progress(job, 1);
  const v1::GetJobResponse got = Get(job.id());
  ASSERT_EQ(got.runs_size(), 1);
  ASSERT_GT(got.runs(0).world_size(), 0);
  EXPECT_EQ(resp.next_report_ms(), 1000 * got.runs(0).world_size());
}

// Agents relay their ranks' reports in heartbeats (HeartbeatRequest.progress): each is answered
// as ReportProgress would answer it, and only a node that holds the rank may relay for it.
class ControllerRelayTest : public ControllerProgressTest {
 protected:
  static v1::ReportProgressRequest Report(const v1::Job& job, int64_t step, int attempt = 1) {
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_attempt(attempt);
    req.set_rank(0);
    req.set_step(step);
    req.set_loss(10.0 - step);
    req.set_total_steps(10);
    return req;
  }
};

TEST_F(ControllerRelayTest, AReportRelayedByTheRanksNodeIsAnsweredAsReportProgress) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  v1::HeartbeatRequest beat = LaunchRankZero(job);
  *beat.add_progress() = Report(job, 4);
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(controller_->Heartbeat(beat, &resp).ok());
  ASSERT_EQ(resp.progress_size(), 1);
  EXPECT_EQ(resp.progress(0).code(), 0) << resp.progress(0).message();
  EXPECT_FALSE(resp.progress(0).response().stop());
  EXPECT_EQ(resp.ranks_size(), 1);  // the launch list is there as ever
  const v1::GetJobResponse got = Get(job.id());
  EXPECT_EQ(got.job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(got.job().latest_step(), 4);
  EXPECT_DOUBLE_EQ(got.job().latest_loss(), 6.0);
  EXPECT_TRUE(HasLine(metrics_->RenderText(), "dhp_progress_reports_relayed_total 1"))
      << metrics_->RenderText();
}

TEST_F(ControllerRelayTest, ANodeMayNotRelayForARankPlacedElsewhereAndOneBadEntryHarmsNoOther) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  LaunchRankZero(job);
  Progress(job, 2);
  ASSERT_TRUE(Register("n2").ok());
  v1::HeartbeatRequest beat;
  beat.set_node_id("n2");
  *beat.add_progress() = Report(job, 9);
  v1::ReportProgressRequest unknown = Report(job, 1);
  unknown.set_job_id("no-such-job");
  *beat.add_progress() = unknown;
  *beat.add_progress() = Report(job, 1, /*attempt=*/7);
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(controller_->Heartbeat(beat, &resp).ok());
  ASSERT_EQ(resp.progress_size(), 3);
  EXPECT_EQ(resp.progress(0).code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_NE(resp.progress(0).message().find("placed on node \"n1\""), std::string::npos)
      << resp.progress(0).message();
  EXPECT_FALSE(resp.progress(0).has_response());
  EXPECT_EQ(resp.progress(1).code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(resp.progress(2).code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(Get(job.id()).job().latest_step(), 2);  // n2's report changed nothing
}

// A rank's last report and its exit arrive in one heartbeat: the step counts first.
TEST_F(ControllerRelayTest, TheLastStepRelayedWithTheExitCountsBeforeTheRunEnds) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  v1::HeartbeatRequest beat = LaunchRankZero(job);
  Progress(job, 3);
  *beat.add_progress() = Report(job, 10);
  beat.mutable_ranks(0)->set_state(v1::RANK_PROCESS_STATE_EXITED);
  beat.mutable_ranks(0)->set_exit_code(0);
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(controller_->Heartbeat(beat, &resp).ok());
  ASSERT_EQ(resp.progress_size(), 1);
  EXPECT_EQ(resp.progress(0).code(), 0) << resp.progress(0).message();
  const v1::GetJobResponse got = Get(job.id());
  EXPECT_EQ(got.job().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(got.job().latest_step(), 10);
}

TEST_F(ControllerRelayTest, TooManyRelayedReportsRefuseTheHeartbeatBeforeAnyIsApplied) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  v1::HeartbeatRequest beat = LaunchRankZero(job);
  for (int i = 0; i <= kMaxRelayedProgress; ++i) *beat.add_progress() = Report(job, 5);
  v1::HeartbeatResponse resp;
  const absl::Status s = controller_->Heartbeat(beat, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("progress: 1025 reports"), std::string::npos) << s;
  EXPECT_EQ(resp.progress_size(), 0);
  EXPECT_NE(Get(job.id()).job().state(), v1::JOB_STATE_RUNNING);
}


// A batch may relay kMaxBatchProgress reports in all, so that one request holds the loop for a
// bounded time: past that the whole batch is refused unread (relays split their batches).
TEST_F(ControllerRelayTest, ABatchRelayingTooManyReportsInAllIsRefusedBeforeAnyIsApplied) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  v1::HeartbeatRequest beat = LaunchRankZero(job);
  for (int i = 0; i < kMaxRelayedProgress; ++i) *beat.add_progress() = Report(job, 5);
  v1::HeartbeatBatchRequest batch;
  const int fits = api::kMaxBatchProgress / kMaxRelayedProgress;
  for (int i = 0; i <= fits; ++i) *batch.add_heartbeats()->mutable_heartbeat() = beat;
  v1::HeartbeatBatchResponse resp;
  const absl::Status s = controller_->HeartbeatBatch(batch, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "heartbeats: 9216 progress reports in all; a batch relays at most 8192");
  EXPECT_EQ(resp.answers_size(), 0);
  EXPECT_NE(Get(job.id()).job().state(), v1::JOB_STATE_RUNNING);

  batch.mutable_heartbeats()->RemoveLast();  // at the limit: every report is answered
  ASSERT_TRUE(controller_->HeartbeatBatch(batch, &resp).ok());
  ASSERT_EQ(resp.answers_size(), fits);
  EXPECT_EQ(resp.answers(0).code(), 0) << resp.answers(0).message();
  EXPECT_EQ(resp.answers(fits - 1).response().progress_size(), kMaxRelayedProgress);
  EXPECT_EQ(Get(job.id()).job().latest_step(), 5);
}

// Steps past 2^53 would be stored exactly but shown rounded by /metrics (a double): refused,
// naming the field, and the run keeps the figures it had.
TEST_F(ControllerProgressTest, StepsPastTwoToThe53AreRefusedNamingTheField) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  LaunchRankZero(job);
  Progress(job, 3);
  const int64_t too_big = kMaxReportedStep + 1;
  for (const auto& [field, set] :
       std::vector<std::pair<std::string, void (*)(v1::ReportProgressRequest&, int64_t)>>{
           {"step: ", [](v1::ReportProgressRequest& r, int64_t v) { r.set_step(v); }},
           {"total_steps: ", [](v1::ReportProgressRequest& r, int64_t v) { r.set_total_steps(v); }},
       }) {
    for (int64_t value : {too_big, INT64_MAX, int64_t{-1}}) {
      v1::ReportProgressRequest req;
      req.set_job_id(job.id());
      req.set_attempt(1);
      req.set_step(4);
      req.set_total_steps(100);
      set(req, value);
      v1::ReportProgressResponse resp;
      const absl::Status s = controller_->ReportProgress(req, &resp);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field << value;
      EXPECT_EQ(s.message().substr(0, field.size() + std::to_string(value).size()),
                field + std::to_string(value))
          << s;
    }
  }
  EXPECT_EQ(Get(job.id()).job().latest_step(), 3);
  EXPECT_EQ(Get(job.id()).job().total_steps(), 100);
  v1::ReportProgressRequest edge;
  edge.set_job_id(job.id());
  edge.set_attempt(1);
  edge.set_step(5);
  edge.set_total_steps(kMaxReportedStep);  // the bound itself is a step
  v1::ReportProgressResponse resp;
  ASSERT_TRUE(controller_->ReportProgress(edge, &resp).ok());
  EXPECT_EQ(Get(job.id()).job().total_steps(), kMaxReportedStep);
  EXPECT_TRUE(HasLine(metrics_->RenderText(),
                      "dhp_job_total_steps{job=\"" + job.id() + "\"} 9007199254740992"))
      << metrics_->RenderText();
}

}  // namespace
}  // namespace dhp::controller
