#include "controller/phase_timer.h"

#include <chrono>

#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

TEST(PhaseTimerTest, LapsAreConsecutiveAndDescribedInOrder) {
  PhaseTimer timer;
  const auto start = std::chrono::steady_clock::now();
  timer.Add("first", start);  // whatever ran before `start`: ignored below
  timer.Add("nodes", start + std::chrono::microseconds(3100));
  timer.Add("schedule", start + std::chrono::microseconds(123400));
  ASSERT_EQ(timer.laps().size(), 3u);
  EXPECT_NEAR(timer.laps()[1].second, 0.0031, 1e-9);
  EXPECT_NEAR(timer.laps()[2].second, 0.1203, 1e-9);
  EXPECT_NEAR(timer.total() - timer.laps()[0].second, 0.1234, 1e-9);
  const std::string text = timer.Describe();
  EXPECT_NE(text.find(", nodes 3.1 ms, schedule 120.3 ms)"), std::string::npos) << text;
}

TEST(PhaseTimerTest, EmptyTimerDescribesZero) {
  EXPECT_EQ(PhaseTimer().Describe(), "0.0 ms ()");
  EXPECT_EQ(PhaseTimer().total(), 0);
}

}  // namespace
}  // namespace dhp::controller
