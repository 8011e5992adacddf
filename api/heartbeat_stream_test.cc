// Tests WorkerService.HeartbeatStream end to end over real gRPC: the server's reactor
// (api/grpc_server.cc) and the agent's client (api::HeartbeatStream in api/client.h).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/client.h"
#include "api/fake_owners_service.h"
#include "api/grpc_server.h"
#include "dhp/v1/service.grpc.pb.h"

namespace dhp::api {
namespace {

// Heartbeat answers with one rank whose job id echoes the request ("<node>/<ranks reported>"),
// so that each answer can be matched to its request; node "gone" is NOT_FOUND, as a node the
// controller forgot, and so is any id over 253 bytes, quoted whole as the controller quotes it.
// While `hold` is set, dispatched calls wait for RunHeld.
class BeatService : public FakeOwnersService {
 public:
  absl::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) override {
    ++beats;
    if (req.node_id() == "gone" || req.node_id().size() > 253) {
      return absl::NotFoundError("node " + req.node_id() + " is not registered");
    }
    resp->add_ranks()->set_job_id(req.node_id() + "/" + std::to_string(req.ranks_size()));
    return absl::OkStatus();
  }
  void Dispatch(std::function<absl::Status()> call, Done done, Lane /*lane*/) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (hold) {
      held_.emplace_back(std::move(call), std::move(done));
      return;
    }
    lock.unlock();
    done(call());
  }
  void RunHeld() {
    std::vector<std::pair<std::function<absl::Status()>, Done>> calls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls.swap(held_);
      hold = false;
    }
    for (auto& [call, done] : calls) done(call());
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold = true;
  }

  int beats = 0;

 private:
  std::mutex mu_;
  bool hold = false;
  std::vector<std::pair<std::function<absl::Status()>, Done>> held_;
};

v1::HeartbeatRequest Beat(const std::string& node, int ranks) {
  v1::HeartbeatRequest req;
  req.set_node_id(node);
  for (int i = 0; i < ranks; ++i) req.add_ranks()->set_job_id("j");
  return req;
}

std::string Target(const GrpcServer& server) {
  return "127.0.0.1:" + std::to_string(server.port());
}

TEST(HeartbeatStreamTest, EachBeatIsAnsweredInTurnOnOneStream) {
  BeatService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 8);
  ASSERT_TRUE(server.ok()) << server.status();
  DhpClient client(Target(**server), 5000);
  {
    HeartbeatStream beats(client);
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<v1::HeartbeatResponse> resp = beats.Beat(Beat("n1", i));
      ASSERT_TRUE(resp.ok()) << resp.status();
      ASSERT_EQ(resp->ranks_size(), 1);
      EXPECT_EQ(resp->ranks(0).job_id(), "n1/" + std::to_string(i));
    }
    EXPECT_TRUE(beats.streaming());
    EXPECT_EQ(beats.opened(), 1);
  }  // closed: the server ends the stream OK
  EXPECT_EQ(service.beats, 5);
  (*server)->Shutdown(1000);
}

TEST(HeartbeatStreamTest, ARefusedBeatEndsTheStreamWithItsStatusAndTheNextOpensAnother) {
  BeatService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 8);
  ASSERT_TRUE(server.ok()) << server.status();
  DhpClient client(Target(**server), 5000);
  HeartbeatStream beats(client);
  ASSERT_TRUE(beats.Beat(Beat("n1", 0)).ok());
  absl::StatusOr<v1::HeartbeatResponse> gone = beats.Beat(Beat("gone", 0));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gone.status().message(), "node gone is not registered");
  absl::StatusOr<v1::HeartbeatResponse> again = beats.Beat(Beat("n1", 2));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ranks(0).job_id(), "n1/2");
  EXPECT_EQ(beats.opened(), 2);
  (*server)->Shutdown(1000);
}

// Who first, then what: a stream without the token is UNAUTHENTICATED at its first beat, and
// with it a beat protobuf will not decode (a node id that is not UTF-8) is INVALID_ARGUMENT.
TEST(HeartbeatStreamTest, EveryBeatIsAuthenticatedAndDecodedAsAUnaryOne) {
  BeatService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth("s3cret"), TlsPems(), 8);
  ASSERT_TRUE(server.ok()) << server.status();
  DhpClient stranger(Target(**server), 5000);
  HeartbeatStream strange(stranger);
  EXPECT_EQ(strange.Beat(Beat("n1", 0)).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(strange.Beat(Beat("n\xff", 0)).status().code(), absl::StatusCode::kUnauthenticated);
  DhpClient admin(Target(**server), 5000, "s3cret");
  HeartbeatStream beats(admin);
  ASSERT_TRUE(beats.Beat(Beat("n1", 1)).ok());
  absl::StatusOr<v1::HeartbeatResponse> bad = beats.Beat(Beat("n\xff", 0));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("node_id"), std::string::npos) << bad.status();
  ASSERT_TRUE(beats.Beat(Beat("n1", 3)).ok());
  EXPECT_EQ(service.beats, 2);
  (*server)->Shutdown(1000);
}

// A node id of 1 MB is quoted by the NOT_FOUND message: the caller gets that status with the
// message cut, not gRPC's RESOURCE_EXHAUSTED for metadata over 16 KiB. On the stream and unary.
TEST(HeartbeatStreamTest, AHugeNodeIdIsRefusedWithItsOwnStatus) {
  BeatService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 8);
  ASSERT_TRUE(server.ok()) << server.status();
  DhpClient client(Target(**server), 5000);
  HeartbeatStream beats(client);
  // "node " + 4,090 bytes puts the 2-byte e-acute across the cut at 4,096 bytes.
  const std::string huge = std::string(4090, 'x') + "\xc3\xa9" + std::string(1 << 20, 'y');
  for (const absl::StatusOr<v1::HeartbeatResponse>& resp :
       {beats.Beat(Beat(huge, 0)), client.Heartbeat(Beat(huge, 0))}) {
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kNotFound) << resp.status().message().size();
    EXPECT_LT(resp.status().message().size(), 4200u);
    EXPECT_NE(resp.status().message().find("x... (1048596 more bytes)"), std::string::npos)
        << resp.status().message().substr(4080);
  }
  (*server)->Shutdown(1000);
}

TEST(HeartbeatStreamTest, ABeatNotAnsweredInTimeIsADeadlineAndTheNextGoesOnANewStream) {
  BeatService service;
  auto server = GrpcServer::Start("127.0.0.1:0", service, TokenAuth(), TlsPems(), 8);
  ASSERT_TRUE(server.ok()) << server.status();
  DhpClient client(Target(**server), 300);
  HeartbeatStream beats(client);
  ASSERT_TRUE(beats.Beat(Beat("n1", 0)).ok());
  service.Hold();  // the loop is busy
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::HeartbeatResponse> late = beats.Beat(Beat("n1", 1));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(5));
  service.RunHeld();  // answered on a stream the agent cancelled: dropped, nothing breaks
  absl::StatusOr<v1::HeartbeatResponse> next = beats.Beat(Beat("n1", 2));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->ranks(0).job_id(), "n1/2");
  EXPECT_EQ(beats.opened(), 2);
  (*server)->Shutdown(1000);
}

// A controller restart ends the stream between two beats; the next beat opens a new one on the
// controller that came back, as a unary call would reach it.
TEST(HeartbeatStreamTest, BeatsReachAControllerThatRestarted) {
  BeatService first;
  auto server = GrpcServer::Start("127.0.0.1:0", first, TokenAuth(), TlsPems(), 8);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  DhpClient client("127.0.0.1:" + std::to_string(port), 5000);
  HeartbeatStream beats(client);
  ASSERT_TRUE(beats.Beat(Beat("n1", 0)).ok());
  (*server)->Shutdown(0);
  server->reset();
  BeatService second;
  auto restarted =
      GrpcServer::Start("127.0.0.1:" + std::to_string(port), second, TokenAuth(), TlsPems(), 8);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  absl::StatusOr<v1::HeartbeatResponse> resp = absl::UnavailableError("not tried");
  for (int i = 0; i < 50 && !resp.ok(); ++i) {  // the channel reconnects within its backoff
    resp = beats.Beat(Beat("n1", 4));
    if (!resp.ok()) {
      EXPECT_EQ(resp.status().code(), absl::StatusCode::kUnavailable) << resp.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->ranks(0).job_id(), "n1/4");
  EXPECT_EQ(second.beats, 1);
  EXPECT_GE(beats.opened(), 2);
  (*restarted)->Shutdown(1000);
}

// A controller from before HeartbeatStream: only the unary Heartbeat.
class UnaryOnlyController final : public v1::WorkerService::Service {
 public:
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    ++beats;
    resp->add_ranks()->set_job_id(req->node_id() + "/unary");
    return grpc::Status::OK;
  }
  std::mutex mu;
  int beats = 0;
};

TEST(HeartbeatStreamTest, AgainstAControllerWithoutTheStreamEveryBeatIsAUnaryCall) {
  UnaryOnlyController old;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&old);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  DhpClient client("127.0.0.1:" + std::to_string(port), 5000);
  HeartbeatStream beats(client);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::HeartbeatResponse> resp = beats.Beat(Beat("n1", 0));
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ(resp->ranks(0).job_id(), "n1/unary");
  }
  EXPECT_FALSE(beats.streaming());
  EXPECT_EQ(beats.opened(), 1);  // the one the controller refused
  {
    std::lock_guard<std::mutex> lock(old.mu);
    EXPECT_EQ(old.beats, 3);
  }
  server->Shutdown();
}

}  // namespace
}  // namespace dhp::api
