#include "worker/agent/rank_launcher.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::worker {
namespace {

using ::testing::_;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

// A stand-in for dhp-rank: prints its argv and environment, then world rank 1 fails with
// status 5 and the others run until signalled.
constexpr char kFakeRank[] = R"(#!/bin/sh
echo "argv: $*"
echo "env: $OMP_NUM_THREADS $OMP_WAIT_POLICY $OPENBLAS_NUM_THREADS $DHP_NODE_ID ${CUDA_VISIBLE_DEVICES-unset}"
case " $* " in
  *" --world-rank 1 "*) echo "rank 1 failing"; exit 5 ;;
esac
echo ready
exec sleep 30
)";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class RankLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("CUDA_VISIBLE_DEVICES");
    std::string tmpl = ::testing::TempDir() + "/rank_launcher_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    options_.node_id = "node-a";
    options_.rank_binary = dir_ + "/fake-rank.sh";
    options_.controller = "127.0.0.1:7070";
    options_.data_root = "/data";
    options_.log_dir = dir_ + "/logs";
    options_.stop_grace_ms = 2000;
    std::ofstream(options_.rank_binary) << kFakeRank;
    chmod(options_.rank_binary.c_str(), 0755);
  }

  static v1::RankLaunch Launch(const std::string& job, int attempt, int rank, int world,
                               int slot = 0, bool gpu = false) {
    v1::RankLaunch l;
    l.set_job_id(job);
    l.set_attempt(attempt);
    l.set_world_rank(rank);
    l.set_world_size(world);
    l.set_slot(slot);
    l.set_gpu(gpu);
    return l;
  }

  // Polls `launcher` until `done` holds (false after 10 s).
  static bool PollUntil(RankLauncher& launcher, const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      launcher.Poll();
      if (done()) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  bool LogSays(const std::string& path, const std::string& text) {
    return ReadFile(path).find(text) != std::string::npos;
  }

  std::string dir_;
  RankLauncherOptions options_;
};

TEST_F(RankLauncherTest, GpuRankGetsItsCommandLineEnvironmentAndLog) {
  options_.token_file = "/etc/dhp/token";
  options_.tls_args = {"--ca-file", "/etc/dhp/ca.pem"};
  options_.extra_data_roots = {"/models", "/scratch"};
  options_.peak_tflops = 989.5;
  RankLauncher launcher(options_);
  launcher.Reconcile({Launch("j1", 2, 0, 2, /*slot=*/3, /*gpu=*/true)});
  const std::string log = options_.log_dir + "/j1/attempt-2/rank-0.log";
  ASSERT_TRUE(PollUntil(launcher, [&] { return LogSays(log, "ready"); }));
  EXPECT_EQ(ReadFile(log),
            "argv: --controller 127.0.0.1:7070 --job j1 --attempt 2 --world-rank 0 "
            "--world-size 2 --device cuda:0 --data-root /data --token-file /etc/dhp/token "
            "--ca-file /etc/dhp/ca.pem --allow-data-root /models --allow-data-root /scratch "
            "--peak-tflops 989.5\n"
            "env: 1 PASSIVE 1 node-a 3\nready\n");
  std::vector<v1::RankStatus> statuses = launcher.Statuses();
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(statuses[0].job_id(), "j1");
  EXPECT_EQ(statuses[0].attempt(), 2);
  EXPECT_EQ(statuses[0].world_rank(), 0);
  EXPECT_EQ(statuses[0].state(), v1::RANK_PROCESS_STATE_RUNNING);
  EXPECT_GT(statuses[0].pid(), 0);
  EXPECT_FALSE(statuses[0].stopped_by_agent());
  ASSERT_EQ(launcher.Logs().size(), 1u);
  EXPECT_EQ(launcher.Logs()[0].path, log);
}

// A preempted rank (the agent got SIGTERM) has its job's restart.preemption_grace_s to
// checkpoint and exit, not the agent's shorter --stop-grace-ms.
TEST_F(RankLauncherTest, StopAllGivesEachRankItsJobsPreemptionGrace) {
  std::ofstream(options_.rank_binary) << "#!/bin/sh\n"
                                         "trap 'sleep 1; echo checkpointed; exit 75' TERM\n"
                                         "echo ready\n"
                                         "while :; do sleep 0.1; done\n";
  options_.stop_grace_ms = 300;
  RankLauncher launcher(options_);
  v1::RankLaunch patient = Launch("j1", 1, 0, 2, /*slot=*/0);
  patient.set_preemption_grace_s(10);
  const v1::RankLaunch plain = Launch("j2", 1, 0, 2, /*slot=*/1);  // no grace from the job
  launcher.Reconcile({patient, plain});
  const std::string log1 = options_.log_dir + "/j1/attempt-1/rank-0.log";
  const std::string log2 = options_.log_dir + "/j2/attempt-1/rank-0.log";
  ASSERT_TRUE(PollUntil(launcher, [&] { return LogSays(log1, "ready") && LogSays(log2, "ready"); }));
  launcher.StopAll();
  ASSERT_TRUE(PollUntil(launcher, [&] { return launcher.AllExited(); }));
  std::map<std::string, v1::RankStatus> by_job;
  for (const v1::RankStatus& st : launcher.Statuses()) by_job[st.job_id()] = st;
  EXPECT_EQ(by_job["j1"].exit_code(), 75);  // checkpointed within its 10 s
  EXPECT_EQ(by_job["j1"].signal(), 0);
  EXPECT_TRUE(LogSays(log1, "checkpointed"));
  EXPECT_EQ(by_job["j2"].signal(), SIGKILL);  // 300 ms were not enough
  EXPECT_TRUE(by_job["j2"].stopped_by_agent());
}

TEST_F(RankLauncherTest, CpuRankRunsOnCpuWithoutCudaDevicesOrToken) {
  RankLauncher launcher(options_);
  const v1::RankLaunch cpu = Launch("j1", 1, 0, 1, /*slot=*/1);
  EXPECT_THAT(launcher.Argv(cpu),
              ElementsAre(options_.rank_binary, "--controller", "127.0.0.1:7070", "--job", "j1",
                          "--attempt", "1", "--world-rank", "0", "--world-size", "1", "--device",
                          "cpu", "--data-root", "/data"));
  RankLauncherOptions any = options_;
  any.allow_any_data_path = true;
  EXPECT_EQ(RankLauncher(any).Argv(cpu).back(), "--allow-any-data-path");
  EXPECT_THAT(launcher.Env(cpu),
              ElementsAre(Pair("OMP_NUM_THREADS", "1"), Pair("OMP_WAIT_POLICY", "PASSIVE"),
                          Pair("OPENBLAS_NUM_THREADS", "1"), Pair("DHP_NODE_ID", "node-a")));
  launcher.Reconcile({cpu});
  const std::string log = options_.log_dir + "/j1/attempt-1/rank-0.log";
  ASSERT_TRUE(PollUntil(launcher, [&] { return LogSays(log, "ready"); }));
  EXPECT_THAT(ReadFile(log), HasSubstr("--device cpu --data-root /data\nenv: 1 PASSIVE 1 node-a unset\n"));
}

TEST_F(RankLauncherTest, ARankWithItsOwnCredentialGetsItInsteadOfTheAgentsToken) {
  options_.token_file = "/etc/dhp/token";
  RankLauncher launcher(options_);
  v1::RankLaunch launch = Launch("j1", 1, 0, 1, /*slot=*/1);
  EXPECT_THAT(launcher.Argv(launch), Contains("--token-file"));
  EXPECT_THAT(launcher.Env(launch), Not(Contains(Pair("DHP_TOKEN", _))));
  launch.set_credential("rank.j1.1.abc");
  EXPECT_THAT(launcher.Argv(launch), Not(Contains("--token-file")));
  EXPECT_THAT(launcher.Env(launch), Contains(Pair("DHP_TOKEN", "rank.j1.1.abc")));
}

TEST_F(RankLauncherTest, ExitedRankIsNeverRestartedButANewAttemptStarts) {
  RankLauncher launcher(options_);
  const std::vector<v1::RankLaunch> attempt1 = {Launch("j", 1, 0, 2), Launch("j", 1, 1, 2)};
  launcher.Reconcile(attempt1);
  ASSERT_TRUE(PollUntil(launcher, [&] { return launcher.Statuses()[1].state() ==
                                               v1::RANK_PROCESS_STATE_EXITED; }));
  v1::RankStatus failed = launcher.Statuses()[1];
  EXPECT_EQ(failed.world_rank(), 1);
  EXPECT_EQ(failed.exit_code(), 5);
  EXPECT_THAT(failed.log_tail(), HasSubstr("rank 1 failing"));
  EXPECT_FALSE(failed.stopped_by_agent());

  for (int i = 0; i < 3; ++i) launcher.Reconcile(attempt1);  // still wanted: kept, not rerun
  launcher.Poll();
  ASSERT_EQ(launcher.tracked(), 2u);
  EXPECT_EQ(launcher.Statuses()[1].pid(), failed.pid());
  const std::string log1 = options_.log_dir + "/j/attempt-1/rank-1.log";
  EXPECT_EQ(ReadFile(log1).find("argv"), ReadFile(log1).rfind("argv"));  // started once

  // The controller moves on to attempt 2: attempt 1 rank 0 is stopped, rank 1 forgotten.
  launcher.Reconcile({Launch("j", 2, 0, 2), Launch("j", 2, 1, 2)});
  std::vector<v1::RankStatus> s = launcher.Statuses();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].attempt(), 1);
  EXPECT_TRUE(s[0].stopped_by_agent());
  EXPECT_EQ(s[1].attempt(), 2);
  EXPECT_EQ(s[2].attempt(), 2);
  EXPECT_TRUE(PollUntil(launcher, [&] {
    return LogSays(options_.log_dir + "/j/attempt-2/rank-1.log", "rank 1 failing");
  }));
}

TEST_F(RankLauncherTest, UnwantedRankIsStoppedReportedThenForgotten) {
  RankLauncher launcher(options_);
  launcher.Reconcile({Launch("j", 1, 0, 1)});
  const std::string log = options_.log_dir + "/j/attempt-1/rank-0.log";
  ASSERT_TRUE(PollUntil(launcher, [&] { return LogSays(log, "ready"); }));
  const auto start = std::chrono::steady_clock::now();
  launcher.Reconcile({});
  ASSERT_EQ(launcher.tracked(), 1u);
  EXPECT_EQ(launcher.Statuses()[0].state(), v1::RANK_PROCESS_STATE_RUNNING);
  EXPECT_TRUE(launcher.Statuses()[0].stopped_by_agent());
  ASSERT_TRUE(PollUntil(launcher, [&] { return launcher.AllExited(); }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));  // SIGINT

  launcher.Reconcile({});  // its exit has not been reported yet: kept
  ASSERT_EQ(launcher.tracked(), 1u);
  std::vector<v1::RankStatus> s = launcher.Statuses();
  EXPECT_EQ(s[0].state(), v1::RANK_PROCESS_STATE_EXITED);
  EXPECT_EQ(s[0].exit_code(), -1);
  EXPECT_EQ(s[0].signal(), SIGINT);  // ends at once: no checkpoint of a run that is over
  EXPECT_TRUE(s[0].stopped_by_agent());
  launcher.Reconcile({});  // reported: forgotten
  EXPECT_EQ(launcher.tracked(), 0u);
  EXPECT_TRUE(launcher.Statuses().empty());

  launcher.Reconcile({Launch("j", 1, 0, 1)});  // wanted again: never started twice
  EXPECT_EQ(launcher.tracked(), 0u);
}

TEST_F(RankLauncherTest, StopAllTerminatesEveryRank) {
  RankLauncher launcher(options_);
  launcher.Reconcile({Launch("a", 1, 0, 1), Launch("b", 1, 0, 2)});
  ASSERT_TRUE(PollUntil(launcher, [&] {
    return LogSays(options_.log_dir + "/a/attempt-1/rank-0.log", "ready") &&
           LogSays(options_.log_dir + "/b/attempt-1/rank-0.log", "ready");
  }));
  EXPECT_FALSE(launcher.AllExited());
  launcher.StopAll();
  ASSERT_TRUE(PollUntil(launcher, [&] { return launcher.AllExited(); }));
  for (const v1::RankStatus& s : launcher.Statuses()) {
    EXPECT_EQ(s.signal(), SIGTERM);
    EXPECT_TRUE(s.stopped_by_agent());
  }
}

TEST_F(RankLauncherTest, UnstartableRanksExit127WithTheReason) {
  options_.rank_binary = dir_ + "/missing-rank";
  RankLauncher launcher(options_);
  launcher.Reconcile({Launch("..", 1, 0, 1), Launch("j", 0, 0, 1), Launch("j", 1, 0, 1),
                      Launch("j/x", 1, 0, 1), Launch("k", 1, 2, 2)});
  ASSERT_TRUE(PollUntil(launcher, [&] { return launcher.AllExited(); }));
  std::vector<v1::RankStatus> s = launcher.Statuses();
  ASSERT_EQ(s.size(), 5u);
  for (const v1::RankStatus& st : s) {
    EXPECT_EQ(st.state(), v1::RANK_PROCESS_STATE_EXITED);
    EXPECT_EQ(st.exit_code(), 127);
  }
  EXPECT_EQ(s[0].job_id(), "..");
  EXPECT_THAT(s[0].log_tail(), HasSubstr("job_id '..' is not a job id"));
  EXPECT_THAT(s[1].log_tail(), HasSubstr("attempt 0"));
  EXPECT_THAT(s[2].log_tail(), HasSubstr("cannot execute " + options_.rank_binary));
  EXPECT_THAT(s[3].log_tail(), HasSubstr("job_id 'j/x'"));
  EXPECT_THAT(s[4].log_tail(), HasSubstr("world_rank 2 and world_size 2"));
  EXPECT_EQ(launcher.Logs().size(), 1u);  // the invalid one has no log
}

TEST(FindRankLogsTest, FindsTheRankLogsOfTheLayoutModifiedSinceTheCutoff) {
  std::string root = ::testing::TempDir() + "/find_rank_logs.XXXXXX";
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  auto write = [&](const std::string& rel) {
    const std::string path = root + "/" + rel;
    std::filesystem::create_directories(path.substr(0, path.rfind('/')));
    std::ofstream out(path);
    out << "x\n";
    ASSERT_TRUE(out.good()) << path;  // "bad id!" has a space: no shell may split it
  };
  for (const char* rel : {"job-a/attempt-1/rank-0.log", "job-a/attempt-1/rank-12.log",
                          "job-a/attempt-2/rank-0.log", "job-b/attempt-3/rank-1.log",
                          "job-a/attempt-03/rank-0.log", "job-a/attempt-0/rank-0.log",
                          "job-a/attempt-1/rank-01.log", "job-a/attempt-1/rank-x.log",
                          "job-a/attempt-1/rank-2.log.1", "job-a/attempt-1/notes.txt",
                          "job-a/other/rank-0.log", "bad id!/attempt-1/rank-0.log",
                          "job-old/attempt-1/rank-0.log"}) {
    write(rel);
  }
  std::filesystem::create_directories(root + "/job-a/attempt-1/rank-5.log");  // a dir
  const std::string old = root + "/job-old/attempt-1/rank-0.log";
  const struct timeval past[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(utimes(old.c_str(), past), 0);

  std::vector<RankLog> found = FindRankLogs(root, /*modified_since_unix_s=*/2000);
  std::vector<std::string> got;
  for (const RankLog& l : found) {
    got.push_back(l.key.ToString() + " @ " + l.path.substr(root.size()));
  }
  EXPECT_THAT(got, ElementsAre("job job-a attempt 1 rank 0 @ /job-a/attempt-1/rank-0.log",
                               "job job-a attempt 1 rank 12 @ /job-a/attempt-1/rank-12.log",
                               "job job-a attempt 2 rank 0 @ /job-a/attempt-2/rank-0.log",
                               "job job-b attempt 3 rank 1 @ /job-b/attempt-3/rank-1.log"));
  EXPECT_EQ(FindRankLogs(root, 0).size(), 5u);  // with the old one
  EXPECT_TRUE(FindRankLogs(root + "/missing", 0).empty());
}

}  // namespace
}  // namespace dhp::worker
