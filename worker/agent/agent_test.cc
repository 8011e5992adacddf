// The agent against a fake controller (a real gRPC server on loopback) and real rank processes
// (a shell script standing in for dhp-rank).
#include "worker/agent/agent.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/remove_tree.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace dhp::worker {
namespace {

using ::testing::HasSubstr;

constexpr char kFakeRank[] = R"(#!/bin/sh
echo "rank $*"
case " $* " in
  *" --world-rank 1 "*) echo "rank 1 failing"; exit 5 ;;
esac
echo ready
exec sleep 30
)";

// Registers nodes, answers heartbeats with `desired`, keeps what AppendLogs sends.
class FakeController : public v1::WorkerService::Service {
 public:
  grpc::Status RegisterNode(grpc::ServerContext*, const v1::RegisterNodeRequest* req,
                            v1::RegisterNodeResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    nodes.insert(req->node().id());
    ++registrations;
    resp->set_node_id(req->node().id());
    resp->set_heartbeat_interval_ms(100);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    if (nodes.count(req->node_id()) == 0) return {grpc::StatusCode::NOT_FOUND, "unknown node"};
    last_heartbeat = *req;
    heartbeats.push_back(*req);
    for (const v1::RankStatus& r : req->ranks()) {
      const RankKey key{r.job_id(), r.attempt(), r.world_rank()};
      if (r.state() == v1::RANK_PROCESS_STATE_EXITED && log_at_exit.count(key) == 0) {
        log_at_exit[key] = logs[key];
      }
    }
    for (const v1::RankLaunch& l : desired) *resp->add_ranks() = l;
    for (int i = 0; answer_progress && i < req->progress_size(); ++i) {
      *resp->add_progress()->mutable_response() = progress_answer;
    }
    if (req->stopping()) {
      for (const v1::RankLaunch& l : desired_while_stopping) *resp->add_ranks() = l;
    }
    return grpc::Status::OK;
  }
  grpc::Status AppendLogs(grpc::ServerContext*, const v1::AppendLogsRequest* req,
                          v1::AppendLogsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const v1::LogChunk& c : req->chunks()) {
      std::string& log = logs[{c.job_id(), c.attempt(), c.world_rank()}];
      if (c.offset() == static_cast<int64_t>(log.size())) log += c.data();
      resp->add_sizes(static_cast<int64_t>(log.size()));
    }
    return grpc::Status::OK;
  }

  // The status of a rank in the last heartbeat; nullptr when absent.
  std::unique_ptr<v1::RankStatus> Reported(int attempt, int rank) {
    std::lock_guard<std::mutex> lock(mu);
    for (const v1::RankStatus& s : last_heartbeat.ranks()) {
      if (s.attempt() == attempt && s.world_rank() == rank) {
        return std::make_unique<v1::RankStatus>(s);
      }
    }
    return nullptr;
  }
  std::string Log(int attempt, int rank) {
    std::lock_guard<std::mutex> lock(mu);
    return logs[{"j", attempt, rank}];
  }

  std::mutex mu;  // guards everything below
  std::set<std::string> nodes;
  int registrations = 0;
  std::vector<v1::RankLaunch> desired;
  std::vector<v1::RankLaunch> desired_while_stopping;  // added to answers that say stopping
  bool answer_progress = true;  // false: as a controller that predates relayed progress
  v1::ReportProgressResponse progress_answer;  // to every relayed report
  v1::HeartbeatRequest last_heartbeat;
  std::vector<v1::HeartbeatRequest> heartbeats;  // every one, in order
  std::map<RankKey, std::string> logs;
  std::map<RankKey, std::string> log_at_exit;  // what logs held when the exit was first reported
};

struct Server {
  Server(FakeController* service, int port) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port),
                             grpc::InsecureServerCredentials(), &this->port);
    builder.RegisterService(service);
    server = builder.BuildAndStart();
  }
  ~Server() { server->Shutdown(std::chrono::system_clock::now()); }
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// A relay whose Heartbeat holds every call (past the client's deadline) until Answer; from then
// on it answers as `controller` does.
class HungRelay : public FakeController {
 public:
  HungRelay() { controller.nodes.insert("node-a"); }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    {
      std::unique_lock<std::mutex> lock(hang_mu_);
      call_times_.push_back(std::chrono::steady_clock::now());
      hang_cv_.wait_for(lock, std::chrono::seconds(20), [this] { return answering_; });
      if (!answering_) return {grpc::StatusCode::UNAVAILABLE, "hung"};
    }
    return controller.Heartbeat(ctx, req, resp);
  }
  void Answer() {
    {
      std::lock_guard<std::mutex> lock(hang_mu_);
      answering_ = true;
    }
    hang_cv_.notify_all();
  }
  int calls() {
    std::lock_guard<std::mutex> lock(hang_mu_);
    return static_cast<int>(call_times_.size());
  }
  // From the first call to the second (calls() >= 2).
  std::chrono::steady_clock::duration RetryAfter() {
    std::lock_guard<std::mutex> lock(hang_mu_);
    return call_times_.at(1) - call_times_.at(0);
  }
  FakeController controller;  // what the relay answers once it answers

 private:
  std::mutex hang_mu_;
  std::condition_variable hang_cv_;
  bool answering_ = false;
  std::vector<std::chrono::steady_clock::time_point> call_times_;
};

v1::RankLaunch Launch(int attempt, int rank, int world) {
  v1::RankLaunch l;
  l.set_job_id("j");
  l.set_attempt(attempt);
  l.set_world_rank(rank);
  l.set_world_size(world);
  return l;
}

bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/agent_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    options_.node.set_id("node-a");
    options_.retry_initial_ms = 50;
    options_.retry_max_ms = 200;
    options_.tick_ms = 20;
    options_.log_ship_ms = 50;
    options_.ranks.rank_binary = tmpl + "/fake-rank.sh";
    options_.ranks.log_dir = tmpl + "/logs";
    options_.ranks.stop_grace_ms = 3000;
    std::ofstream(options_.ranks.rank_binary) << kFakeRank;
    chmod(options_.ranks.rank_binary.c_str(), 0755);
    server_ = std::make_unique<Server>(&fake_, 0);
    client_ = std::make_unique<api::DhpClient>("127.0.0.1:" + std::to_string(server_->port), 1000);
  }
  void TearDown() override {
    if (thread_.joinable()) StopAgent();
  }
  void StartAgent() {
    agent_ = std::make_unique<Agent>(*client_, options_);
    thread_ = std::thread([this] { agent_->Run(); });
  }
  void StopAgent() {
    agent_->Stop();
    thread_.join();
  }
  bool ReportedRunning(int attempt, int rank) {
    std::unique_ptr<v1::RankStatus> s = fake_.Reported(attempt, rank);
    return s != nullptr && s->state() == v1::RANK_PROCESS_STATE_RUNNING;
  }

  // The --progress-via the agent gave rank 0 of attempt 1 (its fake prints its arguments).
  std::string ProgressTarget() {
    std::string via;
    Eventually([&] {
      const std::string log = fake_.Log(1, 0);
      const size_t at = log.find("--progress-via ");
      if (at == std::string::npos) return false;
      const size_t from = at + std::string("--progress-via ").size();
      via = log.substr(from, log.find_first_of(" \n", from) - from);
      return true;
    });
    return via;
  }
  static v1::ReportProgressRequest Report(int64_t step) {
    v1::ReportProgressRequest req;
    req.set_job_id("j");
    req.set_attempt(1);
    req.set_rank(0);
    req.set_step(step);
    return req;
  }

  AgentOptions options_;
  FakeController fake_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<api::DhpClient> client_;
  std::unique_ptr<Agent> agent_;
  std::thread thread_;
};

TEST_F(AgentTest, LaunchesReportsShipsLogsAndStopsRanks) {
  fake_.desired = {Launch(1, 0, 2), Launch(1, 1, 2)};
  StartAgent();
  ASSERT_TRUE(Eventually([&] {
    std::unique_ptr<v1::RankStatus> failed = fake_.Reported(1, 1);
    return ReportedRunning(1, 0) && failed && failed->state() == v1::RANK_PROCESS_STATE_EXITED;
  }));
  std::unique_ptr<v1::RankStatus> failed = fake_.Reported(1, 1);
  EXPECT_EQ(failed->exit_code(), 5);
  EXPECT_THAT(failed->log_tail(), HasSubstr("rank 1 failing"));
  ASSERT_TRUE(Eventually([&] { return fake_.Log(1, 0).find("ready") != std::string::npos; }));
  EXPECT_THAT(fake_.Log(1, 0), HasSubstr("--job j --attempt 1 --world-rank 0 --world-size 2"));
  EXPECT_THAT(fake_.Log(1, 1), HasSubstr("rank 1 failing"));

  const int64_t pid = fake_.Reported(1, 0)->pid();
  {
    std::lock_guard<std::mutex> lock(fake_.mu);
    fake_.desired.clear();  // e.g. the job was cancelled
  }
  ASSERT_TRUE(Eventually([&] { return fake_.Reported(1, 0) == nullptr; }));  // stopped, forgotten
  EXPECT_NE(kill(static_cast<pid_t>(pid), 0), 0);
  StopAgent();
}

// With a heartbeat relay, heartbeats go there (registration still to the controller); when the
// relay goes down they go to the controller directly, and a NOT_FOUND from the relay (the
// controller's answer, relayed) makes the agent register again rather than bypass it.
TEST_F(AgentTest, HeartbeatsGoThroughTheRelayAndDirectWhileItIsDown) {
  FakeController relayed;  // stands for a relay; it answers as the controller would
  auto relay_server = std::make_unique<Server>(&relayed, 0);
  api::DhpClient relay("127.0.0.1:" + std::to_string(relay_server->port), 1000);
  agent_ = std::make_unique<Agent>(*client_, options_, &relay);
  thread_ = std::thread([this] { agent_->Run(); });
  auto beats = [](FakeController& f) {
    std::lock_guard<std::mutex> lock(f.mu);
    return f.heartbeats.size();
  };
  // The relay does not know the node yet: NOT_FOUND, so the agent registers (with the
  // controller) again, and again, and its heartbeats never go direct meanwhile.
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(fake_.mu);
    return fake_.registrations >= 3;
  }));
  EXPECT_EQ(beats(fake_), 0u);
  {
    std::lock_guard<std::mutex> lock(relayed.mu);
    relayed.nodes.insert("node-a");
  }
  ASSERT_TRUE(Eventually([&] { return beats(relayed) >= 3; }));
  EXPECT_EQ(beats(fake_), 0u);
  relay_server.reset();  // the relay is gone: UNAVAILABLE, so straight to the controller
  ASSERT_TRUE(Eventually([&] { return beats(fake_) >= 3; }));
  StopAgent();
}

// A relay that takes calls and never answers (a hung process, a black-holed route) costs one
// deadline, not one per heartbeat: the agent then goes to the controller directly for
// relay_retry_ms, tries the relay again, and goes back to it once it answers.
TEST_F(AgentTest, AHungRelayCostsOneDeadlinePerRetryNotOnePerHeartbeat) {
  HungRelay hung;
  auto relay_server = std::make_unique<Server>(&hung, 0);
  api::DhpClient relay("127.0.0.1:" + std::to_string(relay_server->port), 1000);  // 1 s deadline
  options_.relay_retry_ms = 3000;
  agent_ = std::make_unique<Agent>(*client_, options_, &relay);
  thread_ = std::thread([this] { agent_->Run(); });
  auto beats = [](FakeController& f) {
    std::lock_guard<std::mutex> lock(f.mu);
    return f.heartbeats.size();
  };
  // 5 direct heartbeats at 100 ms take about 0.5 s, well inside the 3 s before a retry; were
  // every heartbeat tried at the relay first, they would take 5 deadlines (5 s).
  ASSERT_TRUE(Eventually([&] { return beats(fake_) >= 5; }));
  EXPECT_EQ(hung.calls(), 1);
  // The retry: the first call's 1 s deadline, then 3 s direct.
  ASSERT_TRUE(Eventually([&] { return hung.calls() >= 2; }));
  EXPECT_GE(std::chrono::duration_cast<std::chrono::milliseconds>(hung.RetryAfter()).count(),
            3900);
  hung.Answer();  // the relay recovers: its next try succeeds and the heartbeats stay there
  ASSERT_TRUE(Eventually([&] { return beats(hung.controller) >= 5; }));
  const size_t direct = beats(fake_);
  ASSERT_TRUE(Eventually([&] { return beats(hung.controller) >= 10; }));
  EXPECT_EQ(beats(fake_), direct);
  StopAgent();
  hung.Answer();
  relay_server.reset();
}

// This fake controller has no HeartbeatStream (UNIMPLEMENTED): an agent asked to stream its
// heartbeats falls back to unary calls and is heard as before.
TEST_F(AgentTest, WithHeartbeatStreamAControllerWithoutItIsHeardByUnaryCalls) {
  options_.heartbeat_stream = true;
  fake_.desired = {Launch(1, 0, 2)};
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return ReportedRunning(1, 0); }));
  StopAgent();
}

// Ranks report progress to the agent's socket (passed as --progress-via); the heartbeats carry
// it to the controller, and the controller's answer reaches the rank with its next report.
TEST_F(AgentTest, TheRanksProgressTravelsInHeartbeatsAndTheAnswerComesBack) {
  fake_.desired = {Launch(1, 0, 1)};
  fake_.progress_answer.set_checkpoint(true);
  fake_.progress_answer.set_checkpoint_at_step(3);
  StartAgent();
  const std::string target = ProgressTarget();
  ASSERT_EQ(target.rfind("unix:/", 0), 0u) << fake_.Log(1, 0);
  api::DhpClient rank(target, 1000);
  absl::StatusOr<v1::ReportProgressResponse> first = rank.ReportProgress(Report(3));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->checkpoint());  // the controller has not seen it yet
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(fake_.mu);
    for (const v1::HeartbeatRequest& hb : fake_.heartbeats) {
      if (hb.progress_size() == 1 && hb.progress(0).step() == 3) return true;
    }
    return false;
  }));
  absl::StatusOr<v1::ReportProgressResponse> later = rank.ReportProgress(Report(4));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_TRUE(later->checkpoint());
  EXPECT_EQ(later->checkpoint_at_step(), 3);
  StopAgent();
  struct stat st;
  EXPECT_NE(stat(target.substr(5).c_str(), &st), 0) << "the socket outlived the agent";
}

// By default the socket is progress.sock in the log directory (where the next agent replaces
// it if this one is killed), not a new directory under /tmp each time.
TEST_F(AgentTest, TheRanksSocketIsInTheLogDirectory) {
  std::string root = "/tmp/dhp-agent.XXXXXX";  // short: a socket's path holds 107 bytes
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  options_.ranks.log_dir = root + "/logs";
  fake_.desired = {Launch(1, 0, 1)};
  StartAgent();
  const std::string socket = options_.ranks.log_dir + "/progress.sock";
  EXPECT_EQ(ProgressTarget(), "unix:" + socket);
  api::DhpClient rank("unix:" + socket, 1000);
  EXPECT_TRUE(rank.ReportProgress(Report(1)).ok());
  StopAgent();
  struct stat st;
  EXPECT_NE(stat(socket.c_str(), &st), 0) << "the socket outlived the agent";
  RemoveTree(root);
}

// A controller that answers no relayed report predates relaying: the ranks are told
// UNIMPLEMENTED, on which dhp-rank reports to the controller itself (RankReporter).
TEST_F(AgentTest, AControllerThatIgnoresRelayedProgressSendsTheRanksToItDirectly) {
  fake_.desired = {Launch(1, 0, 1)};
  fake_.answer_progress = false;
  StartAgent();
  const std::string target = ProgressTarget();
  ASSERT_FALSE(target.empty()) << fake_.Log(1, 0);
  api::DhpClient rank(target, 1000);
  ASSERT_TRUE(rank.ReportProgress(Report(1)).ok());
  ASSERT_TRUE(Eventually([&] {
    return rank.ReportProgress(Report(2)).status().code() == absl::StatusCode::kUnimplemented;
  }));
  StopAgent();
}

TEST_F(AgentTest, WithoutRelayingTheRanksGetNoProgressSocket) {
  options_.relay_progress = false;
  fake_.desired = {Launch(1, 0, 1)};
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return fake_.Log(1, 0).find("ready") != std::string::npos; }));
  EXPECT_THAT(fake_.Log(1, 0), ::testing::Not(HasSubstr("--progress-via")));
  StopAgent();
}

// The controller fails a run on the heartbeat that reports a rank's exit, so the rank's last
// output must be shipped before it: `dhpctl logs` right after FAILED shows the error. Shipping on
// the agent's own timer is off here (an hour), so only the exit can have shipped it.
TEST_F(AgentTest, ARanksLastOutputIsShippedBeforeItsExitIsReported) {
  options_.log_ship_ms = 3600 * 1000;
  fake_.desired = {Launch(1, 1, 2)};
  StartAgent();
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(fake_.mu);
    return fake_.log_at_exit.count(RankKey{"j", 1, 1}) > 0;
  }));
  std::lock_guard<std::mutex> lock(fake_.mu);
  const RankKey failed{"j", 1, 1};
  EXPECT_THAT(fake_.log_at_exit[failed], HasSubstr("rank 1 failing"));
}

TEST_F(AgentTest, RanksSurviveAControllerRestartAndAreReportedAgain) {
  fake_.desired = {Launch(1, 0, 1)};
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return ReportedRunning(1, 0); }));
  const int64_t pid = fake_.Reported(1, 0)->pid();
  const int port = server_->port;
  server_.reset();  // the controller goes away...
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(kill(static_cast<pid_t>(pid), 0), 0);

  FakeController restarted;  // ...and comes back without memory of the node
  restarted.desired = {Launch(1, 0, 1)};
  Server server(&restarted, port);
  ASSERT_TRUE(Eventually([&] {
    std::unique_ptr<v1::RankStatus> s = restarted.Reported(1, 0);
    return s != nullptr && s->state() == v1::RANK_PROCESS_STATE_RUNNING;
  }));
  EXPECT_EQ(restarted.Reported(1, 0)->pid(), pid);
  EXPECT_EQ(restarted.registrations, 1);
  ASSERT_TRUE(Eventually([&] { return restarted.Log(1, 0).find("ready") != std::string::npos; }));
  StopAgent();
}

TEST_F(AgentTest, ARestartedAgentShipsTheRestOfTheLogsItsPredecessorsRanksLeft) {
  // A previous agent's rank wrote three lines and died with it; the controller holds the first.
  const std::string dir = options_.ranks.log_dir + "/j/attempt-1";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  std::ofstream(dir + "/rank-0.log") << "step 1\nstep 2\nstep 3\n";
  std::ofstream(dir + "/rank-7.log.bak") << "not a rank log\n";
  fake_.logs[{"j", 1, 0}] = "step 1\n";
  StartAgent();  // the controller wants nothing of it: the attempt is over
  ASSERT_TRUE(Eventually([&] { return fake_.Log(1, 0) == "step 1\nstep 2\nstep 3\n"; }))
      << fake_.Log(1, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a few more shipping rounds
  EXPECT_EQ(fake_.Log(1, 0), "step 1\nstep 2\nstep 3\n");  // nothing twice
  EXPECT_EQ(fake_.logs.size(), 1u);
  StopAgent();
}

TEST_F(AgentTest, StopTerminatesTheRanksAndReportsTheirExit) {
  fake_.desired = {Launch(2, 0, 1)};
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return ReportedRunning(2, 0); }));
  const int64_t pid = fake_.Reported(2, 0)->pid();
  const auto start = std::chrono::steady_clock::now();
  StopAgent();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(kill(static_cast<pid_t>(pid), 0), 0);
  std::unique_ptr<v1::RankStatus> last = fake_.Reported(2, 0);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->state(), v1::RANK_PROCESS_STATE_EXITED);
  EXPECT_EQ(last->signal(), SIGTERM);
  EXPECT_TRUE(last->stopped_by_agent());
}

// A SIGTERM'd agent (Stop) says so with every heartbeat from then on: while its ranks
// checkpoint and exit (this one takes half a second and exits 75, as dhp-rank does when
// preempted), and in the final report of their exits. It starts nothing the answers ask for.
TEST_F(AgentTest, EveryHeartbeatAfterStopSaysStoppingWhileTheRanksCheckpointAndExit) {
  std::ofstream(options_.ranks.rank_binary, std::ios::trunc)
      << "#!/bin/sh\ntrap 'sleep 0.5; exit 75' TERM\necho ready\nsleep 30 &\nwait $!\n";
  fake_.desired = {Launch(3, 0, 2)};
  fake_.desired_while_stopping = {Launch(3, 1, 2)};
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return ReportedRunning(3, 0); }));
  StopAgent();

  std::lock_guard<std::mutex> lock(fake_.mu);
  const std::vector<v1::HeartbeatRequest>& beats = fake_.heartbeats;
  size_t first = 0;  // the first that says stopping; all before it were sent before Stop
  while (first < beats.size() && !beats[first].stopping()) ++first;
  ASSERT_LT(first, beats.size()) << "no heartbeat said stopping";
  EXPECT_GT(first, 0u);
  bool reported_running = false;  // a heartbeat while the rank was still checkpointing
  for (size_t i = first; i < beats.size(); ++i) {
    EXPECT_TRUE(beats[i].stopping()) << "heartbeat " << i << " of " << beats.size();
    for (const v1::RankStatus& s : beats[i].ranks()) {
      EXPECT_EQ(s.world_rank(), 0) << "a rank was started after Stop";
      reported_running = reported_running || s.state() == v1::RANK_PROCESS_STATE_RUNNING;
    }
  }
  EXPECT_TRUE(reported_running);
  const v1::HeartbeatRequest& last = beats.back();
  ASSERT_EQ(last.ranks_size(), 1);
  EXPECT_EQ(last.ranks(0).state(), v1::RANK_PROCESS_STATE_EXITED);
  EXPECT_EQ(last.ranks(0).exit_code(), 75);
  EXPECT_TRUE(last.ranks(0).stopped_by_agent());
}

}  // namespace
}  // namespace dhp::worker
