#include "worker/agent/rank_process.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::worker {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "/rank_process_test.XXXXXX";
  const char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<RankProcess> StartShell(const std::string& script, const std::string& log,
                                        std::vector<std::pair<std::string, std::string>> env = {}) {
  absl::StatusOr<std::unique_ptr<RankProcess>> p =
      RankProcess::Start({{"/bin/sh", "-c", script}, std::move(env), log});
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// Polls until the process exits; false after `timeout`.
bool WaitExit(RankProcess& p, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = Clock::now() + timeout;
  while (!p.Poll()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Waits until the log contains `text` (the child has got that far).
bool WaitLog(const std::string& log, const std::string& text) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (ReadFile(log).find(text) == std::string::npos) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A pid that is gone or only a zombie (orphans are reaped by init, asynchronously).
bool Dead(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

bool EventuallyDead(pid_t pid) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!Dead(pid)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST(RankProcessTest, ExitZeroAppendsStdoutAndStderrToTheLog) {
  const std::string log = MakeTempDir() + "/a/b/rank.log";
  auto p = StartShell("echo out; echo \"err $FOO\" >&2; exit 0", log, {{"FOO", "bar"}});
  ASSERT_TRUE(WaitExit(*p));
  EXPECT_EQ(p->exit_code(), 0);
  EXPECT_EQ(p->signal(), 0);
  EXPECT_EQ(p->log_tail(), "");
  EXPECT_EQ(ReadFile(log), "out\nerr bar\n");
  EXPECT_EQ(kill(p->pid(), 0), -1);
}

TEST(RankProcessTest, ExitThreeReportsTheLogTail) {
  const std::string log = MakeTempDir() + "/rank.log";
  {
    std::ofstream(log) << "earlier run\n";  // the log is appended to, not truncated
  }
  auto p = StartShell("i=1; while [ $i -le 30 ]; do echo line $i; i=$((i+1)); done; exit 3", log);
  ASSERT_TRUE(WaitExit(*p));
  EXPECT_EQ(p->exit_code(), 3);
  EXPECT_THAT(ReadFile(log), ::testing::StartsWith("earlier run\nline 1\n"));
  std::string expected;
  for (int i = 11; i <= 30; ++i) expected += "line " + std::to_string(i) + "\n";
  EXPECT_EQ(p->log_tail(), expected);
}

TEST(RankProcessTest, ExecFailureExits127AndSaysWhyInTheLog) {
  const std::string log = MakeTempDir() + "/rank.log";
  auto p = RankProcess::Start({{"/nonexistent/dhp-rank", "--x"}, {}, log});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitExit(**p));
  EXPECT_EQ((*p)->exit_code(), 127);
  EXPECT_THAT(ReadFile(log), HasSubstr("cannot execute /nonexistent/dhp-rank: no such file"));
  EXPECT_THAT((*p)->log_tail(), HasSubstr("cannot execute"));
}

TEST(RankProcessTest, FindsTheBinaryInPath) {
  const std::string log = MakeTempDir() + "/rank.log";
  auto p = RankProcess::Start({{"sh", "-c", "echo $0 ran"}, {}, log});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitExit(**p));
  EXPECT_EQ((*p)->exit_code(), 0);
  EXPECT_EQ(ReadFile(log), "sh ran\n");
}

TEST(RankProcessTest, EmptyArgvIsAnError) {
  EXPECT_FALSE(RankProcess::Start({{}, {}, MakeTempDir() + "/x.log"}).ok());
}

TEST(RankProcessTest, KilledBySigkillReportsSignal9) {
  const std::string log = MakeTempDir() + "/rank.log";
  auto p = StartShell("echo ready; exec sleep 30", log);
  ASSERT_TRUE(WaitLog(log, "ready"));
  EXPECT_FALSE(p->Poll());
  ASSERT_EQ(kill(p->pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitExit(*p));
  EXPECT_EQ(p->exit_code(), -1);
  EXPECT_EQ(p->signal(), SIGKILL);
  EXPECT_THAT(p->log_tail(), HasSubstr("ready"));
}

TEST(RankProcessTest, TerminateSendsSigtermToTheGroupIncludingGrandchildren) {
  const std::string log = MakeTempDir() + "/rank.log";
  auto p = StartShell("sleep 30 & echo child $!; echo ready; wait", log);
  ASSERT_TRUE(WaitLog(log, "ready"));
  const pid_t grandchild = std::stoi(ReadFile(log).substr(6));
  const auto start = Clock::now();
  p->Terminate(std::chrono::seconds(5));
  ASSERT_TRUE(WaitExit(*p));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));  // SIGTERM was enough
  EXPECT_EQ(p->signal(), SIGTERM);
  EXPECT_TRUE(EventuallyDead(grandchild));
}

TEST(RankProcessTest, IgnoredSigtermIsFollowedBySigkillAfterTheGrace) {
  const std::string log = MakeTempDir() + "/rank.log";
  auto p = StartShell("trap '' TERM; sleep 30 & echo child $!; echo ready; wait", log);
  ASSERT_TRUE(WaitLog(log, "ready"));
  const pid_t grandchild = std::stoi(ReadFile(log).substr(6));
  const auto grace = std::chrono::milliseconds(500);
  const auto start = Clock::now();
  p->Terminate(grace);
  p->Terminate(std::chrono::seconds(60));  // a second call does not postpone the SIGKILL
  ASSERT_TRUE(WaitExit(*p));
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, grace);
  EXPECT_LE(elapsed, grace + std::chrono::seconds(1));
  EXPECT_EQ(p->exit_code(), -1);
  EXPECT_EQ(p->signal(), SIGKILL);
  EXPECT_EQ(kill(p->pid(), 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(EventuallyDead(grandchild));
}

TEST(RankProcessTest, LeftoversOfTheGroupDieWhenTheLeaderExits) {
  const std::string log = MakeTempDir() + "/rank.log";
  auto p = StartShell("sleep 30 & echo child $!; exit 0", log);
  ASSERT_TRUE(WaitExit(*p));
  EXPECT_EQ(p->exit_code(), 0);
  const pid_t grandchild = std::stoi(ReadFile(log).substr(6));
  EXPECT_TRUE(EventuallyDead(grandchild));
}

TEST(RankProcessTest, DestructorKillsAndReaps) {
  const std::string log = MakeTempDir() + "/rank.log";
  auto p = StartShell("sleep 30 & echo child $!; echo ready; wait", log);
  ASSERT_TRUE(WaitLog(log, "ready"));
  const pid_t pid = p->pid();
  const pid_t grandchild = std::stoi(ReadFile(log).substr(6));
  p.reset();
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(EventuallyDead(grandchild));
}

TEST(RankProcessTest, ChildDiesWithTheAgent) {
  const std::string log = MakeTempDir() + "/rank.log";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t agent = fork();  // a stand-in agent that dies without cleaning up
  if (agent == 0) {
    absl::StatusOr<std::unique_ptr<RankProcess>> p =
        RankProcess::Start({{"/bin/sh", "-c", "echo ready; exec sleep 30"}, {}, log});
    const pid_t pid = p.ok() ? (*p)->pid() : -1;
    (void)!write(fds[1], &pid, sizeof(pid));
    while (ReadFile(log).find("ready") == std::string::npos) usleep(1000);
    _exit(0);
  }
  pid_t rank = -1;
  ASSERT_EQ(read(fds[0], &rank, sizeof(rank)), static_cast<ssize_t>(sizeof(rank)));
  ASSERT_GT(rank, 0);
  int status = 0;
  ASSERT_EQ(waitpid(agent, &status, 0), agent);
  EXPECT_TRUE(EventuallyDead(rank));
  close(fds[0]);
  close(fds[1]);
}

TEST(LogTailTest, KeepsTheLastLinesWithinTheByteLimit) {
  const std::string path = MakeTempDir() + "/log";
  EXPECT_EQ(LogTail(path), "");  // missing file
  std::ofstream(path) << "a\nb\nc";
  EXPECT_EQ(LogTail(path, 2), "b\nc");
  EXPECT_EQ(LogTail(path, 20), "a\nb\nc");
  std::ofstream(path) << std::string(100, 'x') << "\nshort\n";
  EXPECT_EQ(LogTail(path, 20, 50), "short\n");  // the cut line is dropped
  std::ofstream(path) << std::string(100, 'y');
  EXPECT_EQ(LogTail(path, 20, 50), std::string(50, 'y'));  // unless it is all there is
}

}  // namespace
}  // namespace dhp::worker
