// Elastic jobs in the Scheduler: JobDemand::alternatives (layouts tried after the job's own,
// the last one being what it waits and reserves as).
#include <string>
#include <vector>

#include "controller/scheduler.h"
#include "controller/scheduler_test_util.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using test::C;
using test::Cpu;
using test::Job;

// Layouts of `world` ranks, then each alternative world size, all without groups.
JobDemand Elastic(const std::string& id, std::vector<int> worlds, int priority = 0,
                  int64_t seq = 0) {
  JobDemand j = Job(id, worlds[0], {}, priority, seq);
  for (size_t k = 1; k < worlds.size(); ++k) {
    j.alternatives.push_back(Job(id, worlds[k], {}, priority, seq));
  }
  return j;
}

TEST(SchedulerElasticTest, TakesTheLargestLayoutThatFitsTheFreeSlots) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  s.UpsertNode(Cpu("b", 2));
  ASSERT_EQ(s.Schedule({Job("run", 3)}).placed.size(), 1u);  // a has 1 free, b 2
  const ScheduleResult r = s.Schedule({Elastic("e", {8, 4, 2})});
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].layout, 2);  // 8 never fits; 4 does not fit 3 free slots; 2 does
  EXPECT_EQ(r.placed[0].ranks.size(), 2u);
  EXPECT_TRUE(r.waiting.empty());

  Scheduler empty;
  empty.UpsertNode(Cpu("a", 4));
  empty.UpsertNode(Cpu("b", 4));
  const ScheduleResult all = empty.Schedule({Elastic("e", {8, 4, 2})});
  ASSERT_EQ(all.placed.size(), 1u);
  EXPECT_EQ(all.placed[0].layout, 0);
  EXPECT_EQ(all.placed[0].ranks.size(), 8u);
}

TEST(SchedulerElasticTest, WaitsAndReservesAsItsSmallestLayout) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  ASSERT_EQ(s.Schedule({Job("run", 3)}).placed.size(), 1u);  // 1 slot free
  // e waits for 2 slots (its smallest layout), not 4, and holds the free slot for it: the
  // one-rank job behind it may not take that slot.
  const ScheduleResult r =
      s.Schedule({Elastic("e", {4, 2}, 0, 1), Job("small", 1, {}, 0, 2)});
  EXPECT_TRUE(r.placed.empty());
  ASSERT_EQ(r.waiting.count("e"), 1u);
  EXPECT_NE(r.waiting.at("e").find("waiting for 2 free CPU slots"), std::string::npos)
      << r.waiting.at("e");
  EXPECT_NE(r.waiting.at("small").find("behind job e"), std::string::npos)
      << r.waiting.at("small");
  // When the running job ends, all 4 slots are free: e takes its largest layout.
  s.Release("run");
  const ScheduleResult after =
      s.Schedule({Elastic("e", {4, 2}, 0, 1), Job("small", 1, {}, 0, 2)});
  ASSERT_EQ(after.placed.size(), 1u);
  EXPECT_EQ(after.placed[0].job_id, "e");
  EXPECT_EQ(after.placed[0].layout, 0);
  EXPECT_EQ(after.placed[0].ranks,
            (std::vector<SlotRef>{C("a", 0), C("a", 1), C("a", 2), C("a", 3)}));
}

TEST(SchedulerElasticTest, FeasibleWhenAnyLayoutCouldRun) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  EXPECT_TRUE(s.CheckFeasible(Elastic("e", {16, 8, 4})).ok());
  const absl::Status none = s.CheckFeasible(Elastic("e", {16, 8}));
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.message().find("needs 8 rank slots"), std::string::npos) << none;
}

}  // namespace
}  // namespace dhp::controller
