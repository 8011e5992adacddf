// Store::OpenReader: a second, read-only connection that another thread reads on while the
// first connection writes.
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "controller/sqlite_db.h"
#include "controller/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::testing::HasSubstr;

JobWrite NewJob(const std::string& id, v1::JobState state) {
  JobWrite w;
  w.create = true;
  w.job.set_id(id);
  w.job.mutable_spec()->set_name("name-" + id);
  w.job.set_state(state);
  w.job.set_current_attempt(1);
  v1::Run run;
  run.set_job_id(id);
  run.set_attempt(1);
  run.set_queue_wait_seconds(2.5);
  w.runs.push_back(run);
  return w;
}

class StoreReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/store_reader_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/dhp.db";
    absl::StatusOr<std::unique_ptr<Store>> writer = Store::Open(path_);
    ASSERT_TRUE(writer.ok()) << writer.status();
    writer_ = std::move(*writer);
  }
  void TearDown() override {
    writer_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<Store> Reader() {
    absl::StatusOr<std::unique_ptr<Store>> reader = Store::OpenReader(path_);
    EXPECT_TRUE(reader.ok()) << reader.status();
    return reader.ok() ? std::move(*reader) : nullptr;
  }

  std::string dir_;
  std::string path_;
  std::unique_ptr<Store> writer_;
};

TEST_F(StoreReaderTest, SeesWhatTheWriterCommittedAfterItOpened) {
  std::unique_ptr<Store> reader = Reader();
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->GetJob("j-1").status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(writer_->Commit(NewJob("j-1", v1::JOB_STATE_RUNNING)).ok());
  ASSERT_TRUE(writer_->Commit(NewJob("j-2", v1::JOB_STATE_QUEUED)).ok());
  v1::Checkpoint ckpt;
  ckpt.set_job_id("j-1");
  ckpt.set_step(40);
  ckpt.set_state(v1::CHECKPOINT_STATE_COMPLETE);
  ASSERT_TRUE(writer_->AddCheckpoint(ckpt, {}).ok());

  absl::StatusOr<v1::Job> job = reader->GetJob("j-1");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().name(), "name-j-1");
  const std::vector<v1::Run> runs = reader->ListRuns("j-1");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].queue_wait_seconds(), 2.5);
  const std::vector<v1::Checkpoint> ckpts = reader->ListCheckpoints("j-1");
  ASSERT_EQ(ckpts.size(), 1u);
  EXPECT_EQ(ckpts[0].step(), 40);
  std::map<v1::JobState, int64_t> counts = reader->CountJobsByState();
  EXPECT_EQ(counts[v1::JOB_STATE_RUNNING], 1);
  EXPECT_EQ(counts[v1::JOB_STATE_QUEUED], 1);
  EXPECT_EQ(reader->CountQuarantined()["jobs"], 0);
}

TEST_F(StoreReaderTest, ReadsOnAnotherThreadWhileTheWriterCommits) {
  std::unique_ptr<Store> reader = Reader();
  ASSERT_NE(reader, nullptr);
  constexpr int kJobs = 200;
  std::thread writes([&] {
    for (int i = 0; i < kJobs; ++i) {
      ASSERT_TRUE(writer_->Commit(NewJob("j-" + std::to_string(i), v1::JOB_STATE_QUEUED)).ok());
    }
  });
  // Every count the reader sees is a whole number of committed jobs, never going back.
  int64_t seen = 0;
  while (seen < kJobs) {
    const int64_t now = reader->CountJobsByState()[v1::JOB_STATE_QUEUED];
    ASSERT_GE(now, seen);
    ASSERT_LE(now, kJobs);
    seen = now;
  }
  writes.join();
  EXPECT_EQ(reader->ListRuns("j-199").size(), 1u);
}

TEST_F(StoreReaderTest, RefusesWritesAndLeavesTheDatabaseAsItWas) {
  ASSERT_TRUE(writer_->Commit(NewJob("j-1", v1::JOB_STATE_QUEUED)).ok());
  std::unique_ptr<Store> reader = Reader();
  ASSERT_NE(reader, nullptr);
  absl::StatusOr<std::vector<v1::Event>> wrote = reader->Commit(NewJob("j-2", v1::JOB_STATE_QUEUED));
  ASSERT_FALSE(wrote.ok());
  EXPECT_EQ(wrote.status().code(), absl::StatusCode::kFailedPrecondition) << wrote.status();
  EXPECT_THAT(wrote.status().message(), HasSubstr("readonly"));
  EXPECT_FALSE(reader->DeleteJob("j-1").ok());
  EXPECT_TRUE(writer_->GetJob("j-1").ok());
  EXPECT_EQ(writer_->GetJob("j-2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(writer_->CountJobsByState()[v1::JOB_STATE_QUEUED], 1);
}

TEST_F(StoreReaderTest, NeedsAMigratedFileDatabaseInWalMode) {
  absl::StatusOr<std::unique_ptr<Store>> memory = Store::OpenReader(":memory:");
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), absl::StatusCode::kFailedPrecondition) << memory.status();

  EXPECT_FALSE(Store::OpenReader(dir_ + "/missing.db").ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/missing.db"));  // not created

  {  // A database no dhp-controller opened: schema version 0, rollback journal.
    absl::StatusOr<std::unique_ptr<SqliteDb>> plain = SqliteDb::Open(dir_ + "/plain.db");
    ASSERT_TRUE(plain.ok());
    ASSERT_TRUE((*plain)->Exec("CREATE TABLE t (x)").ok());
  }
  absl::StatusOr<std::unique_ptr<Store>> plain = Store::OpenReader(dir_ + "/plain.db");
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plain.status().message(), HasSubstr("schema version"));
}

TEST_F(StoreReaderTest, SkipsAnUnreadableRowAndLeavesItForTheWriterToQuarantine) {
  ASSERT_TRUE(writer_->Commit(NewJob("j-1", v1::JOB_STATE_RUNNING)).ok());
  ASSERT_TRUE(writer_->Commit(NewJob("j-2", v1::JOB_STATE_RUNNING)).ok());
  {  // What an older build could store: a string that is not UTF-8 does not parse back.
    v1::Job bad = NewJob("j-1", v1::JOB_STATE_RUNNING).job;
    (*bad.mutable_spec()->mutable_labels())["owner"] = "ab\xff";
    absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path_);
    ASSERT_TRUE(db.ok());
    absl::StatusOr<ScopedStatement> update =
        (*db)->Prepare("UPDATE jobs SET proto = ? WHERE id = 'j-1'");
    ASSERT_TRUE(update.ok());
    (*update)->BindBlob(1, bad.SerializeAsString());
    ASSERT_TRUE((*update)->Run().ok());
  }
  std::unique_ptr<Store> reader = Reader();
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->GetJob("j-1").status().code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<JobPage> page = reader->ListJobs(JobQuery{});
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].id(), "j-2");
  EXPECT_EQ(reader->CountQuarantined()["jobs"], 0);  // not moved by the reader

  EXPECT_EQ(writer_->GetJob("j-1").status().code(), absl::StatusCode::kNotFound);  // moved now
  EXPECT_EQ(reader->CountQuarantined()["jobs"], 1);
}

TEST_F(StoreReaderTest, ReadsTogetherSeeOneSnapshot) {
  std::unique_ptr<Store> reader = Reader();
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(writer_->Commit(NewJob("j-1", v1::JOB_STATE_RUNNING)).ok());
  absl::StatusCode first = absl::StatusCode::kUnknown;
  absl::StatusCode second = absl::StatusCode::kUnknown;
  reader->ReadTogether([&] {
    first = reader->GetJob("j-1").status().code();
    // Committed while the reads are under way: not in their snapshot.
    ASSERT_TRUE(writer_->Commit(NewJob("j-2", v1::JOB_STATE_QUEUED)).ok());
    second = reader->GetJob("j-2").status().code();
  });
  EXPECT_EQ(first, absl::StatusCode::kOk);
  EXPECT_EQ(second, absl::StatusCode::kNotFound);
  EXPECT_TRUE(reader->GetJob("j-2").ok());  // the next read sees it

  // The writer's own reads are not held in one transaction (a read may quarantine a row).
  writer_->ReadTogether([&] {
    ASSERT_TRUE(writer_->Commit(NewJob("j-3", v1::JOB_STATE_QUEUED)).ok());
    EXPECT_TRUE(writer_->GetJob("j-3").ok());
  });
}

}  // namespace
}  // namespace dhp::controller
