#include "worker/agent/progress_relay.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "api/client.h"
#include "common/remove_tree.h"
#include "gtest/gtest.h"
#include "worker/agent/progress_server.h"

namespace dhp::worker {
namespace {

v1::ReportProgressRequest Report(const std::string& job, int rank, int64_t step) {
  v1::ReportProgressRequest req;
  req.set_job_id(job);
  req.set_attempt(1);
  req.set_rank(rank);
  req.set_step(step);
  return req;
}

// What a controller answers for every relayed report of `hb`: OK with `answer`.
v1::HeartbeatResponse AnswerAll(const v1::HeartbeatRequest& hb,
                                const v1::ReportProgressResponse& answer) {
  v1::HeartbeatResponse resp;
  for (int i = 0; i < hb.progress_size(); ++i) *resp.add_progress()->mutable_response() = answer;
  return resp;
}

TEST(ProgressRelayTest, AHeartbeatCarriesTheNewestReportOfEachRankOnce) {
  ProgressRelay relay;
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(relay.Accept(Report("j", 0, step)).ok());
  ASSERT_TRUE(relay.Accept(Report("j", 1, 2)).ok());
  v1::HeartbeatRequest hb;
  EXPECT_EQ(relay.TakeInto(&hb), 2);
  ASSERT_EQ(hb.progress_size(), 2);
  EXPECT_EQ(hb.progress(0).rank(), 0);
  EXPECT_EQ(hb.progress(0).step(), 3);
  EXPECT_EQ(hb.progress(1).rank(), 1);
  EXPECT_EQ(hb.progress(1).step(), 2);
  v1::HeartbeatRequest next;
  EXPECT_EQ(relay.TakeInto(&next), 0);  // nothing new
}

TEST(ProgressRelayTest, RanksGetTheControllersNewestAnswerForThem) {
  ProgressRelay relay;
  absl::StatusOr<v1::ReportProgressResponse> first = relay.Accept(Report("j", 0, 1));
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->stop());
  EXPECT_EQ(first->next_report_ms(), 0);  // nothing heard from the controller yet
  v1::HeartbeatRequest hb;
  relay.TakeInto(&hb);
  v1::ReportProgressResponse answer;
  answer.set_checkpoint(true);
  answer.set_checkpoint_at_step(7);
  answer.set_next_report_ms(20000);
  relay.Answered(hb, AnswerAll(hb, answer));
  absl::StatusOr<v1::ReportProgressResponse> second = relay.Accept(Report("j", 0, 2));
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->checkpoint());
  EXPECT_EQ(second->checkpoint_at_step(), 7);
  EXPECT_EQ(second->next_report_ms(), 20000);
  // Another rank has had no answer of its own.
  absl::StatusOr<v1::ReportProgressResponse> other = relay.Accept(Report("j", 1, 2));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->checkpoint());
}

TEST(ProgressRelayTest, AnEndedAttemptIsAnsweredToEveryLaterReportOtherErrorsOnce) {
  ProgressRelay relay;
  ASSERT_TRUE(relay.Accept(Report("ended", 0, 1)).ok());
  ASSERT_TRUE(relay.Accept(Report("bad", 0, 1)).ok());
  v1::HeartbeatRequest hb;
  relay.TakeInto(&hb);
  v1::HeartbeatResponse resp;
  v1::ProgressAnswer* bad = resp.add_progress();  // "bad" < "ended": in that order
  bad->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
  bad->set_message("step: bad");
  v1::ProgressAnswer* ended = resp.add_progress();
  ended->set_code(static_cast<int>(absl::StatusCode::kFailedPrecondition));
  ended->set_message("attempt 1 is not current");
  ASSERT_EQ(hb.progress(0).job_id(), "bad");
  relay.Answered(hb, resp);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<v1::ReportProgressResponse> r = relay.Accept(Report("ended", 0, 2));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(r.status().message(), "attempt 1 is not current");
  }
  EXPECT_EQ(relay.Accept(Report("bad", 0, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(relay.Accept(Report("bad", 0, 3)).ok());
}

TEST(ProgressRelayTest, AFailedHeartbeatsReportsGoAgainUnlessTheRankReportedSince) {
  ProgressRelay relay;
  ASSERT_TRUE(relay.Accept(Report("j", 0, 5)).ok());
  ASSERT_TRUE(relay.Accept(Report("j", 1, 5)).ok());
  v1::HeartbeatRequest hb;
  relay.TakeInto(&hb);
  ASSERT_TRUE(relay.Accept(Report("j", 1, 6)).ok());  // while the heartbeat was in flight
  relay.Failed(hb);
  v1::HeartbeatRequest again;
  ASSERT_EQ(relay.TakeInto(&again), 2);
  EXPECT_EQ(again.progress(0).step(), 5);
  EXPECT_EQ(again.progress(1).step(), 6);
}

TEST(ProgressRelayTest, AControllerThatAnswersNoReportsMakesRanksReportDirectly) {
  ProgressRelay relay;
  ASSERT_TRUE(relay.Accept(Report("j", 0, 1)).ok());
  v1::HeartbeatRequest hb;
  relay.TakeInto(&hb);
  relay.Answered(hb, v1::HeartbeatResponse());  // an older controller: no ProgressAnswer
  EXPECT_TRUE(relay.unsupported());
  EXPECT_EQ(relay.Accept(Report("j", 0, 2)).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ProgressRelayTest, RanksThatAreGoneAreForgottenAndStrayOnesAreBounded) {
  ProgressRelay relay(/*max_ranks=*/2);
  ASSERT_TRUE(relay.Accept(Report("j", 0, 1)).ok());
  ASSERT_TRUE(relay.Accept(Report("j", 1, 1)).ok());
  EXPECT_EQ(relay.Accept(Report("j", 2, 1)).status().code(),
            absl::StatusCode::kResourceExhausted);
  relay.Retain({RankKey{"j", 1, 1}});
  EXPECT_EQ(relay.ranks(), 1u);
  EXPECT_TRUE(relay.Accept(Report("j", 2, 1)).ok());
  v1::HeartbeatRequest hb;
  ASSERT_EQ(relay.TakeInto(&hb), 2);  // rank 0's report went with it
  EXPECT_EQ(hb.progress(0).rank(), 1);
  EXPECT_EQ(hb.progress(1).rank(), 2);
}

// More ranks reporting than one heartbeat may carry (stray local clients; the controller
// refuses a heartbeat of over kMaxRelayedPerHeartbeat reports): each heartbeat carries the limit,
// the rest go in the next ones, and a rank that reports every time does not hold others back.
TEST(ProgressRelayTest, AHeartbeatCarriesAtMostTheControllersLimitTakingRanksInTurn) {
  ProgressRelay relay;
  const int ranks = kMaxRelayedPerHeartbeat + 500;
  for (int r = 0; r < ranks; ++r) ASSERT_TRUE(relay.Accept(Report("j", r, 1)).ok());
  std::set<int> carried;
  std::vector<int64_t> rank0_steps;
  for (int beat = 0; beat < 2; ++beat) {
    ASSERT_TRUE(relay.Accept(Report("j", 0, 2 + beat)).ok());  // rank 0 reports every time
    v1::HeartbeatRequest hb;
    const int n = relay.TakeInto(&hb);
    ASSERT_EQ(n, hb.progress_size());
    ASSERT_LE(n, kMaxRelayedPerHeartbeat);
    for (const v1::ReportProgressRequest& p : hb.progress()) {
      carried.insert(p.rank());
      if (p.rank() == 0) rank0_steps.push_back(p.step());
    }
  }
  EXPECT_EQ(static_cast<int>(carried.size()), ranks);  // every rank within two heartbeats
  EXPECT_EQ(rank0_steps, (std::vector<int64_t>{2, 3}));  // and rank 0's newest in each
  v1::HeartbeatRequest third;
  EXPECT_EQ(relay.TakeInto(&third), 0);

  // Two a heartbeat, with ranks 0 and 1 reporting before every one: 2 and 3 still get through.
  ProgressRelay small;
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(small.Accept(Report("k", r, 1)).ok());
  std::set<int> small_carried;
  for (int beat = 0; beat < 2; ++beat) {
    ASSERT_TRUE(small.Accept(Report("k", 0, 2 + beat)).ok());
    ASSERT_TRUE(small.Accept(Report("k", 1, 2 + beat)).ok());
    v1::HeartbeatRequest hb;
    ASSERT_EQ(small.TakeInto(&hb, /*max=*/2), 2);
    for (const v1::ReportProgressRequest& p : hb.progress()) small_carried.insert(p.rank());
  }
  EXPECT_EQ(small_carried, (std::set<int>{0, 1, 2, 3}));
}

// Over the agent's Unix socket, with the client ranks use.
TEST(ProgressServerTest, RanksReportOverAPrivateUnixSocketThatIsRemovedAtTheEnd) {
  ProgressRelay relay;
  absl::StatusOr<std::unique_ptr<ProgressServer>> server = ProgressServer::Start(relay, "");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = (*server)->target();
  ASSERT_EQ(target.rfind("unix:/tmp/dhp-worker-", 0), 0u) << target;
  const std::string path = target.substr(5);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  {
    api::DhpClient client(target, 5000);
    absl::StatusOr<v1::ReportProgressResponse> r = client.ReportProgress(Report("j", 3, 9));
    ASSERT_TRUE(r.ok()) << r.status();
    v1::HeartbeatRequest hb;
    ASSERT_EQ(relay.TakeInto(&hb), 1);
    EXPECT_EQ(hb.progress(0).rank(), 3);
    EXPECT_EQ(hb.progress(0).step(), 9);
    v1::HeartbeatRequest beat;
    beat.set_node_id("n");
    EXPECT_EQ(client.Heartbeat(beat).status().code(), absl::StatusCode::kUnimplemented);
  }
  server->reset();
  EXPECT_NE(stat(path.c_str(), &st), 0);
  EXPECT_NE(stat(path.substr(0, path.rfind('/')).c_str(), &st), 0);
}

TEST(ProgressServerTest, ASocketPathTooLongIsRefusedNamingIt) {
  ProgressRelay relay;
  const std::string path = "/tmp/" + std::string(120, 'x') + ".sock";
  absl::StatusOr<std::unique_ptr<ProgressServer>> server = ProgressServer::Start(relay, path);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find("at most 107"), std::string::npos)
      << server.status();
}

// A short private directory under /tmp (a socket's path holds 107 bytes; TEST_TMPDIR is longer).
class ShortDir {
 public:
  ShortDir() : path_("/tmp/dhp-prs.XXXXXX") { EXPECT_NE(mkdtemp(path_.data()), nullptr); }
  ~ShortDir() { RemoveTree(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What an agent killed with SIGKILL leaves: a socket file nobody listens on.
void LeaveDeadSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << path;
  close(fd);
}

bool Reports(const std::string& target, ProgressRelay& relay, int64_t step) {
  api::DhpClient client(target, 5000);
  absl::StatusOr<v1::ReportProgressResponse> r = client.ReportProgress(Report("j", 0, step));
  v1::HeartbeatRequest hb;
  return r.ok() && relay.TakeInto(&hb) == 1 && hb.progress(0).step() == step;
}

TEST(ProgressServerTest, ADeadAgentsSocketIsReplacedALiveOnesOrAFileIsNot) {
  ShortDir dir;
  const std::string path = dir.path() + "/progress.sock";
  LeaveDeadSocket(path);
  ProgressRelay relay;
  absl::StatusOr<std::unique_ptr<ProgressServer>> first = ProgressServer::Start(relay, path);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(Reports("unix:" + path, relay, 7));

  ProgressRelay other;
  absl::StatusOr<std::unique_ptr<ProgressServer>> second = ProgressServer::Start(other, path);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("listens on it"), std::string::npos)
      << second.status();
  EXPECT_TRUE(Reports("unix:" + path, relay, 8)) << "the refused server took the live socket";

  const std::string file = dir.path() + "/notes.txt";  // a mistyped --progress-socket
  std::ofstream(file) << "keep me";
  absl::StatusOr<std::unique_ptr<ProgressServer>> third = ProgressServer::Start(other, file);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(third.status().message().find("other than a socket"), std::string::npos)
      << third.status();
  std::ifstream kept(file);
  std::string text;
  std::getline(kept, text);
  EXPECT_EQ(text, "keep me");
}

TEST(ProgressServerTest, TheDefaultSocketIsInTheLogDirectoryWhenThatIsPrivate) {
  ShortDir dir;
  const std::string logs = dir.path() + "/node/logs";
  absl::StatusOr<std::string> path = ProgressSocketIn(logs);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, logs + "/progress.sock");
  struct stat st;
  EXPECT_EQ(stat(logs.c_str(), &st), 0) << "the log directory was not made";

  ASSERT_EQ(chmod(logs.c_str(), 0777), 0);
  absl::StatusOr<std::string> shared = ProgressSocketIn(logs);
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(shared.status().message().find("mode 777"), std::string::npos) << shared.status();

  const std::string deep = dir.path() + "/" + std::string(100, 'd');
  EXPECT_EQ(ProgressSocketIn(deep).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dhp::worker
