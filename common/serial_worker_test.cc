#include "common/serial_worker.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dhp {
namespace {

using namespace std::chrono_literals;

TEST(SerialWorkerTest, RunsTasksInOrderOnOneThreadOtherThanTheCaller) {
  SerialWorker worker("test");
  std::vector<int> order;
  std::mutex mu;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 100; ++i) {
    worker.Post([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  worker.Stop();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  for (const std::thread::id& id : threads) {
    EXPECT_EQ(id, threads[0]);
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(SerialWorkerTest, StopDrainsTheQueueAndLaterPostsRunOnTheCaller) {
  SerialWorker worker("test");
  std::atomic<int> done{0};
  worker.Post([&] {
    std::this_thread::sleep_for(100ms);  // the rest queue up behind this one
    ++done;
  });
  for (int i = 0; i < 5; ++i) worker.Post([&] { ++done; });
  EXPECT_GE(worker.Pending(), 5u);
  worker.Stop();
  EXPECT_EQ(done.load(), 6);
  EXPECT_EQ(worker.Pending(), 0u);
  std::thread::id ran_on;
  worker.Post([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  worker.Stop();  // idempotent
}

}  // namespace
}  // namespace dhp
