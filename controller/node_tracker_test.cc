// Tests NodeTracker with a FakeClock: registration and its validation, heartbeats, loss after
// the timeout (and not before), recovery, and the grace period after a controller restart.
#include "controller/node_tracker.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "controller/store.h"
#include "controller/time_util.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

constexpr int64_t kSecond = 1'000'000;

// (node_id, type, from, to, reason) of an event.
using EventRow = std::tuple<std::string, std::string, std::string, std::string, std::string>;
EventRow Row(const v1::Event& e) {
  return {e.node_id(), e.type(), e.from_state(), e.to_state(), e.reason()};
}
std::vector<EventRow> Rows(const std::vector<v1::Event>& events) {
  std::vector<EventRow> rows;
  for (const v1::Event& e : events) rows.push_back(Row(e));
  return rows;
}

v1::RegisterNodeRequest NodeRequest(const std::string& id, int cpu_slots = 2) {
  v1::RegisterNodeRequest req;
  req.mutable_node()->set_id(id);
  req.mutable_node()->set_hostname(id + ".example");
  req.mutable_node()->set_address("10.0.0.1");
  req.mutable_node()->mutable_resources()->set_cpu_slots(cpu_slots);
  return req;
}

class NodeTrackerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    options_.heartbeat_interval_ms = 2000;
    options_.heartbeat_timeout_ms = 10000;
    tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  }

  absl::Status Register(const v1::RegisterNodeRequest& req, std::vector<v1::Event>* events) {
    v1::RegisterNodeResponse resp;
    return tracker_->Register(req, &resp, events);
  }
  absl::Status Heartbeat(const std::string& id, std::vector<v1::Event>* events) {
    v1::HeartbeatRequest req;
    req.set_node_id(id);
    return tracker_->Heartbeat(req, events);
  }
  // Runs CheckHeartbeats and returns the events it recorded.
  std::vector<v1::Event> Check() {
    std::vector<v1::Event> events;
    absl::Status s = tracker_->CheckHeartbeats(&events);
    EXPECT_TRUE(s.ok()) << s;
    return events;
  }
  v1::NodeState StateOf(const std::string& id) {
    absl::StatusOr<v1::Node> node = store_->GetNode(id);
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? node->state() : v1::NODE_STATE_UNSPECIFIED;
  }

  FakeClock clock_;
  NodeTrackerOptions options_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<NodeTracker> tracker_;
};

// The tracker is not thread-safe: the controller uses it on its loop thread only, and a call
// from any other thread is a crash rather than a race.
TEST_F(NodeTrackerTest, UseOffTheLoopThreadIsAProgrammingError) {
  tracker_->List();  // binds this thread as the loop
  EXPECT_DEATH(std::thread([&] { tracker_->List(); }).join(),
               "called off the thread loop_ is bound to");
}

TEST_F(NodeTrackerTest, RegisterMakesNodeReadyWithAnEvent) {
  const int64_t now = clock_.NowMicros();
  v1::RegisterNodeRequest req = NodeRequest("n1");
  v1::RegisterNodeResponse resp;
  std::vector<v1::Event> events;
  ASSERT_TRUE(tracker_->Register(req, &resp, &events).ok());
  EXPECT_EQ(resp.node_id(), "n1");
  EXPECT_EQ(resp.heartbeat_interval_ms(), 2000);

  absl::StatusOr<v1::Node> node = store_->GetNode("n1");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->state(), v1::NODE_STATE_READY);
  EXPECT_EQ(node->hostname(), "n1.example");
  EXPECT_EQ(node->address(), "10.0.0.1");
  EXPECT_EQ(node->resources().cpu_slots(), 2);
  EXPECT_EQ(TimestampToMicros(node->register_time()), now);
  EXPECT_EQ(TimestampToMicros(node->last_heartbeat_time()), now);

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id(), 1);
  EXPECT_EQ(events[0].job_id(), "");
  EXPECT_EQ(TimestampToMicros(events[0].time()), now);
  EXPECT_EQ(Row(events[0]), EventRow("n1", "node.state", "", "READY", "registered"));
  EXPECT_EQ(Rows(store_->ListEvents("", 0, 0)), Rows(events));

  std::vector<v1::Node> listed = tracker_->List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id(), "n1");
}

TEST_F(NodeTrackerTest, ListsAPageAfterAnId) {
  for (const char* id : {"n3", "n1", "n4", "n2"}) {
    v1::RegisterNodeResponse resp;
    std::vector<v1::Event> events;
    ASSERT_TRUE(tracker_->Register(NodeRequest(id), &resp, &events).ok());
  }
  auto ids = [](const std::vector<v1::Node>& nodes) {
    std::vector<std::string> out;
    for (const v1::Node& n : nodes) out.push_back(n.id());
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(ids(tracker_->List("", 2)), (V{"n1", "n2"}));
  EXPECT_EQ(ids(tracker_->List("n2", 2)), (V{"n3", "n4"}));
  EXPECT_EQ(ids(tracker_->List("n4", 2)), V{});
  EXPECT_EQ(ids(tracker_->List("n15", 10)), (V{"n2", "n3", "n4"}));  // after, not from
  EXPECT_EQ(ids(tracker_->List("", 0)), V{});
  EXPECT_EQ(ids(tracker_->List()), (V{"n1", "n2", "n3", "n4"}));
}

TEST_F(NodeTrackerTest, RegisterWithoutIdUsesTheHostname) {
  v1::RegisterNodeRequest req = NodeRequest("");
  req.mutable_node()->set_hostname("gpu-host-3");
  req.mutable_node()->mutable_resources()->set_cpu_slots(0);
  req.mutable_node()->mutable_resources()->add_gpus()->set_index(0);  // GPUs alone suffice
  v1::RegisterNodeResponse resp;
  std::vector<v1::Event> events;
  ASSERT_TRUE(tracker_->Register(req, &resp, &events).ok());
  EXPECT_EQ(resp.node_id(), "gpu-host-3");
  EXPECT_EQ(StateOf("gpu-host-3"), v1::NODE_STATE_READY);
}

TEST_F(NodeTrackerTest, RegisterRefusesNodesWithoutResourcesOrWithBadIds) {
  std::vector<v1::Event> events;
  absl::Status s = Register(NodeRequest("n1", /*cpu_slots=*/0), &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "node.resources: node n1 offers no GPUs and no CPU slots");

  s = Register(NodeRequest("gpu node/1"), &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "node.id: \"gpu node/1\" may contain only letters, digits, '-', '.' and '_'");

  v1::RegisterNodeRequest anonymous = NodeRequest("");
  anonymous.mutable_node()->clear_hostname();
  s = Register(anonymous, &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "node.id: must not be empty");

  s = Register(NodeRequest(std::string(254, 'a')), &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "node.id: longer than 253 characters");

  // Resources beyond a machine (found by an outside client: cpu_slots 2^31-1 grew the
  // controller by 1 GB a second, and 10^8 stayed in its memory after a restart).
  const std::vector<std::pair<std::function<void(v1::NodeResources&)>, std::string>> bad = {
      {[](auto& r) { r.set_cpu_slots(2147483647); },
       "node.resources.cpu_slots: 2147483647 is not in 0..1024 (node n1)"},
      {[](auto& r) { r.set_cpu_slots(-1); r.add_gpus(); },
       "node.resources.cpu_slots: -1 is not in 0..1024 (node n1)"},
      {[](auto& r) { r.set_memory_bytes(INT64_MIN); },
       "node.resources.memory_bytes: -9223372036854775808 is negative (node n1)"},
      {[](auto& r) { for (int i = 0; i < 257; ++i) r.add_gpus()->set_index(i); },
       "node.resources.gpus: 257 GPUs; a node has at most 256 (node n1)"},
      {[](auto& r) { r.add_gpus()->set_index(-5); },
       "node.resources.gpus[0].index: -5 is not in 0..255 (node n1)"},
      {[](auto& r) { r.add_gpus()->set_index(3); r.add_gpus()->set_index(3); },
       "node.resources.gpus[1].index: 3 is listed twice (node n1)"},
      {[](auto& r) { r.add_gpus()->set_memory_bytes(-1); },
       "node.resources.gpus[0].memory_bytes: -1 is negative (node n1)"},
  };
  for (const auto& [mutate, message] : bad) {
    v1::RegisterNodeRequest req = NodeRequest("n1");
    mutate(*req.mutable_node()->mutable_resources());
    s = Register(req, &events);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(s.message(), message);
  }

  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(store_->ListNodes().empty());
  EXPECT_EQ(store_->LastEventId(), 0);

  v1::RegisterNodeRequest most = NodeRequest("n1", kMaxNodeCpuSlots);  // the limits themselves
  for (int i = 0; i < kMaxNodeGpus; ++i) {
    most.mutable_node()->mutable_resources()->add_gpus()->set_index(kMaxNodeGpus - 1 - i);
  }
  EXPECT_TRUE(Register(most, &events).ok());
  EXPECT_EQ(store_->ListNodes().size(), 1u);
}

TEST_F(NodeTrackerTest, HeartbeatOfUnknownNodeIsNotFound) {
  std::vector<v1::Event> events;
  absl::Status s = Heartbeat("x", &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "node x is not registered; register first");
  EXPECT_TRUE(events.empty());
}

TEST_F(NodeTrackerTest, HeartbeatWithoutANodeIdIsInvalid) {
  std::vector<v1::Event> events;
  absl::Status s = Heartbeat("", &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "node_id: must not be empty");
  EXPECT_TRUE(events.empty());
}

TEST_F(NodeTrackerTest, NodeIsLostOnlyAfterTheTimeout) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  const int64_t registered = clock_.NowMicros();

  clock_.AdvanceMicros(10 * kSecond - 1);  // just below the timeout
  EXPECT_TRUE(Check().empty());
  EXPECT_EQ(StateOf("n1"), v1::NODE_STATE_READY);

  clock_.AdvanceMicros(2);  // just beyond
  std::vector<v1::Event> lost = Check();
  EXPECT_EQ(Rows(lost), (std::vector<EventRow>{{"n1", "node.state", "READY", "LOST",
                                                "no heartbeat for 10 s (timeout 10 s)"}}));
  EXPECT_EQ(StateOf("n1"), v1::NODE_STATE_LOST);
  EXPECT_EQ(TimestampToMicros(store_->GetNode("n1")->last_heartbeat_time()), registered);
  EXPECT_TRUE(Check().empty());  // LOST once, not on every check
}

TEST_F(NodeTrackerTest, ShortTimeoutsAreReportedWithTenths) {
  options_.heartbeat_timeout_ms = 1500;
  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  clock_.AdvanceMicros(1'499'999);
  EXPECT_TRUE(Check().empty());
  clock_.AdvanceMicros(120'001);
  EXPECT_EQ(Rows(Check()), (std::vector<EventRow>{{"n1", "node.state", "READY", "LOST",
                                                   "no heartbeat for 1.6 s (timeout 1.5 s)"}}));
}

TEST_F(NodeTrackerTest, HeartbeatsKeepANodeReady) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  clock_.AdvanceMicros(6 * kSecond);
  ASSERT_TRUE(Heartbeat("n1", &events).ok());
  const int64_t beat = clock_.NowMicros();
  clock_.AdvanceMicros(6 * kSecond);  // 12 s after registering, 6 s after the beat
  EXPECT_TRUE(Check().empty());
  EXPECT_EQ(StateOf("n1"), v1::NODE_STATE_READY);
  EXPECT_EQ(events.size(), 1u);  // only the registration
  std::vector<v1::Node> listed = tracker_->List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(TimestampToMicros(listed[0].last_heartbeat_time()), beat);

  clock_.AdvanceMicros(4 * kSecond);  // 10 s after the beat
  EXPECT_EQ(Rows(Check()), (std::vector<EventRow>{{"n1", "node.state", "READY", "LOST",
                                                   "no heartbeat for 10 s (timeout 10 s)"}}));
}

TEST_F(NodeTrackerTest, HeartbeatTimesArePersistedEveryThirtySeconds) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  const int64_t registered = clock_.NowMicros();
  for (int i = 0; i < 7; ++i) {  // beats at 5, 10, ..., 35 s
    clock_.AdvanceMicros(5 * kSecond);
    ASSERT_TRUE(Heartbeat("n1", &events).ok());
    ASSERT_TRUE(Check().empty());  // the tick writes the beats that are due
    const int64_t stored = TimestampToMicros(store_->GetNode("n1")->last_heartbeat_time());
    EXPECT_EQ(stored, i < 5 ? registered : registered + 30 * kSecond) << "beat " << i;
    EXPECT_EQ(TimestampToMicros(tracker_->List()[0].last_heartbeat_time()),
              clock_.NowMicros());
  }
  EXPECT_EQ(events.size(), 1u);  // persisting a beat is not an event
}

// Heartbeats are answered from memory; the times that are due are written together by the next
// tick, and a new tracker (a controller restart) reads them back.
TEST_F(NodeTrackerTest, DueHeartbeatTimesAreWrittenTogetherByTheNextTick) {
  std::vector<v1::Event> events;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(Register(NodeRequest("n" + std::to_string(i)), &events).ok());
  }
  const int64_t registered = clock_.NowMicros();
  clock_.AdvanceMicros(31 * kSecond);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(Heartbeat("n" + std::to_string(i), &events).ok());
  const int64_t beat = clock_.NowMicros();
  for (const v1::Node& n : store_->ListNodes()) {
    EXPECT_EQ(TimestampToMicros(n.last_heartbeat_time()), registered) << n.id();
  }
  EXPECT_EQ(TimestampToMicros(tracker_->Get("n7")->last_heartbeat_time()), beat);
  ASSERT_TRUE(Check().empty());
  for (const v1::Node& n : store_->ListNodes()) {
    EXPECT_EQ(TimestampToMicros(n.last_heartbeat_time()), beat) << n.id();
  }
  clock_.AdvanceMicros(5 * kSecond);
  ASSERT_TRUE(Heartbeat("n3", &events).ok());  // not due: memory only...
  ASSERT_TRUE(tracker_->Flush().ok());         // ...until shutdown writes it
  EXPECT_EQ(TimestampToMicros(store_->GetNode("n3")->last_heartbeat_time()), clock_.NowMicros());
  EXPECT_EQ(TimestampToMicros(store_->GetNode("n4")->last_heartbeat_time()), beat);
  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  EXPECT_EQ(TimestampToMicros(tracker_->Get("n3")->last_heartbeat_time()), clock_.NowMicros());
  EXPECT_EQ(tracker_->List().size(), 100u);
  EXPECT_EQ(tracker_->Get("nope").status().code(), absl::StatusCode::kNotFound);
}

// A burst of due beats (many nodes registered together) is written beat_save_batch at a time,
// oldest due first, so that no single write holds the loop long; nothing due is dropped.
TEST_F(NodeTrackerTest, DueBeatsAreWrittenAtMostABatchAtATime) {
  options_.beat_save_batch = 40;
  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  std::vector<v1::Event> events;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(Register(NodeRequest("n" + std::to_string(i)), &events).ok());
  }
  clock_.AdvanceMicros(31 * kSecond);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(Heartbeat("n" + std::to_string(i), &events).ok());
  const int64_t beat = clock_.NowMicros();
  auto written = [&] {
    std::vector<std::string> ids;
    for (const v1::Node& n : store_->ListNodes()) {
      if (TimestampToMicros(n.last_heartbeat_time()) == beat) ids.push_back(n.id());
    }
    return ids;
  };
  ASSERT_TRUE(tracker_->PersistDueBeats().ok());
  std::vector<std::string> first = written();
  EXPECT_EQ(first.size(), 40u);
  EXPECT_NE(std::find(first.begin(), first.end(), "n0"), first.end());    // due first
  EXPECT_EQ(std::find(first.begin(), first.end(), "n99"), first.end());  // due last
  ASSERT_TRUE(tracker_->PersistDueBeats().ok());
  EXPECT_EQ(written().size(), 80u);
  ASSERT_TRUE(Check().empty());  // the once-a-second check writes a batch too
  EXPECT_EQ(written().size(), 100u);
  ASSERT_TRUE(tracker_->PersistDueBeats().ok());  // nothing left: an empty write
  EXPECT_EQ(written().size(), 100u);
}

TEST_F(NodeTrackerTest, HeartbeatAfterLostMakesTheNodeReadyAgain) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  clock_.AdvanceMicros(11 * kSecond);
  ASSERT_EQ(Check().size(), 1u);
  ASSERT_EQ(StateOf("n1"), v1::NODE_STATE_LOST);

  events.clear();
  ASSERT_TRUE(Heartbeat("n1", &events).ok());
  EXPECT_EQ(Rows(events), (std::vector<EventRow>{
                              {"n1", "node.state", "LOST", "READY", "heartbeat resumed"}}));
  EXPECT_EQ(StateOf("n1"), v1::NODE_STATE_READY);
  EXPECT_EQ(TimestampToMicros(store_->GetNode("n1")->last_heartbeat_time()),
            clock_.NowMicros());
  EXPECT_EQ(Rows(store_->ListEvents("", 0, 0)),
            (std::vector<EventRow>{
                {"n1", "node.state", "", "READY", "registered"},
                {"n1", "node.state", "READY", "LOST", "no heartbeat for 11 s (timeout 10 s)"},
                {"n1", "node.state", "LOST", "READY", "heartbeat resumed"},
            }));
}

TEST_F(NodeTrackerTest, ReRegisteringALostNodeKeepsItsRegisterTime) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  const int64_t first = clock_.NowMicros();
  clock_.AdvanceMicros(20 * kSecond);
  ASSERT_EQ(Check().size(), 1u);
  events.clear();
  ASSERT_TRUE(Register(NodeRequest("n1", 4), &events).ok());
  EXPECT_EQ(Rows(events), (std::vector<EventRow>{
                              {"n1", "node.state", "LOST", "READY", "re-registered"}}));
  absl::StatusOr<v1::Node> node = store_->GetNode("n1");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->state(), v1::NODE_STATE_READY);
  EXPECT_EQ(node->resources().cpu_slots(), 4);
  EXPECT_EQ(TimestampToMicros(node->register_time()), first);
  EXPECT_EQ(TimestampToMicros(node->last_heartbeat_time()), clock_.NowMicros());
}

TEST_F(NodeTrackerTest, ANewTrackerGivesStoredNodesAGracePeriod) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  const int64_t registered = clock_.NowMicros();

  // The controller was down for a minute: its new tracker must not blame the node for that.
  clock_.AdvanceMicros(60 * kSecond);
  NodeTrackerOptions options = options_;
  options.restart_grace_ms = 25000;  // longer than the 10 s timeout: agents reconnect slowly
  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options);
  EXPECT_TRUE(Check().empty());
  clock_.AdvanceMicros(25 * kSecond - 1);
  EXPECT_TRUE(Check().empty());
  EXPECT_EQ(StateOf("n1"), v1::NODE_STATE_READY);

  clock_.AdvanceMicros(2);
  // The reason and the stored time tell the truth: the last beat was 85 s ago.
  EXPECT_EQ(Rows(Check()), (std::vector<EventRow>{{"n1", "node.state", "READY", "LOST",
                                                   "no heartbeat for 85 s (timeout 10 s)"}}));
  EXPECT_EQ(StateOf("n1"), v1::NODE_STATE_LOST);
  EXPECT_EQ(TimestampToMicros(store_->GetNode("n1")->last_heartbeat_time()), registered);
}

// A node stored by a controller that did not check resources (100 million CPU slots, a GPU
// listed twice) is cordoned at load with what was wrong, offering nothing, once.
TEST_F(NodeTrackerTest, StoredResourcesOverTheLimitsAreRefusedAtLoadAndTheNodeCordoned) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("good"), &events).ok());
  ASSERT_TRUE(Register(NodeRequest("slots"), &events).ok());
  ASSERT_TRUE(Register(NodeRequest("gpus"), &events).ok());
  v1::Node slots = *store_->GetNode("slots");
  slots.mutable_resources()->set_cpu_slots(100'000'000);
  v1::Node gpus = *store_->GetNode("gpus");
  gpus.mutable_resources()->set_memory_bytes(-1);
  for (int i = 0; i < 2; ++i) gpus.mutable_resources()->add_gpus()->set_index(3);
  ASSERT_TRUE(store_->PutNodes({slots, gpus}).ok());

  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  tracker_->Load();
  const std::string restart =
      "; restart its agent to register what the node has, then uncordon it";
  const std::vector<std::pair<std::string, std::string>> want = {
      {"slots", "stored resources refused: node.resources.cpu_slots: 100000000 is not in "
                "0..1024 (node slots)" + restart},
      {"gpus", "stored resources refused: node.resources.memory_bytes: -1 is negative "
               "(node gpus)" + restart}};
  for (const auto& [id, reason] : want) {
    for (const v1::Node& n : {*tracker_->Get(id), *store_->GetNode(id)}) {
      EXPECT_TRUE(n.cordoned()) << id;
      EXPECT_EQ(n.cordon_reason(), reason);
      EXPECT_EQ(n.resources().cpu_slots(), 0) << id;
      EXPECT_EQ(n.resources().gpus_size(), 0) << id;
      EXPECT_EQ(n.resources().memory_bytes(), 0) << id;
    }
  }
  EXPECT_FALSE(tracker_->Get("good")->cordoned());
  EXPECT_EQ(tracker_->Get("good")->resources().cpu_slots(), 2);
  const std::vector<v1::Event> stored = store_->ListEvents("", 0, 100);
  EXPECT_EQ(std::count_if(stored.begin(), stored.end(),
                          [](const v1::Event& e) { return e.type() == "node.cordon"; }),
            2);

  // Once refused, the stored node is within the limits: the next load leaves it as it is.
  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  tracker_->Load();
  const std::vector<v1::Event> again = store_->ListEvents("", 0, 100);
  EXPECT_EQ(again.size(), stored.size());
}

TEST_F(NodeTrackerTest, ANodeThatBeatsDuringTheGracePeriodStaysReady) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  clock_.AdvanceMicros(60 * kSecond);
  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  clock_.AdvanceMicros(5 * kSecond);
  ASSERT_TRUE(Heartbeat("n1", &events).ok());
  clock_.AdvanceMicros(9 * kSecond);  // 14 s after the restart, 9 s after the beat
  EXPECT_TRUE(Check().empty());
  EXPECT_EQ(StateOf("n1"), v1::NODE_STATE_READY);
}

TEST_F(NodeTrackerTest, ACordonIsStoredWithAnEventAndOutlivesReRegistrationAndRestarts) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  events.clear();
  clock_.AdvanceMicros(5 * kSecond);
  absl::StatusOr<v1::Node> node = tracker_->SetCordon("n1", true, "kernel upgrade", &events);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(node->cordoned());
  EXPECT_EQ(node->cordon_reason(), "kernel upgrade");
  EXPECT_EQ(node->state(), v1::NODE_STATE_READY);  // cordoned is not LOST
  EXPECT_EQ(Rows(events), (std::vector<EventRow>{
                              {"n1", "node.cordon", "", "", "drained: kernel upgrade"}}));
  EXPECT_TRUE(store_->GetNode("n1")->cordoned());
  // The agent re-registers (it restarted) claiming no cordon: the operator's cordon stays.
  v1::RegisterNodeRequest again = NodeRequest("n1");
  again.mutable_node()->set_cordoned(false);
  ASSERT_TRUE(Register(again, &events).ok());
  EXPECT_TRUE(tracker_->Get("n1")->cordoned());
  EXPECT_EQ(tracker_->Get("n1")->cordon_reason(), "kernel upgrade");
  // A new agent cannot cordon itself either.
  v1::RegisterNodeRequest fresh = NodeRequest("n2");
  fresh.mutable_node()->set_cordoned(true);
  ASSERT_TRUE(Register(fresh, &events).ok());
  EXPECT_FALSE(tracker_->Get("n2")->cordoned());
  // A controller restart reads it back.
  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  EXPECT_TRUE(tracker_->Get("n1")->cordoned());
  events.clear();
  node = tracker_->SetCordon("n1", false, "", &events);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(node->cordoned());
  EXPECT_EQ(node->cordon_reason(), "");
  EXPECT_FALSE(node->has_cordon_time());
  EXPECT_EQ(Rows(events),
            (std::vector<EventRow>{{"n1", "node.uncordon", "", "",
                                    "uncordoned: ranks may be placed here again"}}));
  events.clear();  // uncordoning an uncordoned node changes nothing
  ASSERT_TRUE(tracker_->SetCordon("n1", false, "", &events).ok());
  EXPECT_TRUE(events.empty());
}

// A heartbeat that says stopping (the agent got SIGTERM) marks the node stopping, once, with
// an event; the mark outlives a controller restart, and only a registration (a new agent)
// clears it. It never touches the operator's cordon, nor the cordon it.
TEST_F(NodeTrackerTest, AStoppingAgentMarksItsNodeUntilAnAgentRegistersAgain) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  ASSERT_TRUE(tracker_->SetCordon("n1", true, "kernel upgrade", &events).ok());
  events.clear();
  clock_.AdvanceMicros(5 * kSecond);
  v1::HeartbeatRequest stopping;
  stopping.set_node_id("n1");
  stopping.set_stopping(true);
  ASSERT_TRUE(tracker_->Heartbeat(stopping, &events).ok());
  const std::string why =
      "the agent is shutting down: its ranks checkpoint and exit; no new ranks are placed here "
      "until an agent registers the node again";
  EXPECT_EQ(Rows(events), (std::vector<EventRow>{{"n1", "node.stopping", "", "", why}}));
  v1::Node node = *tracker_->Get("n1");
  EXPECT_TRUE(node.stopping());
  EXPECT_EQ(TimestampToMicros(node.stopping_time()), clock_.NowMicros());
  EXPECT_EQ(node.state(), v1::NODE_STATE_READY);  // it still reports its ranks
  EXPECT_TRUE(node.cordoned());
  EXPECT_TRUE(store_->GetNode("n1")->stopping());
  events.clear();  // said again: nothing new
  ASSERT_TRUE(tracker_->Heartbeat(stopping, &events).ok());
  ASSERT_TRUE(Heartbeat("n1", &events).ok());  // a beat without it does not clear it
  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(tracker_->Get("n1")->stopping());
  // A controller restart reads it back.
  tracker_ = std::make_unique<NodeTracker>(*store_, clock_, options_);
  EXPECT_TRUE(tracker_->Get("n1")->stopping());
  // A LOST node that comes back stopping is READY and stopping in one write.
  clock_.AdvanceMicros(60 * kSecond);
  ASSERT_TRUE(Register(NodeRequest("n2"), &events).ok());
  clock_.AdvanceMicros(11 * kSecond);
  Check();
  ASSERT_EQ(StateOf("n2"), v1::NODE_STATE_LOST);
  events.clear();
  stopping.set_node_id("n2");
  ASSERT_TRUE(tracker_->Heartbeat(stopping, &events).ok());
  EXPECT_EQ(Rows(events), (std::vector<EventRow>{
                              {"n2", "node.state", "LOST", "READY", "heartbeat resumed"},
                              {"n2", "node.stopping", "", "", why}}));
  EXPECT_EQ(StateOf("n2"), v1::NODE_STATE_READY);
  EXPECT_TRUE(store_->GetNode("n2")->stopping());
  // A cordon and an uncordon are the operator's: the agent's mark stays.
  ASSERT_TRUE(tracker_->SetCordon("n2", true, "", &events).ok());
  ASSERT_TRUE(tracker_->SetCordon("n2", false, "", &events).ok());
  EXPECT_TRUE(tracker_->Get("n2")->stopping());
  // n1's agent exited (LOST since), restarts and registers, even claiming to stop: not stopping.
  ASSERT_EQ(StateOf("n1"), v1::NODE_STATE_LOST);
  EXPECT_TRUE(store_->GetNode("n1")->stopping());
  events.clear();
  v1::RegisterNodeRequest again = NodeRequest("n1");
  again.mutable_node()->set_stopping(true);
  ASSERT_TRUE(Register(again, &events).ok());
  EXPECT_EQ(Rows(events),
            (std::vector<EventRow>{{"n1", "node.state", "LOST", "READY",
                                    "re-registered (a new agent: no longer stopping)"}}));
  node = *tracker_->Get("n1");
  EXPECT_FALSE(node.stopping());
  EXPECT_FALSE(node.has_stopping_time());
  EXPECT_TRUE(node.cordoned());  // the operator's cordon stays
  EXPECT_EQ(node.cordon_reason(), "kernel upgrade");
  EXPECT_FALSE(store_->GetNode("n1")->stopping());
}

TEST_F(NodeTrackerTest, ABadCordonRequestNamesTheFieldAndChangesNothing) {
  std::vector<v1::Event> events;
  ASSERT_TRUE(Register(NodeRequest("n1"), &events).ok());
  events.clear();
  EXPECT_EQ(tracker_->SetCordon("nope", true, "", &events).status().code(),
            absl::StatusCode::kNotFound);
  absl::Status s = tracker_->SetCordon("", true, "", &events).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "node_id: must not be empty");
  s = tracker_->SetCordon("n1", true, std::string(1025, 'x'), &events).status();
  EXPECT_EQ(s.message(), "reason: 1025 bytes, over the limit of 1024");
  s = tracker_->SetCordon("n1", true, "bad \xff byte", &events).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().substr(0, 30), "reason: not valid UTF-8: byte ");
  EXPECT_TRUE(events.empty());
  EXPECT_FALSE(store_->GetNode("n1")->cordoned());
}

}  // namespace
}  // namespace dhp::controller
