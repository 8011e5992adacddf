// The Store's nodes, checkpoints and rendezvous keys, and its file: reopening, schema
// versions, WAL mode (jobs, runs and events: store_test.cc).
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
