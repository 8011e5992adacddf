#include "common/call_pool.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "common/test_gate.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

using namespace std::chrono_literals;

TEST(CallPoolTest, RunsBlockingTasksSideBySideAndRefusesPastTheBound) {
  CallPool pool("test", 3);
  Gate gate;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.TryRun([&] { gate.Block(); }));
  ASSERT_TRUE(gate.WaitBlocked(3));  // three at once: each got its own thread
  EXPECT_EQ(pool.Threads(), 3u);
  std::atomic<bool> ran{false};
  EXPECT_FALSE(pool.TryRun([&] { ran = true; }));  // all busy at the bound: refused, not queued
  gate.Release();
  pool.Stop();
  EXPECT_FALSE(ran);
}

TEST(CallPoolTest, IdleThreadsAreReusedRatherThanNewOnesStarted) {
  CallPool pool("test", 0);
  std::mutex mu;
  std::set<std::thread::id> ids;
  for (int i = 0; i < 200; ++i) {
    std::atomic<bool> done{false};
    ASSERT_TRUE(pool.TryRun([&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      done = true;
    }));
    while (!done) std::this_thread::sleep_for(100us);
  }
  // One task at a time: the first thread takes each, once it is waiting again.
  EXPECT_LE(pool.Threads(), 2u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
  pool.Stop();
}

TEST(CallPoolTest, StopWaitsForRunningTasksAndRefusesLaterOnes) {
  CallPool pool("test", 2);
  std::atomic<int> finished{0};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(pool.TryRun([&] {
      std::this_thread::sleep_for(100ms);
      ++finished;
    }));
  }
  pool.Stop();
  EXPECT_EQ(finished.load(), 2);
  EXPECT_FALSE(pool.TryRun([&] { ++finished; }));
  pool.Stop();  // idempotent
  EXPECT_EQ(finished.load(), 2);
}

}  // namespace
}  // namespace dhp
