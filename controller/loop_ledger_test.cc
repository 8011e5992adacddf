#include "controller/loop_ledger.h"

#include <chrono>

#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using namespace std::chrono_literals;
using Clock = LoopLedger::Clock;

// A window split over the spans that overlap it, the uncovered rest as unrecorded.
TEST(LoopLedgerTest, AWindowIsSplitByTheWorkThatRanInIt) {
  LoopLedger ledger;
  const Clock::time_point t0 = Clock::now();
  ledger.Record(LoopLedger::kCalls, t0, t0 + 2ms);             // before the window
  ledger.Record(LoopLedger::kPersist, t0 + 3ms, t0 + 15ms);    // starts before it
  ledger.Record(LoopLedger::kCalls, t0 + 16ms, t0 + 17ms);
  ledger.Record(LoopLedger::kCalls, t0 + 18ms, t0 + 20ms);
  ledger.Record(LoopLedger::kScrape, t0 + 25ms, t0 + 40ms);    // ends after it
  const LoopLedger::Split s = ledger.SplitWindow(t0 + 10ms, t0 + 30ms);
  EXPECT_NEAR(s[LoopLedger::kPersist], 0.005, 1e-9);
  EXPECT_NEAR(s[LoopLedger::kCalls], 0.003, 1e-9);
  EXPECT_NEAR(s[LoopLedger::kScrape], 0.005, 1e-9);
  EXPECT_EQ(s[LoopLedger::kCheck], 0);
  EXPECT_EQ(s[LoopLedger::kOther], 0);
  EXPECT_NEAR(s[LoopLedger::kUnrecorded], 0.007, 1e-9);  // 20 ms less 13 covered
  EXPECT_EQ(ledger.SplitWindow(t0 + 30ms, t0 + 10ms)[LoopLedger::kUnrecorded], 0);
}

// Once the ring wraps, what it no longer holds is unrecorded, not misattributed.
TEST(LoopLedgerTest, SpansOverwrittenCountAsUnrecorded) {
  LoopLedger ledger(2);
  const Clock::time_point t0 = Clock::now();
  ledger.Record(LoopLedger::kCheck, t0, t0 + 10ms);
  ledger.Record(LoopLedger::kCalls, t0 + 10ms, t0 + 11ms);
  ledger.Record(LoopLedger::kCalls, t0 + 12ms, t0 + 13ms);
  const LoopLedger::Split s = ledger.SplitWindow(t0, t0 + 20ms);
  EXPECT_EQ(s[LoopLedger::kCheck], 0);
  EXPECT_NEAR(s[LoopLedger::kCalls], 0.002, 1e-9);
  EXPECT_NEAR(s[LoopLedger::kUnrecorded], 0.018, 1e-9);
}

TEST(LoopLedgerTest, BusyTimeIsTakenOnce) {
  LoopLedger ledger;
  const Clock::time_point t0 = Clock::now();
  ledger.Record(LoopLedger::kCalls, t0, t0 + 3ms);
  ledger.Record(LoopLedger::kCalls, t0 + 4ms, t0 + 5ms);
  ledger.Record(LoopLedger::kOther, t0 + 5ms, t0 + 7ms);
  std::array<double, LoopLedger::kWorkCount> busy = ledger.TakeBusy();
  EXPECT_NEAR(busy[LoopLedger::kCalls], 0.004, 1e-9);
  EXPECT_NEAR(busy[LoopLedger::kOther], 0.002, 1e-9);
  EXPECT_EQ(busy[LoopLedger::kPersist], 0);
  busy = ledger.TakeBusy();
  EXPECT_EQ(busy[LoopLedger::kCalls], 0);
  EXPECT_EQ(busy[LoopLedger::kOther], 0);
  EXPECT_STREQ(LoopLedger::Name(LoopLedger::kUnrecorded), "unrecorded");
  EXPECT_STREQ(LoopLedger::Name(LoopLedger::kPersist), "persist");
}

}  // namespace
}  // namespace dhp::controller
