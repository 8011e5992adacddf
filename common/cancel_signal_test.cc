#include "common/cancel_signal.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace dhp {
namespace {

TEST(CancelSignalTest, TheHandlerRunsOnceOnCancel) {
  CancelSignal signal;
  int runs = 0;
  signal.OnCancel([&] { ++runs; });
  EXPECT_EQ(runs, 0);
  EXPECT_FALSE(signal.cancelled());
  signal.Cancel();
  signal.Cancel();
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(signal.cancelled());
}

TEST(CancelSignalTest, AHandlerRegisteredAfterCancelRunsAtOnce) {
  CancelSignal signal;
  signal.Cancel();
  int runs = 0;
  signal.OnCancel([&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

TEST(CancelSignalTest, NothingRunsAfterDetach) {
  CancelSignal signal;
  int runs = 0;
  signal.OnCancel([&] { ++runs; });
  signal.Detach();
  signal.Cancel();
  signal.OnCancel([&] { ++runs; });  // refused: the work has ended
  EXPECT_EQ(runs, 0);
  EXPECT_TRUE(signal.cancelled());
}

TEST(CancelSignalTest, ALaterHandlerReplacesAnEarlierOne) {
  CancelSignal signal;
  int first = 0, second = 0;
  signal.OnCancel([&] { ++first; });
  signal.OnCancel([&] { ++second; });
  signal.Cancel();
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
}

TEST(CancelSignalTest, TheHandlerMayDetachOnItsOwnThread) {
  CancelSignal signal;
  int runs = 0;
  signal.OnCancel([&] {
    ++runs;
    signal.Detach();  // the work it ends calls back into the signal
  });
  signal.Cancel();
  EXPECT_EQ(runs, 1);
}

TEST(CancelSignalTest, DetachOnAnotherThreadWaitsForARunningHandler) {
  CancelSignal signal;
  std::promise<void> started;
  std::atomic<bool> finished{false};
  signal.OnCancel([&] {
    started.set_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    finished = true;
  });
  std::thread canceller([&] { signal.Cancel(); });
  started.get_future().wait();
  signal.Detach();  // returns only once the handler has
  EXPECT_TRUE(finished.load());
  canceller.join();
}

}  // namespace
}  // namespace dhp
