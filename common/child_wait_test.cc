#include "common/child_wait.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

namespace dhp {
namespace {

using namespace std::chrono_literals;

pid_t Child(int exit_code, std::chrono::milliseconds sleep) {
  const pid_t pid = fork();
  if (pid == 0) {
    usleep(static_cast<useconds_t>(sleep.count() * 1000));
    _exit(exit_code);
  }
  return pid;
}

TEST(ChildWaitTest, ExitCodesInOrder) {
  const std::vector<pid_t> pids = {Child(3, 50ms), Child(0, 0ms), Child(7, 10ms)};
  EXPECT_EQ(WaitForChildren(pids, 10s), (std::vector<int>{3, 0, 7}));
}

TEST(ChildWaitTest, StragglersAreKilledAndReapedAfterTheLimit) {
  const pid_t slow = Child(0, 60s);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(WaitForChildren({Child(5, 0ms), slow}, 200ms), (std::vector<int>{5, -1}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(kill(slow, 0), -1);  // reaped: the pid no longer exists
}

TEST(ChildWaitTest, ASignalIsMinusOne) {
  const pid_t pid = Child(0, 60s);
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitForChildren({pid}, 10s), (std::vector<int>{-1}));
}

}  // namespace
}  // namespace dhp
