// The in-flight registry on its own: registration, the oldest entry, descriptions, scopes and
// concurrent use.
#include "worker/comm/inflight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace dhp::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

InFlightOp Op(std::string group, std::string op, int64_t call, Clock::time_point start,
              int peer = -1) {
  InFlightOp o;
  o.group = std::move(group);
  o.op = std::move(op);
  o.call = call;
  o.peer = peer;
  o.start = start;
  return o;
}

TEST(InFlightTest, DescribeNamesOpGroupCallAndDuration) {
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(Describe(Op("text.tp0", "all_reduce", 57, t0), t0 + milliseconds(31400)),
            "all_reduce on group text.tp0 (call 57) for 31 s");
  EXPECT_EQ(Describe(Op("vision.sp0", "all_to_all", 3, t0), t0 + milliseconds(2540)),
            "all_to_all on group vision.sp0 (call 3) for 2.5 s");
  EXPECT_EQ(Describe(Op("world", "recv", 4, t0, 1), t0 + seconds(12)),
            "recv from rank 1 on group world (call 4) for 12 s");
  EXPECT_EQ(Describe(Op("world", "send", 2, t0, 3), t0),
            "send to rank 3 on group world (call 2) for 0.0 s");
  // A `now` before the start (clock read on another thread first) is not negative.
  EXPECT_EQ(Describe(Op("g", "barrier", 1, t0), t0 - seconds(1)),
            "barrier on group g (call 1) for 0.0 s");
}

TEST(InFlightTest, OldestIsTheEarliestStartAndEndRemoves) {
  InFlightRegistry reg;
  EXPECT_FALSE(reg.Oldest().has_value());
  const Clock::time_point t0 = Clock::now();
  InFlightRegistry::Token a = reg.Begin(Op("text.tp0", "all_reduce", 7, t0 + seconds(2)));
  InFlightRegistry::Token b = reg.Begin(Op("vision", "all_gather", 1, t0));
  InFlightRegistry::Token c = reg.Begin(Op("world", "barrier", 3, t0 + seconds(5)));
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(reg.size(), 3u);
  ASSERT_TRUE(reg.Oldest().has_value());
  EXPECT_EQ(reg.Oldest()->group, "vision");
  EXPECT_EQ(reg.Oldest()->op, "all_gather");

  std::vector<InFlightOp> all = reg.Snapshot();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].group, "vision");
  EXPECT_EQ(all[1].group, "text.tp0");
  EXPECT_EQ(all[2].group, "world");

  reg.End(b);
  EXPECT_EQ(reg.Oldest()->group, "text.tp0");
  EXPECT_EQ(reg.Oldest()->call, 7);
  reg.End(b);  // twice: ignored
  reg.End(0);  // "nothing": ignored
  reg.End(a);
  reg.End(c);
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_FALSE(reg.Oldest().has_value());
}

TEST(InFlightTest, EqualStartsKeepBeginOrder) {
  InFlightRegistry reg;
  const Clock::time_point t0 = Clock::now();
  reg.Begin(Op("first", "all_reduce", 1, t0));
  reg.Begin(Op("second", "all_reduce", 1, t0));
  EXPECT_EQ(reg.Oldest()->group, "first");
}

TEST(InFlightTest, ScopeRegistersForItsLifetime) {
  InFlightRegistry reg;
  {
    const Clock::time_point before = Clock::now();
    InFlightScope scope(&reg, "text.tp0", "broadcast", 2);
    std::optional<InFlightOp> op = reg.Oldest();
    ASSERT_TRUE(op.has_value());
    EXPECT_EQ(op->group, "text.tp0");
    EXPECT_EQ(op->op, "broadcast");
    EXPECT_EQ(op->call, 2);
    EXPECT_EQ(op->peer, -1);
    EXPECT_GE(op->start, before);
    EXPECT_LE(op->start, Clock::now());
  }
  EXPECT_EQ(reg.size(), 0u);
  InFlightScope noop(nullptr, "g", "barrier", 1);  // no registry: nothing to do
}

TEST(InFlightTest, GlobalIsOneRegistry) {
  EXPECT_EQ(&InFlightRegistry::Global(), &InFlightRegistry::Global());
  const size_t before = InFlightRegistry::Global().size();
  {
    InFlightScope scope(&InFlightRegistry::Global(), "g", "all_reduce", 1);
    EXPECT_EQ(InFlightRegistry::Global().size(), before + 1);
  }
  EXPECT_EQ(InFlightRegistry::Global().size(), before);
}

TEST(InFlightTest, ConcurrentBeginEndAndReads) {
  InFlightRegistry reg;
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) {
      std::optional<InFlightOp> op = reg.Oldest();
      if (op.has_value()) {
        EXPECT_FALSE(op->group.empty());
      }
      (void)reg.Snapshot();
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&reg, t] {
      for (int i = 1; i <= 2000; ++i) {
        InFlightScope scope(&reg, "g" + std::to_string(t), "all_reduce", i);
      }
    });
  }
  for (std::thread& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(reg.size(), 0u);
}

}  // namespace
}  // namespace dhp::comm
