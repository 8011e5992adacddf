#include "controller/store.h"

#include <stdlib.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "controller/sqlite_db.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

MATCHER_P(EqualsProto, expected, "") {
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  if (differencer.Compare(expected, arg)) return true;
  *result_listener << "differs: " << diff;
  return false;
}

google::protobuf::Timestamp Time(int64_t seconds, int32_t nanos = 0) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  t.set_nanos(nanos);
  return t;
}

v1::Job MakeJob(const std::string& id, v1::JobState state,
                const std::map<std::string, std::string>& labels = {}) {
  v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_name("name-" + id);
  job.mutable_spec()->set_priority(7);
  for (const auto& [k, v] : labels) (*job.mutable_spec()->mutable_labels())[k] = v;
  job.set_state(state);
  *job.mutable_create_time() = Time(1700000000, 123456789);
  *job.mutable_update_time() = Time(1700000100, 5);
  return job;
}

v1::Event MakeEvent(const std::string& type, const std::string& from, const std::string& to) {
  v1::Event event;
  event.set_type(type);
  event.set_from_state(from);
  event.set_to_state(to);
  event.set_reason("because " + to);
  *event.mutable_time() = Time(1700000200, 42000);
  return event;
}

absl::Status Create(Store& store, const v1::Job& job) {
  JobWrite write;
  write.job = job;
  write.create = true;
  return store.Commit(write).status();
}

std::vector<std::string> Ids(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> ids;
  for (const v1::Job& job : jobs) ids.push_back(job.id());
  return ids;
}

std::unique_ptr<Store> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/store_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/dhp.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  std::string path_;
};

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

TEST_F(StoreTest, NodesRoundTrip) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  v1::Node n2;
  n2.set_id("node-2");
  n2.set_hostname("gpu-b");
  n2.set_address("10.0.0.2:7070");
  n2.set_state(v1::NODE_STATE_READY);
  n2.set_agent_version("0.1.0");
  n2.mutable_resources()->set_memory_bytes(int64_t{1} << 40);
  v1::Gpu* gpu = n2.mutable_resources()->add_gpus();
  gpu->set_index(0);
  gpu->set_name("NVIDIA H100");
  gpu->set_memory_bytes(int64_t{80} << 30);
  gpu->set_uuid("GPU-1234");
  *n2.mutable_register_time() = Time(1700000000, 1);
  *n2.mutable_last_heartbeat_time() = Time(1700000300, 2);
  v1::Node n1;
  n1.set_id("node-1");
  n1.set_hostname("cpu-a");
  n1.mutable_resources()->set_cpu_slots(4);
  ASSERT_TRUE(store->PutNode(n2, {}).ok());
  ASSERT_TRUE(store->PutNode(n1, {}).ok());

  absl::StatusOr<v1::Node> got = store->GetNode("node-2");
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(*got, EqualsProto(n2));
  std::vector<v1::Node> nodes = store->ListNodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_THAT(nodes[0], EqualsProto(n1));
  EXPECT_THAT(nodes[1], EqualsProto(n2));

  n2.set_state(v1::NODE_STATE_LOST);
  ASSERT_TRUE(store->PutNode(n2, {}).ok());
  EXPECT_EQ(store->GetNode("node-2")->state(), v1::NODE_STATE_LOST);
  EXPECT_EQ(store->ListNodes().size(), 2u);

  absl::StatusOr<v1::Node> missing = store->GetNode("node-9");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("node-9"));
}

TEST_F(StoreTest, CheckpointsRoundTrip) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Create(*store, MakeJob("j1", v1::JOB_STATE_RUNNING)).ok());
  ASSERT_TRUE(Create(*store, MakeJob("j2", v1::JOB_STATE_RUNNING)).ok());
  auto make = [](const std::string& job, int64_t step) {
    v1::Checkpoint c;
    c.set_job_id(job);
    c.set_attempt(1);
    c.set_step(step);
    c.set_path("/ckpt/" + job + "/step-" + std::to_string(step));
    c.set_size_bytes(step * 1000);
    *c.mutable_create_time() = Time(1700000000 + step, 7);
    return c;
  };
  const int64_t before = store->LastEventId();
  v1::Checkpoint event_source = make("j1", 200);
  absl::StatusOr<v1::Checkpoint> c200 =
      store->AddCheckpoint(event_source, {MakeEvent("checkpoint", "", "200")});
  ASSERT_TRUE(c200.ok()) << c200.status();
  absl::StatusOr<v1::Checkpoint> c100 = store->AddCheckpoint(make("j1", 100), {});
  ASSERT_TRUE(c100.ok());
  ASSERT_TRUE(store->AddCheckpoint(make("j2", 50), {}).ok());
  EXPECT_GT(c200->id(), 0);
  EXPECT_GT(c100->id(), c200->id());
  v1::Checkpoint expected200 = make("j1", 200);
  expected200.set_id(c200->id());
  EXPECT_THAT(*c200, EqualsProto(expected200));

  std::vector<v1::Event> events = store->ListEvents("j1", before, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type(), "checkpoint");

  std::vector<v1::Checkpoint> listed = store->ListCheckpoints("j1");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_THAT(listed[0], EqualsProto(*c100));  // by step
  EXPECT_THAT(listed[1], EqualsProto(*c200));

  ASSERT_TRUE(store->DeleteCheckpoint(c100->id()).ok());
  listed = store->ListCheckpoints("j1");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id(), c200->id());
  EXPECT_EQ(store->ListCheckpoints("j2").size(), 1u);

  absl::Status again = store->DeleteCheckpoint(c100->id()).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(again.message()), HasSubstr(std::to_string(c100->id())));

  v1::Checkpoint updated = *c200;
  updated.set_state(v1::CHECKPOINT_STATE_COMPLETE);
  updated.set_size_bytes(4096);
  v1::Event done;
  done.set_type("checkpoint");
  absl::StatusOr<std::vector<v1::Event>> appended = store->UpdateCheckpoint(updated, {done});
  ASSERT_TRUE(appended.ok()) << appended.status();
  ASSERT_EQ(appended->size(), 1u);
  EXPECT_EQ((*appended)[0].job_id(), "j1");
  EXPECT_GT((*appended)[0].id(), 0);
  listed = store->ListCheckpoints("j1");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state(), v1::CHECKPOINT_STATE_COMPLETE);
  EXPECT_EQ(listed[0].size_bytes(), 4096);
  updated.set_id(987654);
  EXPECT_EQ(store->UpdateCheckpoint(updated, {}).status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<v1::Checkpoint> orphan = store->AddCheckpoint(make("nope", 1), {});
  EXPECT_EQ(orphan.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(orphan.status().message()), HasSubstr("nope"));
}

TEST_F(StoreTest, ReopenedFileKeepsEverything) {
  v1::Job job = MakeJob("j1", v1::JOB_STATE_RUNNING, {{"team", "vision"}});
  v1::Node node;
  node.set_id("n1");
  node.set_hostname("host");
  int64_t last_event = 0;
  int64_t ckpt_id = 0;
  {
    auto store = OpenOrDie(path_);
    ASSERT_NE(store, nullptr);
    JobWrite write;
    write.job = job;
    write.create = true;
    v1::Run run;
    run.set_attempt(1);
    run.set_state(v1::RUN_STATE_RUNNING);
    write.runs = {run};
    write.events = {MakeEvent("job.state", "", "RUNNING")};
    ASSERT_TRUE(store->Commit(write).ok());
    ASSERT_TRUE(store->PutNode(node, {MakeEvent("node.state", "", "READY")}).ok());
    v1::Checkpoint ckpt;
    ckpt.set_job_id("j1");
    ckpt.set_step(10);
    auto added = store->AddCheckpoint(ckpt, {});
    ASSERT_TRUE(added.ok());
    ckpt_id = added->id();
    last_event = store->LastEventId();
  }
  auto store = OpenOrDie(path_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->schema_version(), Store::LatestSchemaVersion());
  absl::StatusOr<v1::Job> got = store->GetJob("j1");
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(*got, EqualsProto(job));
  ASSERT_EQ(store->ListRuns("j1").size(), 1u);
  EXPECT_EQ(store->ListRuns("j1")[0].state(), v1::RUN_STATE_RUNNING);
  EXPECT_THAT(*store->GetNode("n1"), EqualsProto(node));
  ASSERT_EQ(store->ListCheckpoints("j1").size(), 1u);
  EXPECT_EQ(store->ListCheckpoints("j1")[0].id(), ckpt_id);
  EXPECT_EQ(store->LastEventId(), last_event);
  EXPECT_EQ(store->ListEvents("", 0, 0).size(), 2u);
  JobQuery by_label;
  by_label.labels = {{"team", "vision"}};
  EXPECT_EQ(Ids(store->ListJobs(by_label)->jobs), std::vector<std::string>{"j1"});

  // Ids keep increasing across restarts, so a Watch resuming after an old id misses nothing.
  JobWrite write;
  write.job = job;
  write.events = {MakeEvent("job.state", "RUNNING", "RUNNING")};
  auto events = store->Commit(write);
  ASSERT_TRUE(events.ok());
  EXPECT_GT((*events)[0].id(), last_event);
}

// The rendezvous KV of run attempts (issue 15 §5): kept across a reopen while the run lasts;
// attempts whose run ended (or whose job is gone) are deleted.
TEST_F(StoreTest, RendezvousKeysAndRepliesLastAsLongAsTheirRun) {
  auto store = OpenOrDie(path_);
  ASSERT_NE(store, nullptr);
  for (const char* id : {"j-live", "j-ended", "j-deleted"}) {
    JobWrite write;
    write.job = MakeJob(id, v1::JOB_STATE_RUNNING);
    write.create = true;
    v1::Run run;
    run.set_attempt(1);
    run.set_state(std::string(id) == "j-ended" ? v1::RUN_STATE_FAILED : v1::RUN_STATE_RUNNING);
    write.runs.push_back(run);
    ASSERT_TRUE(store->Commit(write).ok());
    KvWrite key;
    key.job_id = id;
    key.attempt = 1;
    key.key = "world/arrived/0";
    key.value = std::string("a\0b", 3);
    ASSERT_TRUE(store->WriteKv(key).ok());
  }
  KvWrite add;  // a counter with the answer to its request
  add.job_id = "j-live";
  add.attempt = 1;
  add.key = "n";
  add.value = "5";
  add.request_id = "client-1";
  add.reply = 5;
  ASSERT_TRUE(store->WriteKv(add).ok());
  KvWrite del;
  del.job_id = "j-live";
  del.attempt = 1;
  del.key = "n";
  del.request_id = "client-2";
  del.reply = 1;
  ASSERT_TRUE(store->WriteKv(del).ok());
  EXPECT_EQ(store->WriteKv(add).code(), absl::StatusCode::kAlreadyExists);  // ids are unique
  KvWrite orphan = add;
  orphan.job_id = "j-unknown";
  EXPECT_EQ(store->WriteKv(orphan).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->DeleteJob("j-deleted").ok());

  store = OpenOrDie(path_);
  absl::StatusOr<std::vector<StoredKvScope>> loaded = store->LoadKv();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 1u);
  const StoredKvScope& live = (*loaded)[0];
  EXPECT_EQ(live.job_id, "j-live");
  EXPECT_EQ(live.attempt, 1);
  EXPECT_EQ(live.keys, (std::map<std::string, std::string>{
                           {"world/arrived/0", std::string("a\0b", 3)}}));
  EXPECT_EQ(live.replies, (std::map<std::string, int64_t>{{"client-1", 5}, {"client-2", 1}}));

  ASSERT_TRUE(store->DeleteKvScope("j-live", 1).ok());
  loaded = store->LoadKv();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->empty());
}

TEST_F(StoreTest, NewerSchemaIsRefused) {
  { ASSERT_NE(OpenOrDie(path_), nullptr); }
  const int newer = Store::LatestSchemaVersion() + 1;
  {
    auto db = SqliteDb::Open(path_);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("PRAGMA user_version = " + std::to_string(newer)).ok());
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(store.status().message());
  EXPECT_THAT(message, HasSubstr("schema version " + std::to_string(newer)));
  EXPECT_THAT(message, HasSubstr("(" + std::to_string(Store::LatestSchemaVersion()) + ")"));
  EXPECT_THAT(message, HasSubstr(path_));
}

TEST_F(StoreTest, FileDatabaseUsesWal) {
  auto store = OpenOrDie(path_);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Create(*store, MakeJob("j1", v1::JOB_STATE_QUEUED)).ok());
  // journal_mode=WAL is persistent: a second, independent connection sees it.
  auto other = SqliteDb::Open(path_);
  ASSERT_TRUE(other.ok());
  absl::StatusOr<std::string> mode = (*other)->QueryText("PRAGMA journal_mode");
  ASSERT_TRUE(mode.ok()) << mode.status();
  EXPECT_EQ(*mode, "wal");
  EXPECT_TRUE(std::filesystem::exists(path_ + "-wal"));
  // And the second connection reads what the first committed.
  EXPECT_EQ(*(*other)->QueryInt("SELECT COUNT(*) FROM jobs WHERE id = 'j1'"), 1);
}

TEST_F(StoreTest, UnopenablePathIsAnError) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_ + "/missing/dir/dhp.db");
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("missing/dir/dhp.db"));
}

}  // namespace
}  // namespace dhp::controller
