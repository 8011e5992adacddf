// Rows the store cannot read (a message that does not parse) are moved to the quarantine table;
// every read serves the rest, and writes refuse text that could not be read back.
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "controller/sqlite_db.h"
#include "controller/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::Job MakeJob(const std::string& id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_name("name-" + id);
  job.set_state(state);
  job.set_current_attempt(1);
  return job;
}

v1::Event MakeEvent(const std::string& reason) {
  v1::Event event;
  event.set_type("job.state");
  event.set_reason(reason);
  return event;
}

std::unique_ptr<Store> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

std::vector<std::string> Ids(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> ids;
  for (const v1::Job& job : jobs) ids.push_back(job.id());
  return ids;
}

// What an older build could store: protobuf serialises a string that is not UTF-8 (it only
// logs), and then refuses to parse it.
std::string IllFormedJob(const std::string& id) {
  v1::Job job = MakeJob(id, v1::JOB_STATE_RUNNING);
  (*job.mutable_spec()->mutable_labels())["owner"] =
      "ab\xff"
      "cd";
  return job.SerializeAsString();
}

class StoreQuarantineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/store_quarantine_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/dhp.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Overwrites the message of rows matching `where` with `blob`, as another program would
  // (with no Store open).
  void Poison(const std::string& table, const std::string& where, const std::string& blob) {
    absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path_);
    ASSERT_TRUE(db.ok()) << db.status();
    absl::StatusOr<ScopedStatement> update =
        (*db)->Prepare("UPDATE " + table + " SET proto = ? WHERE " + where);
    ASSERT_TRUE(update.ok()) << update.status();
    (*update)->BindBlob(1, blob);
    ASSERT_TRUE((*update)->Run().ok());
    ASSERT_GE((*db)->changes(), 1) << table << " " << where;
  }

  std::string dir_;
  std::string path_;
};

TEST_F(StoreQuarantineTest, UnreadableRowsAreMovedAndTheRestIsServed) {
  {
    auto store = OpenOrDie(path_);
    ASSERT_NE(store, nullptr);
    for (const char* id : {"j1", "j2", "j3"}) {
      JobWrite write;
      write.job = MakeJob(id, v1::JOB_STATE_RUNNING);
      write.create = true;
      v1::Run run;
      run.set_attempt(1);
      run.set_state(v1::RUN_STATE_RUNNING);
      write.runs = {run};
      write.events = {MakeEvent(std::string("created ") + id)};
      ASSERT_TRUE(store->Commit(write).ok());
      v1::Checkpoint ckpt;
      ckpt.set_job_id(id);
      ckpt.set_step(10);
      ASSERT_TRUE(store->AddCheckpoint(ckpt, {}).ok());
    }
    for (const char* id : {"n1", "n2"}) {
      v1::Node node;
      node.set_id(id);
      node.set_hostname(std::string("host-") + id);
      ASSERT_TRUE(store->PutNode(node, {}).ok());
    }
  }
  // With the store closed: a job whose label is not UTF-8, a node's hostname, an event's
  // reason (the three cases), and j3's run and checkpoint damaged into garbage.
  Poison("jobs", "id = 'j2'", IllFormedJob("j2"));
  v1::Node node;
  node.set_id("n2");
  node.set_hostname("h\xffost");
  Poison("nodes", "id = 'n2'", node.SerializeAsString());
  v1::Event event = MakeEvent("x\xffy");
  event.set_job_id("j1");
  Poison("events", "reason = 'created j1'", event.SerializeAsString());
  Poison("runs", "job_id = 'j3'", "\xff\xff\xff\xff");
  Poison("checkpoints", "job_id = 'j3'", std::string("\x0a\x05", 2));  // truncated

  auto store = OpenOrDie(path_);
  ASSERT_NE(store, nullptr);
  std::map<std::string, int> moved;
  store->set_quarantine_listener([&](const QuarantinedRow& row) { moved[row.table]++; });

  // Listing jobs skips j2 and moves it, with its run and checkpoint.
  absl::StatusOr<JobPage> page = store->ListJobs(JobQuery());
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(Ids(page->jobs), (std::vector<std::string>{"j3", "j1"}));
  EXPECT_EQ(moved, (std::map<std::string, int>{{"jobs", 1}}));
  absl::StatusOr<v1::Job> gone = store->GetJob("j2");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gone.status().message()),
              HasSubstr("job j2 not found: its stored record could not be read (the stored"));
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr("moved to the quarantine table"));
  EXPECT_EQ(store->GetJob("nope").status().message(), "job nope not found");

  // The others, each where it is read.
  EXPECT_TRUE(store->ListRuns("j3").empty());
  EXPECT_EQ(store->ListRuns("j1").size(), 1u);
  EXPECT_TRUE(store->ListCheckpoints("j3").empty());
  EXPECT_EQ(store->ListCheckpoints("j1").size(), 1u);
  std::vector<v1::Node> nodes = store->ListNodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].id(), "n1");
  EXPECT_THAT(std::string(store->GetNode("n2").status().message()),
              HasSubstr("node n2 not found: its stored record could not be read"));
  std::vector<std::string> reasons;
  for (const v1::Event& e : store->ListEvents("", 0, 0)) reasons.push_back(e.reason());
  // created j2 and j3, and a store.quarantine event per row moved before this read (the
  // event's own comes after it).
  EXPECT_EQ(reasons.size(), 2u + 4u);
  EXPECT_EQ(reasons[0], "created j2");
  EXPECT_EQ(moved, (std::map<std::string, int>{
                       {"jobs", 1}, {"runs", 1}, {"checkpoints", 1}, {"nodes", 1}, {"events", 1}}));

  std::vector<QuarantinedRow> held = store->ListQuarantined();
  std::vector<std::string> where;
  for (const QuarantinedRow& row : held) where.push_back(row.table + " " + row.key);
  EXPECT_THAT(where, ElementsAre("jobs j2", "runs j2#1", "checkpoints 2", "runs j3#1",
                                 "checkpoints 3", "nodes n2", "events 1"));
  EXPECT_THAT(held[1].reason, HasSubstr("its job's row could not be read"));
  EXPECT_EQ(held[0].reason,
            "the stored 35-byte message does not parse as dhp.v1.Job: spec.labels.owner: not "
            "valid UTF-8: byte 0xFF at line 1, column 3 (offset 2)");
  EXPECT_THAT(held[3].reason, HasSubstr("does not parse as dhp.v1.Run: the bytes are damaged"));
  EXPECT_THAT(held[5].reason, HasSubstr("dhp.v1.Node: hostname: not valid UTF-8: byte 0xFF"));
  EXPECT_THAT(held[6].reason, HasSubstr("dhp.v1.Event: reason: not valid UTF-8: byte 0xFF"));
  EXPECT_EQ(store->CountQuarantined(),
            (std::map<std::string, int64_t>{
                {"jobs", 1}, {"runs", 2}, {"nodes", 1}, {"checkpoints", 2}, {"events", 1}}));

  // The events say so, for the job (and node) they concern.
  std::vector<v1::Event> j2_events = store->ListEvents("j2", 0, 0);
  ASSERT_EQ(j2_events.size(), 2u);
  EXPECT_EQ(j2_events[1].type(), "store.quarantine");
  EXPECT_THAT(j2_events[1].reason(), HasSubstr("jobs row j2 could not be read (the stored "));
  EXPECT_THAT(j2_events[1].reason(), HasSubstr("as id 1, with its 1 run and 1 checkpoint"));

  // Reopening finds nothing more to move, and everything still there reads.
  store.reset();
  store = OpenOrDie(path_);
  ASSERT_NE(store, nullptr);
  store->set_quarantine_listener([&](const QuarantinedRow& row) { moved["again"]++; });
  EXPECT_EQ(Ids(store->ListJobs(JobQuery())->jobs), (std::vector<std::string>{"j3", "j1"}));
  EXPECT_EQ(store->ListNodes().size(), 1u);
  EXPECT_EQ(store->ListEvents("", 0, 0).size(), 7u);
  EXPECT_EQ(moved.count("again"), 0u);
  EXPECT_EQ(store->ListQuarantined().size(), 7u);
}

TEST_F(StoreQuarantineTest, PagesAndEventBatchesStayWholeAroundUnreadableRows) {
  {
    auto store = OpenOrDie(path_);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 10; ++i) {
      JobWrite write;
      write.job = MakeJob("j" + std::to_string(i), v1::JOB_STATE_QUEUED);
      write.create = true;
      write.events = {MakeEvent("e" + std::to_string(i))};
      ASSERT_TRUE(store->Commit(write).ok());
    }
  }
  for (int i : {3, 4, 5, 8}) {
    Poison("jobs", "id = 'j" + std::to_string(i) + "'", IllFormedJob("j" + std::to_string(i)));
  }
  for (int i : {1, 2, 6}) {
    v1::Event bad = MakeEvent("x\xffy");
    Poison("events", "reason = 'e" + std::to_string(i) + "'", bad.SerializeAsString());
  }
  auto store = OpenOrDie(path_);
  ASSERT_NE(store, nullptr);

  // Pages of 2, newest first: every readable job once, in order.
  std::vector<std::string> seen;
  JobQuery query;
  query.limit = 2;
  for (int pages = 0; pages < 10; ++pages) {
    absl::StatusOr<JobPage> page = store->ListJobs(query);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const v1::Job& job : page->jobs) seen.push_back(job.id());
    EXPECT_EQ(page->jobs.size(), page->next_before_seq == 0 ? page->jobs.size() : 2u);
    if (page->next_before_seq == 0) break;
    query.before_seq = page->next_before_seq;
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"j9", "j7", "j6", "j2", "j1", "j0"}));

  // Batches of 2 events (as Watch reads them) skip the unreadable ones without coming up short.
  std::vector<v1::Event> batch = store->ListEvents("", 0, 2);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].reason(), "e0");
  EXPECT_EQ(batch[1].reason(), "e3");
}

TEST_F(StoreQuarantineTest, WritesOfTextThatIsNotUtf8AreRefused) {
  auto store = OpenOrDie(path_);
  ASSERT_NE(store, nullptr);
  JobWrite write;
  write.job = MakeJob("j1", v1::JOB_STATE_QUEUED);
  write.create = true;
  (*write.job.mutable_spec()->mutable_labels())["owner"] =
      "ab\xff"
      "cd";
  absl::Status s = store->Commit(write).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "refusing to store job j1: spec.labels.owner: not valid UTF-8: byte 0xFF at line 1, "
            "column 3 (offset 2); string fields must be UTF-8, or the stored row could not be "
            "read back");
  write.job.mutable_spec()->clear_labels();
  write.events = {MakeEvent("x\xffy")};
  s = store->Commit(write).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("a job.state event: reason: not valid UTF-8"));
  v1::Run run;
  run.set_attempt(1);
  run.set_reason("\xc3");
  write.events.clear();
  write.runs = {run};
  EXPECT_THAT(std::string(store->Commit(write).status().message()),
              HasSubstr("run attempt 1 of job j1: reason: not valid UTF-8"));
  EXPECT_EQ(store->GetJob("j1").status().code(), absl::StatusCode::kNotFound);  // nothing stored

  v1::Node node;
  node.set_id("n1");
  node.set_hostname("h\xffost");
  s = store->PutNode(node, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("refusing to store node n1: hostname: not"));
  EXPECT_TRUE(store->ListNodes().empty());
  EXPECT_EQ(store->LastEventId(), 0);
  EXPECT_TRUE(store->ListQuarantined().empty());
}

}  // namespace
}  // namespace dhp::controller
