// RelayServer over real gRPC, in front of a real gRPC server (api/grpc_server over
// FakeOwnersService with per-node tokens): a heartbeat through the relay gets the controller's
// answer for that agent's token; bytes protobuf refuses get INVALID_ARGUMENT naming the field,
// without reaching the controller, and so does a heartbeat too large for the controller (the
// controller's own message); other methods are UNIMPLEMENTED; health answers SERVING.
#include "worker/relay/relay_server.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "api/auth.h"
#include "api/client.h"
#include "api/fake_owners_service.h"
#include "api/grpc_server.h"
#include "api/service.h"
#include "gtest/gtest.h"
#include "tests/grpc_raw.h"

namespace dhp::worker {
namespace {

constexpr char kHeartbeat[] = "/dhp.v1.WorkerService/Heartbeat";

// The answers the server and the batcher report, by code.
class Answers final : public HeartbeatBatcherObserver {
 public:
  void OnBatch(int, double, absl::StatusCode) override {}
  void OnAnswer(absl::StatusCode code, double) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[code];
  }
  int count(absl::StatusCode code) {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_[code];
  }

 private:
  std::mutex mu_;
  std::map<absl::StatusCode, int> counts_;
};

class RelayServerTest : public testing::Test {
 protected:
  void SetUp() override {
    api::AuthSettings settings;
    settings.nodes = {{"node-a", api::Sha256Hex("a-secret")},
                      {"relay-1", api::Sha256Hex("relay-secret")}};
    settings.rank_key = std::string(32, 'k');
    auth_ = *api::TokenAuth::Create(settings);
    auto server = api::GrpcServer::Start("127.0.0.1:0", service_, auth_, api::TlsPems(), 0);
    ASSERT_TRUE(server.ok()) << server.status();
    controller_ = std::move(*server);
    upstream_ = std::make_unique<api::DhpClient>(
        "127.0.0.1:" + std::to_string(controller_->port()), 5000, "relay-secret");
    HeartbeatBatcherOptions options;
    options.window_ms = 5;
    options.senders = 1;  // FakeOwnersService is not thread-safe
    batcher_ = std::make_unique<HeartbeatBatcher>(*upstream_, options, &answers_);
    auto relay = RelayServer::Start("127.0.0.1:0", *batcher_, api::TlsPems(), &answers_);
    ASSERT_TRUE(relay.ok()) << relay.status();
    relay_ = std::move(*relay);
    target_ = "127.0.0.1:" + std::to_string(relay_->port());
  }
  void TearDown() override {
    relay_.reset();
    batcher_.reset();
  }
  int ControllerCalls() const { return static_cast<int>(service_.names.size()); }

  Answers answers_;
  api::FakeOwnersService service_;
  api::TokenAuth auth_;
  std::unique_ptr<api::GrpcServer> controller_;
  std::unique_ptr<api::DhpClient> upstream_;
  std::unique_ptr<HeartbeatBatcher> batcher_;
  std::unique_ptr<RelayServer> relay_;
  std::string target_;
};

TEST_F(RelayServerTest, AHeartbeatGetsTheControllersAnswerForItsAgentsToken) {
  api::DhpClient agent(target_, 5000, "a-secret");
  v1::HeartbeatRequest hb;
  hb.set_node_id("node-a");
  absl::StatusOr<v1::HeartbeatResponse> ok = agent.Heartbeat(hb);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->ranks_size(), 1);
  EXPECT_EQ(ok->ranks(0).credential(), auth_.RankToken("j-1", 2));
  hb.set_node_id("relay-1");  // a's token for another node
  absl::StatusOr<v1::HeartbeatResponse> denied = agent.Heartbeat(hb);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_.batched_nodes.size(), 1u);
  EXPECT_EQ(answers_.count(absl::StatusCode::kOk), 1);
  EXPECT_EQ(answers_.count(absl::StatusCode::kPermissionDenied), 1);
}

TEST_F(RelayServerTest, BytesThatDoNotDecodeAreRefusedSayingWhy) {
  // Field 1 (node_id), length 3: "a", 0xFF, "b".
  const std::string bad_bytes("\x0a\x03" "a\xff" "b");
  auto [bad_text, body] = tests::GenericUnary(target_, kHeartbeat, bad_bytes);
  EXPECT_EQ(bad_text.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad_text.error_message().rfind("request (protobuf dhp.v1.HeartbeatRequest): node_id: "
                                           "not valid UTF-8", 0),
            0u)
      << bad_text.error_message();
  auto [truncated, ignored] = tests::GenericUnary(target_, kHeartbeat, "\x0a\x09node");
  EXPECT_EQ(truncated.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(truncated.error_message(),
            "request (protobuf dhp.v1.HeartbeatRequest): 6 bytes that do not decode as this "
            "message (truncated, or not protobuf's binary encoding)");
  EXPECT_EQ(ControllerCalls(), 0);
  EXPECT_EQ(answers_.count(absl::StatusCode::kInvalidArgument), 2);  // counted, as answers
}

TEST_F(RelayServerTest, AHeartbeatTooLargeForTheControllerIsRefusedWithItsMessage) {
  api::DhpClient agent(target_, 5000, "a-secret");
  v1::HeartbeatRequest progress;
  progress.set_node_id("node-a");
  for (int i = 0; i <= api::kMaxRelayedProgress; ++i) progress.add_progress()->set_job_id("j-1");
  absl::StatusOr<v1::HeartbeatResponse> r = agent.Heartbeat(progress);
  EXPECT_EQ(r.status(),
            absl::InvalidArgumentError("progress: 1025 reports; a heartbeat relays at most 1024"));
  v1::HeartbeatRequest ranks;
  ranks.set_node_id("node-a");
  for (int i = 0; i <= api::kMaxHeartbeatRanks; ++i) ranks.add_ranks()->set_world_rank(i);
  r = agent.Heartbeat(ranks);
  EXPECT_EQ(r.status(),
            absl::InvalidArgumentError("ranks: 4097; a heartbeat reports at most 4096"));
  v1::HeartbeatRequest state;  // the controller's checks, all of them (api/heartbeat_limits.h)
  state.set_node_id("node-a");
  state.add_ranks()->set_state(static_cast<v1::RankProcessState>(99));
  r = agent.Heartbeat(state);
  EXPECT_EQ(r.status(),
            absl::InvalidArgumentError("ranks[0].state: 99 is not a RankProcessState"));
  EXPECT_EQ(ControllerCalls(), 0);
  EXPECT_EQ(answers_.count(absl::StatusCode::kInvalidArgument), 3);
  // At the limits, relayed.
  progress.mutable_progress()->RemoveLast();
  *progress.mutable_ranks() = ranks.ranks();
  progress.mutable_ranks()->RemoveLast();
  r = agent.Heartbeat(progress);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(service_.batched_nodes.size(), 1u);
}

TEST_F(RelayServerTest, OtherMethodsAreUnimplementedAndHealthIsServing) {
  auto [register_node, body] =
      tests::GenericUnary(target_, "/dhp.v1.WorkerService/RegisterNode", "");
  EXPECT_EQ(register_node.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  auto [health, answer] = tests::GenericUnary(target_, "/grpc.health.v1.Health/Check", "");
  ASSERT_TRUE(health.ok()) << health.error_message();
  EXPECT_EQ(answer, std::string("\x08\x01"));  // status: SERVING
  EXPECT_EQ(ControllerCalls(), 0);
}

}  // namespace
}  // namespace dhp::worker
