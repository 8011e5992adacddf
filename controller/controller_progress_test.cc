// A running job's step figures as reads see them: reports are kept in memory and written in
// batches (Supervisor::SaveProgress), every read shows the newest, and a controller that stops
// writes what it has not yet saved.
#include <memory>
#include <string>

#include "controller/controller_test_fixture.h"
#include "controller/store.h"
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

}  // namespace
}  // namespace dhp::controller
