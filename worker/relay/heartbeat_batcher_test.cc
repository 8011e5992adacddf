// HeartbeatBatcher against a real gRPC server (api/grpc_server over FakeOwnersService, with
// per-node tokens): heartbeats that arrive together go as one HeartbeatBatch call, each answered
// with its own answer (a forged token refused in its place); a full batch goes at once and a
// lone heartbeat waits the window; an unreachable controller and a full queue fail cleanly; a
// batch stays within its bytes and elements (so that large heartbeats never fail their
// neighbours'), and a heartbeat the controller would refuse for its size is refused unsent.
#include "worker/relay/heartbeat_batcher.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/auth.h"
#include "api/fake_owners_service.h"
#include "api/grpc_decode.h"
#include "api/grpc_server.h"
#include "api/service.h"
#include "common/proto_wire_budget.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"

namespace dhp::worker {
namespace {

using Clock = std::chrono::steady_clock;

// The answers of a test's heartbeats, by index.
struct Answers {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<absl::Status> status;
  std::vector<v1::HeartbeatResponse> resp;
  std::vector<Clock::time_point> at;
  int done = 0;

  explicit Answers(int n) : status(n), resp(n), at(n) {}
  HeartbeatBatcher::Answer For(int i) {
    return [this, i](const absl::Status& s, v1::HeartbeatResponse r) {
      std::lock_guard<std::mutex> lock(mu);
      status[i] = s;
      resp[i] = std::move(r);
      at[i] = Clock::now();
      ++done;
      cv.notify_all();
    };
  }
  bool WaitAll(int n, int timeout_ms = 10000) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done >= n; });
  }
};

// What a HeartbeatBatcherObserver was told.
struct Recorder final : HeartbeatBatcherObserver {
  std::mutex mu;
  std::vector<std::pair<int, absl::StatusCode>> batches;  // size, code
  std::vector<std::pair<absl::StatusCode, double>> answers;
  void OnBatch(int heartbeats, double, absl::StatusCode code) override {
    std::lock_guard<std::mutex> lock(mu);
    batches.emplace_back(heartbeats, code);
  }
  void OnAnswer(absl::StatusCode code, double seconds) override {
    std::lock_guard<std::mutex> lock(mu);
    answers.emplace_back(code, seconds);
  }
};

v1::HeartbeatRequest Beat(const std::string& node) {
  v1::HeartbeatRequest hb;
  hb.set_node_id(node);
  return hb;
}

// One rank whose log_tail is `pad` bytes long.
v1::HeartbeatRequest Padded(const std::string& node, size_t pad) {
  v1::HeartbeatRequest hb = Beat(node);
  v1::RankStatus* rank = hb.add_ranks();
  rank->set_job_id("j-1");
  rank->set_log_tail(std::string(pad, 'x'));
  return hb;
}

// `reports` progress reports of `metrics` metrics each: 2 + 2 * metrics elements a report.
v1::HeartbeatRequest Reporting(const std::string& node, int reports, int metrics) {
  v1::HeartbeatRequest hb = Beat(node);
  for (int r = 0; r < reports; ++r) {
    v1::ReportProgressRequest* report = hb.add_progress();
    report->set_job_id("j-1");
    for (int m = 0; m < metrics; ++m) (*report->mutable_metrics())["m" + std::to_string(m)] = m;
  }
  return hb;
}

int64_t Bytes(const std::string& authorization, const v1::HeartbeatRequest& hb) {
  return HeartbeatBatchBytes(authorization, static_cast<int64_t>(hb.ByteSizeLong()));
}

int64_t Elements(const std::string& authorization, const v1::HeartbeatRequest& hb) {
  return HeartbeatBatchElements(authorization, hb.SerializeAsString(), int64_t{1} << 40);
}

class HeartbeatBatcherTest : public testing::Test {
 protected:
  void SetUp() override {
    api::AuthSettings settings;
    settings.nodes = {{"node-a", api::Sha256Hex("a-secret")},
                      {"node-b", api::Sha256Hex("b-secret")},
                      {"relay-1", api::Sha256Hex("relay-secret")}};
    settings.rank_key = std::string(32, 'k');
    auth_ = *api::TokenAuth::Create(settings);
    auto server = api::GrpcServer::Start("127.0.0.1:0", service_, auth_, api::TlsPems(), 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<api::DhpClient>("127.0.0.1:" + std::to_string(server_->port()),
                                               5000, "relay-secret");
  }
  int BatchCalls() const {
    int n = 0;
    for (const std::string& name : service_.names) n += name == "HeartbeatBatch";
    return n;
  }

  api::FakeOwnersService service_;
  api::TokenAuth auth_;
  std::unique_ptr<api::GrpcServer> server_;
  std::unique_ptr<api::DhpClient> client_;
};

TEST_F(HeartbeatBatcherTest, HeartbeatsThatArriveTogetherShareOneCallAndEachGetsItsAnswer) {
  HeartbeatBatcherOptions options;
  options.window_ms = 300;
  options.senders = 1;  // FakeOwnersService is not thread-safe
  Recorder told;
  HeartbeatBatcher batcher(*client_, options, &told);
  constexpr int kBeats = 40;
  Answers answers(kBeats);
  for (int i = 0; i < kBeats; ++i) {
    const bool a = i % 2 == 0;
    std::string token = i == 7 ? "Bearer a-secret" : a ? "Bearer a-secret" : "Bearer b-secret";
    batcher.Submit(token, Beat(a ? "node-a" : "node-b"), answers.For(i));  // 7: a's for b
  }
  ASSERT_TRUE(answers.WaitAll(kBeats));
  EXPECT_EQ(BatchCalls(), 1);
  EXPECT_EQ(service_.batched_nodes.size(), static_cast<size_t>(kBeats - 1));
  for (int i = 0; i < kBeats; ++i) {
    if (i == 7) {
      EXPECT_EQ(answers.status[i].code(), absl::StatusCode::kPermissionDenied);
      EXPECT_EQ(answers.status[i].message(),
                "Heartbeat: node \"node-a\" may act only for its own node, not \"node-b\"");
      continue;
    }
    ASSERT_TRUE(answers.status[i].ok()) << i << ": " << answers.status[i];
    ASSERT_EQ(answers.resp[i].ranks_size(), 1) << i;
    EXPECT_EQ(answers.resp[i].ranks(0).credential(), auth_.RankToken("j-1", 2)) << i;
  }
  const HeartbeatBatcherStats stats = batcher.stats();
  EXPECT_EQ(stats.heartbeats, kBeats);
  EXPECT_EQ(stats.batches, 1);
  EXPECT_EQ(stats.failed_batches, 0);
  std::lock_guard<std::mutex> lock(told.mu);
  ASSERT_EQ(told.batches.size(), 1u);
  EXPECT_EQ(told.batches[0], std::make_pair(kBeats, absl::StatusCode::kOk));
  ASSERT_EQ(told.answers.size(), static_cast<size_t>(kBeats));
  int denied = 0;
  for (const auto& [code, seconds] : told.answers) {
    denied += code == absl::StatusCode::kPermissionDenied;
    EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kPermissionDenied);
    EXPECT_GE(seconds, 0.25);  // each waited (most of) the 300 ms window
    EXPECT_LT(seconds, 10.0);
  }
  EXPECT_EQ(denied, 1);
}

TEST_F(HeartbeatBatcherTest, AFullBatchGoesAtOnceAndALoneHeartbeatWaitsTheWindow) {
  HeartbeatBatcherOptions options;
  options.window_ms = 60000;
  options.max_batch = 10;
  options.senders = 1;
  auto batcher = std::make_unique<HeartbeatBatcher>(*client_, options);
  Answers full(10);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < 10; ++i) batcher->Submit("Bearer a-secret", Beat("node-a"), full.For(i));
  ASSERT_TRUE(full.WaitAll(10, 5000));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(BatchCalls(), 1);

  options.window_ms = 200;
  batcher = std::make_unique<HeartbeatBatcher>(*client_, options);
  Answers lone(1);
  const Clock::time_point sent = Clock::now();
  batcher->Submit("Bearer b-secret", Beat("node-b"), lone.For(0));
  ASSERT_TRUE(lone.WaitAll(1));
  EXPECT_TRUE(lone.status[0].ok()) << lone.status[0];
  EXPECT_GE(lone.at[0] - sent, std::chrono::milliseconds(195));
  EXPECT_LT(lone.at[0] - sent, std::chrono::milliseconds(3000));
  EXPECT_EQ(BatchCalls(), 2);
}

TEST_F(HeartbeatBatcherTest, TheRelaysOwnCredentialMustBeANodes) {
  api::DhpClient viewer("127.0.0.1:" + std::to_string(server_->port()), 5000, "a-secret-not");
  HeartbeatBatcherOptions options;
  options.window_ms = 0;
  HeartbeatBatcher batcher(viewer, options);
  Answers answers(1);
  batcher.Submit("Bearer a-secret", Beat("node-a"), answers.For(0));
  ASSERT_TRUE(answers.WaitAll(1));
  EXPECT_EQ(answers.status[0].code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(batcher.stats().failed_batches, 1);
  EXPECT_EQ(BatchCalls(), 0);
}

TEST_F(HeartbeatBatcherTest, AnUnreachableControllerAndAFullQueueFailEachHeartbeatAtOnce) {
  server_.reset();
  HeartbeatBatcherOptions options;
  options.window_ms = 60000;
  options.max_queued = 2;
  options.senders = 1;
  Recorder told;
  auto batcher = std::make_unique<HeartbeatBatcher>(*client_, options, &told);
  Answers answers(3);
  for (int i = 0; i < 3; ++i) batcher->Submit("Bearer a-secret", Beat("node-a"), answers.For(i));
  {
    std::lock_guard<std::mutex> lock(answers.mu);
    ASSERT_EQ(answers.done, 1);  // the third, refused at once
    EXPECT_EQ(answers.status[2].code(), absl::StatusCode::kResourceExhausted);
  }
  EXPECT_EQ(batcher->queued(), 2);
  batcher.reset();  // sends the two queued at once, to nobody
  ASSERT_TRUE(answers.WaitAll(3, 0));
  EXPECT_EQ(answers.status[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(answers.status[1].code(), absl::StatusCode::kUnavailable);
  ASSERT_EQ(told.answers.size(), 3u);
  EXPECT_EQ(told.answers[0], std::make_pair(absl::StatusCode::kResourceExhausted, 0.0));
  EXPECT_EQ(told.answers[1].first, absl::StatusCode::kUnavailable);
  EXPECT_EQ(told.answers[2].first, absl::StatusCode::kUnavailable);
  ASSERT_EQ(told.batches.size(), 1u);
  EXPECT_EQ(told.batches[0], std::make_pair(2, absl::StatusCode::kUnavailable));
}

TEST(HeartbeatBatchSizeTest, BytesAndElementsAreWhatTheControllerCounts) {
  v1::HeartbeatBatchRequest req;
  int64_t bytes = 0;
  int64_t elements = 0;
  const std::vector<std::pair<std::string, v1::HeartbeatRequest>> beats = {
      {"Bearer a-secret", Beat("node-a")},
      {"", Beat("node-b")},
      {"Bearer b-secret", v1::HeartbeatRequest()},
      {"Bearer a-secret", Padded("node-a", 300)},
      {std::string(200, 't'), Padded("node-a", 70000)},
      {"Bearer b-secret", Reporting("node-b", 30, 7)}};
  for (const auto& [authorization, hb] : beats) {
    v1::RelayedHeartbeat* entry = req.add_heartbeats();
    entry->set_authorization(authorization);
    *entry->mutable_heartbeat() = hb;
    bytes += Bytes(authorization, hb);
    elements += Elements(authorization, hb);
  }
  EXPECT_EQ(bytes, static_cast<int64_t>(req.ByteSizeLong()));
  const std::string wire = req.SerializeAsString();
  google::protobuf::io::ArrayInputStream in(wire.data(), static_cast<int>(wire.size()));
  EXPECT_EQ(elements, CountWireElements(&in, *v1::HeartbeatBatchRequest::descriptor(),
                                        api::kMaxRequestElements));
  EXPECT_EQ(Elements("x", Reporting("node-b", 30, 7)), 3 + 1 + 30 * (2 + 2 * 7));
  // Counting stops past the limit.
  EXPECT_EQ(HeartbeatBatchElements("x", Reporting("n", 30, 7).SerializeAsString(), 10), 11);
}

TEST_F(HeartbeatBatcherTest, ABatchStaysWithinItsBytesAndEachHeartbeatGetsItsOwnAnswer) {
  const std::string a = "Bearer a-secret", b = "Bearer b-secret";
  const int64_t small = Bytes(a, Padded("node-a", 1000));
  ASSERT_EQ(small, Bytes(b, Padded("node-b", 1000)));
  HeartbeatBatcherOptions options;
  options.window_ms = 60000;  // only full batches go before the end
  options.senders = 1;
  options.max_batch_bytes = 4 * small - 1;  // three small ones fit, not four
  Recorder told;
  auto batcher = std::make_unique<HeartbeatBatcher>(*client_, options, &told);
  // Small x4, one larger than a batch (a's token for node-b), small.
  const std::vector<std::pair<std::string, v1::HeartbeatRequest>> beats = {
      {a, Padded("node-a", 1000)}, {b, Padded("node-b", 1000)}, {a, Padded("node-a", 1000)},
      {b, Padded("node-b", 1000)}, {a, Padded("node-b", 5000)}, {a, Padded("node-a", 1000)}};
  ASSERT_GT(Bytes(beats[4].first, beats[4].second), options.max_batch_bytes);
  Answers answers(static_cast<int>(beats.size()));
  for (size_t i = 0; i < beats.size(); ++i) {
    batcher->Submit(beats[i].first, beats[i].second, answers.For(static_cast<int>(i)));
  }
  batcher.reset();  // the last, lone and not full, goes now
  ASSERT_TRUE(answers.WaitAll(static_cast<int>(beats.size()), 0));
  for (size_t i = 0; i < beats.size(); ++i) {
    if (i == 4) {
      EXPECT_EQ(answers.status[i].code(), absl::StatusCode::kPermissionDenied) << answers.status[i];
      continue;
    }
    ASSERT_TRUE(answers.status[i].ok()) << i << ": " << answers.status[i];
    ASSERT_EQ(answers.resp[i].ranks_size(), 1) << i;
    EXPECT_EQ(answers.resp[i].ranks(0).credential(), auth_.RankToken("j-1", 2)) << i;
  }
  EXPECT_EQ(service_.batched_nodes,
            std::vector<std::string>({"node-a", "node-b", "node-a", "node-b", "node-a"}));
  std::lock_guard<std::mutex> lock(told.mu);
  const std::vector<std::pair<int, absl::StatusCode>> want = {{3, absl::StatusCode::kOk},
                                                              {1, absl::StatusCode::kOk},
                                                              {1, absl::StatusCode::kOk},
                                                              {1, absl::StatusCode::kOk}};
  EXPECT_EQ(told.batches, want);
}

TEST_F(HeartbeatBatcherTest, ABatchStaysWithinItsElements) {
  const std::string a = "Bearer a-secret";
  const int64_t each = Elements(a, Reporting("node-a", 10, 3));
  ASSERT_EQ(each, 3 + 1 + 10 * 8);
  HeartbeatBatcherOptions options;
  options.window_ms = 60000;
  options.senders = 1;
  options.max_batch_elements = 2 * each + each / 2;  // two fit, not three
  Recorder told;
  auto batcher = std::make_unique<HeartbeatBatcher>(*client_, options, &told);
  Answers answers(5);
  for (int i = 0; i < 5; ++i) batcher->Submit(a, Reporting("node-a", 10, 3), answers.For(i));
  batcher.reset();
  ASSERT_TRUE(answers.WaitAll(5, 0));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(answers.status[i].ok()) << i << ": " << answers.status[i];
  std::lock_guard<std::mutex> lock(told.mu);
  const std::vector<std::pair<int, absl::StatusCode>> want = {
      {2, absl::StatusCode::kOk}, {2, absl::StatusCode::kOk}, {1, absl::StatusCode::kOk}};
  EXPECT_EQ(told.batches, want);
}

// The controller refuses a batch relaying more than api::kMaxBatchProgress reports in all: nine
// heartbeats of 1,000 go as a batch of eight and one of one, and all are answered.
TEST_F(HeartbeatBatcherTest, ABatchRelaysAtMostTheControllersProgressReports) {
  HeartbeatBatcherOptions options;
  options.window_ms = 60000;
  options.senders = 1;
  options.max_batch_elements = api::kMaxRequestElements;
  Recorder told;
  auto batcher = std::make_unique<HeartbeatBatcher>(*client_, options, &told);
  Answers answers(9);
  for (int i = 0; i < 9; ++i) batcher->Submit("Bearer a-secret", Reporting("node-a", 1000, 0),
                                              answers.For(i));
  batcher.reset();
  ASSERT_TRUE(answers.WaitAll(9, 0));
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(answers.status[i].ok()) << i << ": " << answers.status[i];
  std::lock_guard<std::mutex> lock(told.mu);
  const std::vector<std::pair<int, absl::StatusCode>> want = {{8, absl::StatusCode::kOk},
                                                              {1, absl::StatusCode::kOk}};
  EXPECT_EQ(told.batches, want);
}

// As an outside client found it: five 4 MB heartbeats and a normal one, sent together, all
// failed RESOURCE_EXHAUSTED (one 20 MB batch; the controller receives at most 16 MiB).
TEST_F(HeartbeatBatcherTest, LargeHeartbeatsDoNotFailTheirNeighbours) {
  HeartbeatBatcherOptions options;  // the defaults
  options.window_ms = 300;
  options.senders = 1;
  Recorder told;
  HeartbeatBatcher batcher(*client_, options, &told);
  Answers answers(6);
  for (int i = 0; i < 5; ++i) {
    batcher.Submit("Bearer a-secret", Padded("node-a", 4000000), answers.For(i));
  }
  batcher.Submit("Bearer b-secret", Beat("node-b"), answers.For(5));
  ASSERT_TRUE(answers.WaitAll(6, 30000));
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(answers.status[i].ok()) << i << ": " << answers.status[i];
  std::lock_guard<std::mutex> lock(told.mu);
  EXPECT_EQ(told.batches.size(), 3u);  // two by two under 8 MiB
}

// Likewise by count: four heartbeats of 82,000 elements each are more together than the
// controller decodes in one request (api::kMaxRequestElements).
TEST_F(HeartbeatBatcherTest, HeartbeatsOfManyElementsDoNotFailTheirNeighbours) {
  HeartbeatBatcherOptions options;  // the defaults
  options.window_ms = 300;
  options.senders = 1;
  Recorder told;
  HeartbeatBatcher batcher(*client_, options, &told);
  const v1::HeartbeatRequest hb = Reporting("node-a", 1000, 40);
  ASSERT_GT(4 * Elements("Bearer a-secret", hb), api::kMaxRequestElements);
  Answers answers(5);
  for (int i = 0; i < 4; ++i) batcher.Submit("Bearer a-secret", hb, answers.For(i));
  batcher.Submit("Bearer b-secret", Beat("node-b"), answers.For(4));
  ASSERT_TRUE(answers.WaitAll(5, 30000));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(answers.status[i].ok()) << i << ": " << answers.status[i];
  std::lock_guard<std::mutex> lock(told.mu);
  EXPECT_GE(told.batches.size(), 3u);
}

TEST_F(HeartbeatBatcherTest, AHeartbeatTooLargeForTheControllerIsRefusedUnsent) {
  HeartbeatBatcherOptions options;
  options.window_ms = 0;
  options.senders = 1;
  Recorder told;
  auto batcher = std::make_unique<HeartbeatBatcher>(*client_, options, &told);
  Answers answers(3);
  batcher->Submit("Bearer a-secret", Reporting("node-a", api::kMaxRelayedProgress + 1, 0),
                  answers.For(0));
  v1::HeartbeatRequest ranks = Beat("node-a");
  for (int i = 0; i <= api::kMaxHeartbeatRanks; ++i) ranks.add_ranks()->set_world_rank(i);
  batcher->Submit("Bearer a-secret", ranks, answers.For(1));
  {
    std::lock_guard<std::mutex> lock(answers.mu);
    ASSERT_EQ(answers.done, 2);  // at once
    EXPECT_EQ(answers.status[0], absl::InvalidArgumentError(
                                     "progress: 1025 reports; a heartbeat relays at most 1024"));
    EXPECT_EQ(answers.status[1],
              absl::InvalidArgumentError("ranks: 4097; a heartbeat reports at most 4096"));
  }
  ranks.mutable_ranks()->RemoveLast();  // 4,096 ranks and 1,024 reports: relayed
  *ranks.mutable_progress() = Reporting("node-a", api::kMaxRelayedProgress, 0).progress();
  batcher->Submit("Bearer a-secret", ranks, answers.For(2));
  ASSERT_TRUE(answers.WaitAll(3));
  EXPECT_TRUE(answers.status[2].ok()) << answers.status[2];
  EXPECT_EQ(batcher->stats().invalid, 2);
  EXPECT_EQ(batcher->stats().heartbeats, 1);
  batcher.reset();
  EXPECT_EQ(service_.batched_nodes.size(), 1u);
  std::lock_guard<std::mutex> lock(told.mu);
  ASSERT_EQ(told.answers.size(), 3u);
  EXPECT_EQ(told.answers[0], std::make_pair(absl::StatusCode::kInvalidArgument, 0.0));
  EXPECT_EQ(told.answers[1], std::make_pair(absl::StatusCode::kInvalidArgument, 0.0));
}

TEST(HeartbeatBatcherOptionsTest, BadOptionsNameTheOption) {
  HeartbeatBatcherOptions o;
  EXPECT_TRUE(Validate(o).ok());
  o.max_batch = 1025;
  EXPECT_EQ(Validate(o).message(), "max_batch: 1025 must be in 1..1024");
  o = HeartbeatBatcherOptions();
  o.window_ms = -1;
  EXPECT_EQ(Validate(o).message(), "window_ms: -1 must be in 0..1000");
  o = HeartbeatBatcherOptions();
  o.max_batch_bytes = 0;
  EXPECT_EQ(Validate(o).message(), "max_batch_bytes: 0 must be in 1..12582912");
  o.max_batch_bytes = (int64_t{12} << 20) + 1;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o = HeartbeatBatcherOptions();
  o.max_batch_elements = api::kMaxRequestElements + 1;
  EXPECT_EQ(Validate(o).message(), "max_batch_elements: 262145 must be in 1..262144");
  o = HeartbeatBatcherOptions();
  o.senders = 0;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dhp::worker
