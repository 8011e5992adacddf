// The Store's jobs, runs, labels and events (the other tables: store_tables_test.cc).
#include "controller/store.h"

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "controller/sqlite_db.h"
#include "controller/store_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using store_test::EqualsProto;
using store_test::Time;
using store_test::MakeJob;
using store_test::MakeEvent;
using store_test::Create;
using store_test::Ids;
using store_test::OpenOrDie;
using store_test::StoreTest;
using ::testing::HasSubstr;

TEST_F(StoreTest, OpenCreatesLatestSchema) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  EXPECT_GE(Store::LatestSchemaVersion(), 1);
  EXPECT_EQ(store->schema_version(), Store::LatestSchemaVersion());
  EXPECT_EQ(store->LastEventId(), 0);
  EXPECT_TRUE(store->ListNodes().empty());
}

TEST_F(StoreTest, JobRunsAndEventsRoundTrip) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  JobWrite write;
  write.job = MakeJob("j1", v1::JOB_STATE_QUEUED, {{"team", "vision"}, {"env", "dev"}});
  write.job.mutable_spec()->mutable_training()->set_max_steps(1000);
  write.job.mutable_spec()->mutable_training()->set_learning_rate(3e-4);
  write.job.set_message("submitted");
  write.job.set_current_attempt(1);
  write.job.set_latest_loss(2.5);
  write.create = true;
  v1::Run run;
  run.set_attempt(1);  // job_id left empty: filled by the store
  run.set_state(v1::RUN_STATE_PENDING);
  *run.mutable_create_time() = Time(1700000000, 999);
  run.set_start_step(0);
  write.runs.push_back(run);
  write.events.push_back(MakeEvent("job.state", "", "QUEUED"));
  write.events.push_back(MakeEvent("run.state", "", "PENDING"));
  write.events[1].set_attempt(1);

  absl::StatusOr<std::vector<v1::Event>> events = store->Commit(write);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    v1::Event expected = write.events[i];
    expected.set_job_id("j1");
    expected.set_id((*events)[i].id());
    EXPECT_THAT((*events)[i], EqualsProto(expected));
  }
  EXPECT_GT((*events)[0].id(), 0);
  EXPECT_GT((*events)[1].id(), (*events)[0].id());

  absl::StatusOr<v1::Job> got = store->GetJob("j1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, EqualsProto(write.job));

  std::vector<v1::Run> runs = store->ListRuns("j1");
  ASSERT_EQ(runs.size(), 1u);
  v1::Run expected_run = run;
  expected_run.set_job_id("j1");
  EXPECT_THAT(runs[0], EqualsProto(expected_run));

  std::vector<v1::Event> listed = store->ListEvents("j1", 0, 0);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_THAT(listed[0], EqualsProto((*events)[0]));
  EXPECT_THAT(listed[1], EqualsProto((*events)[1]));
  EXPECT_EQ(store->LastEventId(), (*events)[1].id());
}

TEST_F(StoreTest, UpdateReplacesJobLabelsAndUpsertsRuns) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  JobWrite write;
  write.job = MakeJob("j1", v1::JOB_STATE_QUEUED, {{"team", "vision"}});
  write.create = true;
  v1::Run run1;
  run1.set_attempt(1);
  run1.set_state(v1::RUN_STATE_PENDING);
  write.runs = {run1};
  ASSERT_TRUE(store->Commit(write).ok());

  JobWrite update;
  update.job = MakeJob("j1", v1::JOB_STATE_RUNNING, {{"team", "text"}});
  update.job.set_latest_step(17);
  run1.set_state(v1::RUN_STATE_FAILED);
  run1.set_reason("oom");
  v1::Run run2;
  run2.set_attempt(2);
  run2.set_state(v1::RUN_STATE_RUNNING);
  update.runs = {run2, run1};
  ASSERT_TRUE(store->Commit(update).ok());

  absl::StatusOr<v1::Job> got = store->GetJob("j1");
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(*got, EqualsProto(update.job));
  std::vector<v1::Run> runs = store->ListRuns("j1");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].attempt(), 1);
  EXPECT_EQ(runs[0].state(), v1::RUN_STATE_FAILED);
  EXPECT_EQ(runs[0].reason(), "oom");
  EXPECT_EQ(runs[0].job_id(), "j1");
  EXPECT_EQ(runs[1].attempt(), 2);
  EXPECT_EQ(runs[1].state(), v1::RUN_STATE_RUNNING);

  JobQuery old_label;
  old_label.labels = {{"team", "vision"}};
  EXPECT_TRUE(store->ListJobs(old_label)->jobs.empty());
  JobQuery new_label;
  new_label.labels = {{"team", "text"}};
  EXPECT_EQ(Ids(store->ListJobs(new_label)->jobs), std::vector<std::string>{"j1"});
}

TEST_F(StoreTest, AnUpdateWithItsLabelsUnchangedLeavesTheLabelRowsAlone) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  JobWrite write;
  write.job = MakeJob("j1", v1::JOB_STATE_QUEUED, {{"team", "vision"}});
  write.create = true;
  write.labels_unchanged = true;  // ignored on create: the rows are written
  ASSERT_TRUE(store->Commit(write).ok());
  JobQuery vision;
  vision.labels = {{"team", "vision"}};
  ASSERT_EQ(Ids(store->ListJobs(vision)->jobs), std::vector<std::string>{"j1"});

  // The caller's word is taken: the rows are not even read, so a job row whose labels differ
  // (which no caller may write this way) shows that they were left as they were.
  JobWrite update;
  update.job = MakeJob("j1", v1::JOB_STATE_RUNNING, {{"team", "text"}});
  update.job.set_latest_step(17);
  update.labels_unchanged = true;
  ASSERT_TRUE(store->Commit(update).ok());
  EXPECT_EQ(store->GetJob("j1")->latest_step(), 17);
  EXPECT_EQ(Ids(store->ListJobs(vision)->jobs), std::vector<std::string>{"j1"});

  update.labels_unchanged = false;  // the default: the rows follow the job row
  ASSERT_TRUE(store->Commit(update).ok());
  EXPECT_TRUE(store->ListJobs(vision)->jobs.empty());
  JobQuery text;
  text.labels = {{"team", "text"}};
  EXPECT_EQ(Ids(store->ListJobs(text)->jobs), std::vector<std::string>{"j1"});
}

TEST_F(StoreTest, DuplicateCreateIsRefusedAndLeavesTheJobAlone) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  const v1::Job original = MakeJob("j1", v1::JOB_STATE_RUNNING, {{"team", "vision"}});
  ASSERT_TRUE(Create(*store, original).ok());
  const int64_t last_event = store->LastEventId();

  JobWrite dup;
  dup.job = MakeJob("j1", v1::JOB_STATE_QUEUED, {{"team", "text"}});
  dup.create = true;
  v1::Run run;
  run.set_attempt(1);
  dup.runs = {run};
  dup.events = {MakeEvent("job.state", "", "QUEUED")};
  absl::StatusOr<std::vector<v1::Event>> result = store->Commit(dup);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(result.status().message(), "job j1 already exists");

  absl::StatusOr<v1::Job> got = store->GetJob("j1");
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(*got, EqualsProto(original));
  EXPECT_TRUE(store->ListRuns("j1").empty());
  EXPECT_EQ(store->LastEventId(), last_event);
  JobQuery by_label;
  by_label.labels = {{"team", "text"}};
  EXPECT_TRUE(store->ListJobs(by_label)->jobs.empty());
  by_label.labels = {{"team", "vision"}};
  EXPECT_EQ(Ids(store->ListJobs(by_label)->jobs), std::vector<std::string>{"j1"});
}

TEST_F(StoreTest, UpdateOfMissingJobIsRefused) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  JobWrite write;
  write.job = MakeJob("ghost", v1::JOB_STATE_RUNNING);
  write.events = {MakeEvent("job.state", "QUEUED", "RUNNING")};
  absl::StatusOr<std::vector<v1::Event>> result = store->Commit(write);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(result.status().message(), "job ghost not found");
  EXPECT_EQ(store->LastEventId(), 0);

  absl::StatusOr<v1::Job> got = store->GetJob("ghost");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("ghost"));
}

TEST_F(StoreTest, InvalidWritesAreRefused) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  JobWrite no_id;
  no_id.create = true;
  EXPECT_EQ(store->Commit(no_id).status().code(), absl::StatusCode::kInvalidArgument);

  JobWrite foreign_run;
  foreign_run.job = MakeJob("j1", v1::JOB_STATE_QUEUED);
  foreign_run.create = true;
  v1::Run run;
  run.set_job_id("other");
  run.set_attempt(1);
  foreign_run.runs = {run};
  absl::Status status = store->Commit(foreign_run).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("other"));
  EXPECT_EQ(store->GetJob("j1").status().code(), absl::StatusCode::kNotFound);

  // A spec checked already is not checked again; the rest of the job still is.
  JobWrite checked;
  checked.job = MakeJob("j2", v1::JOB_STATE_QUEUED);
  checked.job.set_owner("ann\xc0");
  checked.create = true;
  checked.spec_checked = true;
  status = store->Commit(checked).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("owner: not valid UTF-8"));
  EXPECT_EQ(store->GetJob("j2").status().code(), absl::StatusCode::kNotFound);

  JobQuery negative;
  negative.limit = -1;
  EXPECT_EQ(store->ListJobs(negative).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->PutNode(v1::Node(), {}).status().code(), absl::StatusCode::kInvalidArgument);
}

// A failure half-way through a Commit (here: a trigger that rejects the second event, after the
// job row, labels, run and first event were written) must leave nothing behind.
TEST_F(StoreTest, FailedCommitLeavesNoPartialRows) {
  auto store = OpenOrDie(path_);
  ASSERT_NE(store, nullptr);
  const v1::Job original = MakeJob("j1", v1::JOB_STATE_QUEUED, {{"team", "vision"}});
  ASSERT_TRUE(Create(*store, original).ok());
  const int64_t last_event = store->LastEventId();
  {
    auto other = SqliteDb::Open(path_);
    ASSERT_TRUE(other.ok());
    ASSERT_TRUE((*other)
                    ->Exec("CREATE TRIGGER boom BEFORE INSERT ON events WHEN NEW.type = 'boom' "
                           "BEGIN SELECT RAISE(ABORT, 'boom refused'); END;")
                    .ok());
  }
  JobWrite write;
  write.job = MakeJob("j1", v1::JOB_STATE_SCHEDULED, {{"team", "text"}});
  v1::Run run;
  run.set_attempt(1);
  write.runs = {run};
  write.events = {MakeEvent("job.state", "QUEUED", "SCHEDULED"), MakeEvent("boom", "", "")};
  absl::Status status = store->Commit(write).status();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("boom refused"));

  absl::StatusOr<v1::Job> got = store->GetJob("j1");
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(*got, EqualsProto(original));
  EXPECT_TRUE(store->ListRuns("j1").empty());
  EXPECT_EQ(store->LastEventId(), last_event);
  EXPECT_TRUE(store->ListEvents("", last_event, 0).empty());
  JobQuery by_label;
  by_label.labels = {{"team", "vision"}};
  EXPECT_EQ(Ids(store->ListJobs(by_label)->jobs), std::vector<std::string>{"j1"});

  // The store is still usable afterwards: no transaction was left open.
  write.events.pop_back();
  ASSERT_TRUE(store->Commit(write).ok());
  EXPECT_EQ(store->GetJob("j1")->state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(StoreTest, FiltersByStatesAndLabels) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Create(*store, MakeJob("a", v1::JOB_STATE_QUEUED, {{"team", "vision"}})).ok());
  ASSERT_TRUE(Create(*store, MakeJob("b", v1::JOB_STATE_RUNNING,
                                     {{"team", "vision"}, {"env", "prod"}})).ok());
  ASSERT_TRUE(Create(*store, MakeJob("c", v1::JOB_STATE_RUNNING, {{"team", "text"}})).ok());
  ASSERT_TRUE(Create(*store, MakeJob("d", v1::JOB_STATE_FAILED, {{"env", "prod"}})).ok());
  ASSERT_TRUE(Create(*store, MakeJob("e", v1::JOB_STATE_SUCCEEDED)).ok());

  auto list = [&](std::vector<v1::JobState> states, std::map<std::string, std::string> labels) {
    JobQuery query;
    query.states = std::move(states);
    query.labels = std::move(labels);
    absl::StatusOr<JobPage> page = store->ListJobs(query);
    EXPECT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->next_before_seq, 0);
    return Ids(page->jobs);
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(list({}, {}), (V{"e", "d", "c", "b", "a"}));
  EXPECT_EQ(list({v1::JOB_STATE_RUNNING}, {}), (V{"c", "b"}));
  EXPECT_EQ(list({v1::JOB_STATE_QUEUED, v1::JOB_STATE_FAILED}, {}), (V{"d", "a"}));
  EXPECT_EQ(list({}, {{"team", "vision"}}), (V{"b", "a"}));
  EXPECT_EQ(list({}, {{"team", "vision"}, {"env", "prod"}}), (V{"b"}));
  EXPECT_EQ(list({}, {{"env", "prod"}}), (V{"d", "b"}));
  EXPECT_EQ(list({v1::JOB_STATE_RUNNING}, {{"team", "vision"}}), (V{"b"}));
  EXPECT_EQ(list({v1::JOB_STATE_QUEUED}, {{"env", "prod"}}), V{});
  EXPECT_EQ(list({}, {{"team", "nope"}}), V{});

  std::map<v1::JobState, int64_t> counts = store->CountJobsByState();
  std::map<v1::JobState, int64_t> expected = {{v1::JOB_STATE_QUEUED, 1},
                                               {v1::JOB_STATE_RUNNING, 2},
                                               {v1::JOB_STATE_FAILED, 1},
                                               {v1::JOB_STATE_SUCCEEDED, 1}};
  EXPECT_EQ(counts, expected);
}

TEST_F(StoreTest, PaginatesWithoutDuplicatesOrOmissions) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  std::vector<std::string> created;
  for (int i = 0; i < 25; ++i) {
    const std::string id = "job-" + std::to_string(i);
    // Every third job is FAILED, so a filtered listing also spans pages.
    ASSERT_TRUE(Create(*store, MakeJob(id, i % 3 == 0 ? v1::JOB_STATE_FAILED
                                                      : v1::JOB_STATE_QUEUED)).ok());
    created.push_back(id);
  }
  std::vector<std::string> newest_first(created.rbegin(), created.rend());

  JobQuery query;
  query.limit = 10;
  std::vector<std::string> seen;
  std::vector<size_t> page_sizes;
  while (true) {
    absl::StatusOr<JobPage> page = store->ListJobs(query);
    ASSERT_TRUE(page.ok()) << page.status();
    page_sizes.push_back(page->jobs.size());
    for (const std::string& id : Ids(page->jobs)) seen.push_back(id);
    if (page->next_before_seq == 0) break;
    ASSERT_LT(page_sizes.size(), 10u) << "pagination does not terminate";
    query.before_seq = page->next_before_seq;
  }
  EXPECT_EQ(page_sizes, (std::vector<size_t>{10, 10, 5}));
  EXPECT_EQ(seen, newest_first);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 25u);

  // Exactly `limit` left: the last full page says there is no more.
  JobQuery failed;
  failed.states = {v1::JOB_STATE_FAILED};  // 9 jobs: 0, 3, ..., 24
  failed.limit = 3;
  std::vector<std::string> failed_seen;
  int pages = 0;
  while (true) {
    absl::StatusOr<JobPage> page = store->ListJobs(failed);
    ASSERT_TRUE(page.ok());
    ++pages;
    for (const std::string& id : Ids(page->jobs)) failed_seen.push_back(id);
    if (page->next_before_seq == 0) break;
    ASSERT_LT(pages, 10);
    failed.before_seq = page->next_before_seq;
  }
  EXPECT_EQ(pages, 3);
  std::vector<std::string> expected_failed;
  for (int i = 24; i >= 0; i -= 3) expected_failed.push_back("job-" + std::to_string(i));
  EXPECT_EQ(failed_seen, expected_failed);

  JobQuery defaulted;
  defaulted.limit = 0;  // the default, 50
  EXPECT_EQ(store->ListJobs(defaulted)->jobs.size(), 25u);
}

TEST_F(StoreTest, EventIdsIncreaseAndListEventsFilters) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  std::vector<int64_t> ids;
  for (const char* job : {"a", "b"}) {
    JobWrite write;
    write.job = MakeJob(job, v1::JOB_STATE_QUEUED);
    write.create = true;
    write.events = {MakeEvent("job.state", "", "QUEUED")};
    auto events = store->Commit(write);
    ASSERT_TRUE(events.ok());
    ids.push_back((*events)[0].id());
  }
  v1::Node node;
  node.set_id("n1");
  auto node_events = store->PutNode(node, {MakeEvent("node.state", "", "READY")});
  ASSERT_TRUE(node_events.ok());
  ASSERT_EQ(node_events->size(), 1u);
  EXPECT_EQ((*node_events)[0].node_id(), "n1");
  EXPECT_EQ((*node_events)[0].job_id(), "");
  ids.push_back((*node_events)[0].id());
  for (int step = 0; step < 3; ++step) {
    JobWrite write;
    write.job = MakeJob("a", v1::JOB_STATE_RUNNING);
    write.events = {MakeEvent("job.progress", "", std::to_string(step))};
    auto events = store->Commit(write);
    ASSERT_TRUE(events.ok());
    ids.push_back((*events)[0].id());
  }
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_GT(ids[i], ids[i - 1]);
  EXPECT_EQ(store->LastEventId(), ids.back());

  std::vector<v1::Event> all = store->ListEvents("", 0, 0);
  ASSERT_EQ(all.size(), 6u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].id(), ids[i]);

  std::vector<v1::Event> a = store->ListEvents("a", 0, 0);
  ASSERT_EQ(a.size(), 4u);
  for (const v1::Event& e : a) EXPECT_EQ(e.job_id(), "a");

  std::vector<v1::Event> a_after = store->ListEvents("a", ids[3], 0);  // after the 1st progress
  ASSERT_EQ(a_after.size(), 2u);
  EXPECT_EQ(a_after[0].id(), ids[4]);
  EXPECT_EQ(a_after[1].id(), ids[5]);
  EXPECT_EQ(a_after[1].to_state(), "2");

  std::vector<v1::Event> limited = store->ListEvents("", ids[0], 2);
  ASSERT_EQ(limited.size(), 2u);
  EXPECT_EQ(limited[0].id(), ids[1]);
  EXPECT_EQ(limited[1].id(), ids[2]);
  EXPECT_TRUE(store->ListEvents("", ids.back(), 0).empty());
  EXPECT_TRUE(store->ListEvents("nobody", 0, 0).empty());
}


}  // namespace
}  // namespace dhp::controller
