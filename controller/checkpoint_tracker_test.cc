#include "controller/checkpoint_tracker.h"

#include <memory>

#include "common/clock.h"
#include "controller/store.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

constexpr char kRoot[] = "/data/ckpt";

class CheckpointTrackerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    tracker_ = std::make_unique<CheckpointTracker>(*store_, clock_, kRoot);
    job_.set_id("j-1");
    job_.set_state(v1::JOB_STATE_RUNNING);
    job_.set_current_attempt(1);
    job_.mutable_spec()->mutable_checkpoint()->set_directory("runs");
    job_.mutable_spec()->mutable_checkpoint()->set_keep_latest(2);
    run_.set_job_id("j-1");
    run_.set_attempt(1);
    run_.set_world_size(2);
    run_.set_checkpoint_dir(tracker_->RunDirectory(job_, 1));
    JobWrite write;
    write.create = true;
    write.job = job_;
    write.runs.push_back(run_);
    ASSERT_TRUE(store_->Commit(write).ok());
  }

  v1::ReportCheckpointRequest Report(int rank, int64_t step) const {
    v1::ReportCheckpointRequest req;
    req.set_job_id("j-1");
    req.set_attempt(1);
    req.set_step(step);
    req.set_world_size(2);
    req.set_path(run_.checkpoint_dir() + "/step-" + std::to_string(step));
    req.mutable_shard()->set_rank(rank);
    req.mutable_shard()->set_file("rank-" + std::to_string(rank) + ".safetensors");
    req.mutable_shard()->set_size_bytes(1000 + rank);
    req.set_write_seconds(0.5 + rank);
    return req;
  }

  absl::StatusOr<v1::Checkpoint> Send(const v1::ReportCheckpointRequest& req) {
    v1::ReportCheckpointResponse resp;
    std::vector<v1::Event> events;
    absl::Status s = tracker_->OnShard(job_, run_, req, &resp, &events);
    if (!s.ok()) return s;
    return resp.checkpoint();
  }

  void Complete(int64_t step) {
    ASSERT_TRUE(Send(Report(0, step)).ok());
    ASSERT_TRUE(Send(Report(1, step)).ok());
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<CheckpointTracker> tracker_;
  v1::Job job_;
  v1::Run run_;
};

TEST_F(CheckpointTrackerTest, ARunWritesUnderTheRootOrUnderAnAbsoluteSpecDirectory) {
  EXPECT_EQ(tracker_->RunDirectory(job_, 3), "/data/ckpt/runs/j-1/attempt-3");
  v1::Job elsewhere = job_;
  elsewhere.mutable_spec()->mutable_checkpoint()->set_directory("/mnt/fast");
  EXPECT_EQ(tracker_->RunDirectory(elsewhere, 1), "/mnt/fast/j-1/attempt-1");
}

TEST_F(CheckpointTrackerTest, TheLastShardCompletesTheCheckpointAndQueuesItsManifest) {
  absl::StatusOr<v1::Checkpoint> first = Send(Report(0, 5));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->state(), v1::CHECKPOINT_STATE_PARTIAL);
  EXPECT_TRUE(tracker_->TakeManifests().empty());
  EXPECT_FALSE(tracker_->ResumePoint("j-1").has_value());
  // Rank 0 sends again (a retry after a lost answer): its shard is replaced, not added twice.
  ASSERT_TRUE(Send(Report(0, 5)).ok());
  absl::StatusOr<v1::Checkpoint> last = Send(Report(1, 5));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->state(), v1::CHECKPOINT_STATE_COMPLETE);
  EXPECT_EQ(last->shards_size(), 2);
  EXPECT_EQ(last->size_bytes(), 1000 + 1001);
  EXPECT_DOUBLE_EQ(last->write_seconds(), 1.5);
  const auto manifests = tracker_->TakeManifests();
  ASSERT_EQ(manifests.size(), 1u);
  EXPECT_EQ(manifests[0].first, "/data/ckpt/runs/j-1/attempt-1/step-5");
  EXPECT_NE(manifests[0].second.find("\"state\": \"CHECKPOINT_STATE_COMPLETE\""),
            std::string::npos)
      << manifests[0].second;
  EXPECT_TRUE(tracker_->TakeManifests().empty());  // taken once
  ASSERT_TRUE(tracker_->ResumePoint("j-1").has_value());
  EXPECT_EQ(tracker_->ResumePoint("j-1")->step(), 5);
  // A report of a finished checkpoint only returns it.
  absl::StatusOr<v1::Checkpoint> again = Send(Report(1, 5));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), last->id());
  EXPECT_TRUE(tracker_->TakeManifests().empty());
}

TEST_F(CheckpointTrackerTest, KeepsTheNewestCompleteOnesAndDropsPartialOnesTheySupersede) {
  Complete(5);
  Complete(10);
  ASSERT_TRUE(Send(Report(0, 12)).ok());  // partial, will be superseded by step 15
  ASSERT_TRUE(Send(Report(0, 20)).ok());  // partial, newer than any complete one: kept
  EXPECT_TRUE(tracker_->TakeDeletions().empty());
  Complete(15);
  std::vector<int64_t> left;
  for (const v1::Checkpoint& c : store_->ListCheckpoints("j-1")) left.push_back(c.step());
  EXPECT_EQ(left, (std::vector<int64_t>{10, 15, 20}));
  EXPECT_EQ(tracker_->TakeDeletions(),
            (std::vector<std::string>{"/data/ckpt/runs/j-1/attempt-1/step-5",
                                      "/data/ckpt/runs/j-1/attempt-1/step-12"}));
  EXPECT_EQ(tracker_->ResumePoint("j-1")->step(), 15);
}

TEST_F(CheckpointTrackerTest, ABadReportNamesItsFieldAndStoresNothing) {
  struct Case {
    const char* field;
    void (*spoil)(v1::ReportCheckpointRequest&);
  };
  const Case cases[] = {
      {"step:", [](v1::ReportCheckpointRequest& r) { r.set_step(0); }},
      {"step:", [](v1::ReportCheckpointRequest& r) { r.set_step(kMaxReportedStep + 1); }},
      {"shard.size_bytes:",
       [](v1::ReportCheckpointRequest& r) { r.mutable_shard()->set_size_bytes(-1); }},
      {"shard.size_bytes:",
       [](v1::ReportCheckpointRequest& r) { r.mutable_shard()->set_size_bytes(INT64_MAX); }},
      {"world_size:", [](v1::ReportCheckpointRequest& r) { r.set_world_size(3); }},
      {"shard.rank:", [](v1::ReportCheckpointRequest& r) { r.mutable_shard()->set_rank(2); }},
      {"shard.rank:", [](v1::ReportCheckpointRequest& r) { r.mutable_shard()->set_rank(-1); }},
      {"shard.file:", [](v1::ReportCheckpointRequest& r) { r.mutable_shard()->set_file("../x"); }},
      {"shard.file:", [](v1::ReportCheckpointRequest& r) { r.mutable_shard()->set_file(".."); }},
      {"path:", [](v1::ReportCheckpointRequest& r) { r.set_path("/etc"); }},
      {"path:", [](v1::ReportCheckpointRequest& r) { r.set_path("/data/ckpt/runs/j-1/../x"); }},
      {"path:", [](v1::ReportCheckpointRequest& r) {
         r.set_path("/data/ckpt/runs/j-1/attempt-1");  // the run's directory itself
       }},
  };
  for (const Case& c : cases) {
    v1::ReportCheckpointRequest req = Report(0, 5);
    c.spoil(req);
    absl::StatusOr<v1::Checkpoint> got = Send(req);
    ASSERT_FALSE(got.ok()) << c.field;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_EQ(got.status().message().rfind(c.field, 0), 0u) << got.status();
  }
  EXPECT_TRUE(store_->ListCheckpoints("j-1").empty());
}

TEST_F(CheckpointTrackerTest, ARejectedCheckpointIsCorruptAndNoLongerTheResumePoint) {
  Complete(5);
  Complete(10);
  const int64_t newest = tracker_->ResumePoint("j-1")->id();
  v1::RejectCheckpointRequest reject;
  reject.set_job_id("j-1");
  reject.set_attempt(1);
  reject.set_checkpoint_id(newest);
  reject.set_rank(1);
  reject.set_reason("crc32c mismatch in rank-1.safetensors");
  std::vector<v1::Event> events;
  absl::StatusOr<std::string> why = tracker_->Reject(job_, reject, &events);
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_EQ(*why, "checkpoint " + std::to_string(newest) +
                      " at step 10 is unusable: rank 1: crc32c mismatch in rank-1.safetensors");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].to_state(), "CORRUPT");
  EXPECT_EQ(tracker_->ResumePoint("j-1")->step(), 5);
  // Said twice: the same reason, no second event.
  events.clear();
  ASSERT_TRUE(tracker_->Reject(job_, reject, &events).ok());
  EXPECT_TRUE(events.empty());
  reject.set_checkpoint_id(newest + 100);
  EXPECT_EQ(tracker_->Reject(job_, reject, &events).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dhp::controller
