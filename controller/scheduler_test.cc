// Tests the Scheduler with exact placements and reasons: gang placement, same-node groups,
// packing onto the fewest nodes, priority and FIFO order, backfill behind a reservation,
// Reserve/Release, unschedulable nodes, GPU before CPU, memory. Demands of real specs:
// scheduler_demand_test.cc.
#include "controller/scheduler.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "controller/scheduler_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using namespace test;  // NOLINT: the helpers are the tests' vocabulary
TEST(SchedulerTest, GangPlacesAllRanksOrNothing) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  ASSERT_TRUE(s.Reserve("r", {C("a", 0)}).ok());
  ASSERT_EQ(s.free_slots(), 3);

  ScheduleResult r = s.Schedule({Job("j", 4)});
  EXPECT_THAT(r.placed, IsEmpty());
  EXPECT_THAT(r.waiting,
              ElementsAre(Pair("j",
                               "waiting for 4 free CPU slots (cluster has 3 free); holds a "
                               "reservation of 4 CPU slots on 1 node (3 free now) until job "
                               "r finishes")));
  // No partial allocation, and the reservation ends with the pass.
  EXPECT_THAT(s.AllocationOf("j"), IsEmpty());
  EXPECT_EQ(s.free_slots(), 3);
  EXPECT_EQ(s.used_slots(), 1);

  s.Release("r");
  r = s.Schedule({Job("j", 4)});
  EXPECT_THAT(PlacementOf(r, "j"), ElementsAre(C("a", 0), C("a", 1), C("a", 2), C("a", 3)));
  EXPECT_THAT(r.waiting, IsEmpty());
  EXPECT_EQ(s.free_slots(), 0);
}

TEST(SchedulerTest, SameNodeGroupMustFitOneNode) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 2));
  s.UpsertNode(Cpu("b", 2));
  const JobDemand tp4 = Job("tp4", 4, {{0, 1, 2, 3}});
  absl::Status st = s.CheckFeasible(tp4);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "needs 4 rank slots with a tensor-parallel group of 4 on one node; the cluster has "
            "4 slots and its largest node 2");

  // Two groups of 2 fit, one per node.
  const JobDemand tp2 = Job("tp2", 4, {{0, 1}, {2, 3}});
  EXPECT_TRUE(s.CheckFeasible(tp2).ok());
  ScheduleResult r = s.Schedule({tp4, tp2});
  EXPECT_THAT(PlacementOf(r, "tp2"), ElementsAre(C("a", 0), C("a", 1), C("b", 0), C("b", 1)));
  EXPECT_THAT(r.waiting,
              ElementsAre(Pair("tp4",
                               "cannot run on this cluster: needs 4 rank slots with a "
                               "tensor-parallel group of 4 on one node; the cluster has 4 "
                               "slots and its largest node 2")));

  s.UpsertNode(Cpu("c", 2));
  st = s.CheckFeasible(Job("tp4x2", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(st.message(),
            "needs 8 rank slots with tensor-parallel groups of 4 on one node; the cluster has 6 "
            "slots and its largest node 2");
}

TEST(SchedulerTest, CheckFeasibleReportsGroupsThatDoNotPack) {
  Scheduler s;
  for (const char* id : {"a", "b", "c"}) s.UpsertNode(Gpu(id, 4));
  // 12 slots, nodes of 4, but four groups of 3 need four nodes.
  const absl::Status st =
      s.CheckFeasible(Job("j", 12, {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}}));
  EXPECT_EQ(st.message(),
            "needs 12 rank slots with tensor-parallel groups of 3 on one node; the cluster has 12 "
            "slots and its largest node 4, onto which the groups do not pack");
  EXPECT_TRUE(s.CheckFeasible(Job("k", 12, {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}})).ok());
}

TEST(SchedulerTest, CheckFeasibleWithoutNodesIsOkAndRejectsMalformedDemands) {
  Scheduler s;
  EXPECT_TRUE(s.CheckFeasible(Job("huge", 100000, {})).ok());  // cluster unknown yet
  EXPECT_EQ(s.CheckFeasible(Job("bad", 2, {{0, 2}})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.CheckFeasible(Job("bad", 2, {{0}, {0, 1}})).message(),
            "job bad: same_node_groups: rank 0 is listed twice");
  EXPECT_EQ(s.CheckFeasible(Job("zero", 0)).code(), absl::StatusCode::kInvalidArgument);

  ScheduleResult r = s.Schedule({Job("j", 1), Job("bad", 2, {{0, 2}})});
  EXPECT_THAT(r.waiting,
              ElementsAre(Pair("bad",
                               "invalid demand: job bad: same_node_groups: rank 2 is out "
                               "of range [0, 2)"),
                          Pair("j", "waiting for nodes: none has registered yet")));
}

TEST(SchedulerTest, PacksOntoTheFewestNodes) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  s.UpsertNode(Cpu("b", 4));
  ASSERT_TRUE(s.Reserve("x", {C("b", 0), C("b", 1)}).ok());
  // The half-used node b, not the empty a; then a once b is full.
  ScheduleResult r = s.Schedule({Job("pair", 2, {{0, 1}}, 0, 1), Job("two", 2, {}, 0, 2)});
  EXPECT_THAT(PlacedIds(r), ElementsAre("pair", "two"));
  EXPECT_THAT(PlacementOf(r, "pair"), ElementsAre(C("b", 2), C("b", 3)));
  EXPECT_THAT(PlacementOf(r, "two"), ElementsAre(C("a", 0), C("a", 1)));
  EXPECT_EQ(s.AllocationOf("two"), PlacementOf(r, "two"));
}

TEST(SchedulerTest, LargestGroupsFirstAndConsecutiveGpus) {
  Scheduler s;
  s.UpsertNode(Gpu("a", 2));
  s.UpsertNode(Gpu("b", 4));
  s.UpsertNode(Gpu("c", 8));
  // The group {1, 2, 3} goes first, best fit onto b; rank 0 follows onto b (already used).
  ScheduleResult r = s.Schedule({Job("j", 4, {{0}, {1, 2, 3}})});
  EXPECT_THAT(PlacementOf(r, "j"), ElementsAre(G("b", 3), G("b", 0), G("b", 1), G("b", 2)));
  // Eight single ranks: one node (c), consecutive GPU indices in rank order.
  r = s.Schedule({Job("k", 8)});
  EXPECT_THAT(PlacementOf(r, "k"), ElementsAre(G("c", 0), G("c", 1), G("c", 2), G("c", 3),
                                               G("c", 4), G("c", 5), G("c", 6), G("c", 7)));
}

TEST(SchedulerTest, PriorityThenFifo) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 2));
  ScheduleResult r = s.Schedule({Job("low", 1, {}, 0, 1), Job("mid-late", 1, {}, 1, 5),
                                 Job("high", 1, {}, 5, 9), Job("mid-early", 1, {}, 1, 2)});
  EXPECT_THAT(PlacedIds(r), ElementsAre("high", "mid-early"));
  EXPECT_THAT(PlacementOf(r, "high"), ElementsAre(C("a", 0)));
  EXPECT_THAT(PlacementOf(r, "mid-early"), ElementsAre(C("a", 1)));
  // mid-late is the head: it waits for the job on the first slot it would take.
  EXPECT_THAT(r.waiting,
              ElementsAre(Pair("low", "waiting for 1 free CPU slot (cluster has 0 free)"),
                          Pair("mid-late",
                               "waiting for 1 free CPU slot (cluster has 0 free); "
                               "holds a reservation of 1 CPU slot on 1 node (0 free "
                               "now) until job high finishes")));
}

TEST(SchedulerTest, BackfillNeverTakesTheHeadsReservation) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  s.UpsertNode(Cpu("c", 1));
  ASSERT_TRUE(s.Reserve("r", {C("a", 0), C("a", 1)}).ok());
  const std::vector<JobDemand> queue = {Job("head", 4, {{0, 1, 2, 3}}, 10, 1),
                                        Job("small-1", 1, {}, 5, 2), Job("small-2", 1, {}, 5, 3),
                                        Job("pair", 2, {{0, 1}}, 1, 4), Job("big", 8, {}, 0, 5)};
  ScheduleResult r = s.Schedule(queue);
  // small-1 fits outside the reservation (a:0-3): placed, backfilled.
  EXPECT_THAT(PlacedIds(r), ElementsAre("small-1*"));
  EXPECT_THAT(PlacementOf(r, "small-1"), ElementsAre(C("c", 0)));
  // small-2 and pair would only fit on a:2-3, inside the reservation: they wait.
  EXPECT_THAT(
      r.waiting,
      ElementsAre(Pair("big",
                       "cannot run on this cluster: needs 8 rank slots; the cluster has 5 slots "
                       "and its largest node 4"),
                  Pair("head",
                       "waiting for 4 free CPU slots with a tensor-parallel group of 4 on one "
                       "node (cluster has 3 free); holds a reservation of 4 CPU slots on 1 node "
                       "(2 free now) until job r finishes"),
                  Pair("pair", "behind higher-priority job head, which holds a reservation"),
                  Pair("small-2", "behind higher-priority job head, which holds a reservation")));
  EXPECT_EQ(s.free_slots(), 2);  // the reservation lasts one pass

  // r finishes: the head runs where it reserved; small-2 is the next head (waits for small-1,
  // the best fit), and pair waits for slots.
  s.Release("r");
  r = s.Schedule({queue[0], queue[2], queue[3]});
  EXPECT_THAT(PlacedIds(r), ElementsAre("head"));
  EXPECT_THAT(PlacementOf(r, "head"), ElementsAre(C("a", 0), C("a", 1), C("a", 2), C("a", 3)));
  EXPECT_THAT(r.waiting,
              ElementsAre(Pair("pair",
                               "waiting for 2 free CPU slots with a tensor-parallel group of 2 "
                               "on one node (cluster has 0 free)"),
                          Pair("small-2",
                               "waiting for 1 free CPU slot (cluster has 0 free); holds a "
                               "reservation of 1 CPU slot on 1 node (0 free now) until job "
                               "small-1 finishes")));
}

TEST(SchedulerTest, BackfillBehindSamePriorityAndReservedSlotsInReason) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  s.UpsertNode(Cpu("b", 2));
  ASSERT_TRUE(s.Reserve("r", {C("a", 0)}).ok());
  ASSERT_TRUE(s.Reserve("q", {C("b", 0)}).ok());
  // wide (4 on one node) is the head and reserves a:0-3; one fits on b:1 outside it.
  ScheduleResult r =
      s.Schedule({Job("wide", 4, {{0, 1, 2, 3}}, 0, 1), Job("trio", 3, {{0, 1, 2}}, 0, 2),
                  Job("one", 1, {}, 0, 3), Job("two", 2, {{0, 1}}, 0, 4)});
  EXPECT_THAT(PlacedIds(r), ElementsAre("one*"));
  EXPECT_THAT(PlacementOf(r, "one"), ElementsAre(C("b", 1)));
  EXPECT_THAT(
      r.waiting,
      ElementsAre(Pair("trio",
                       "behind job wide (same priority, submitted earlier), which holds a "
                       "reservation"),
                  Pair("two",
                       "behind job wide (same priority, submitted earlier), which holds a "
                       "reservation"),
                  Pair("wide",
                       "waiting for 4 free CPU slots with a tensor-parallel group of 4 on one "
                       "node (cluster has 4 free, at most 3 on one node); holds a reservation "
                       "of 4 CPU slots on 1 node (3 free now) until job r finishes")));
}

TEST(SchedulerTest, ReserveReleaseRoundTripAndConflicts) {
  Scheduler s;
  s.UpsertNode(Gpu("g1", 8));
  EXPECT_EQ(s.total_slots(), 8);
  ASSERT_TRUE(s.Reserve("j", {G("g1", 2), G("g1", 3)}).ok());
  EXPECT_THAT(s.AllocationOf("j"), ElementsAre(G("g1", 2), G("g1", 3)));
  EXPECT_EQ(s.free_slots(), 6);
  EXPECT_TRUE(s.Reserve("j", {G("g1", 2), G("g1", 3)}).ok());  // the same again: OK

  const auto fails = [&](const std::string& job, const std::vector<SlotRef>& ranks) {
    const absl::Status st = s.Reserve(job, ranks);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    return std::string(st.message());
  };
  EXPECT_EQ(fails("k", {G("g1", 0), G("g1", 3)}), "reserve job k: slot g1 GPU 3: held by job j");
  EXPECT_EQ(fails("k", {G("nope", 0)}),
            "reserve job k: slot nope GPU 0: node nope is not registered");
  EXPECT_EQ(fails("k", {G("g1", 8)}), "reserve job k: slot g1 GPU 8: node g1 has 8 GPUs");
  EXPECT_EQ(fails("k", {C("g1", 0)}),
            "reserve job k: slot g1 CPU slot 0: node g1 offers GPUs, not CPU slots");
  EXPECT_EQ(fails("k", {G("g1", 0), G("g1", 0)}), "reserve job k: slot g1 GPU 0: listed twice");
  EXPECT_EQ(fails("j", {G("g1", 4)}),
            "reserve job j: it already holds 2 other slots; release them first");
  EXPECT_EQ(s.Reserve("k", {}).code(), absl::StatusCode::kInvalidArgument);
  // Failed reservations took nothing.
  EXPECT_EQ(s.free_slots(), 6);
  EXPECT_THAT(s.AllocationOf("k"), IsEmpty());

  // A restored placement is honoured by the next pass.
  ScheduleResult r = s.Schedule({Job("n", 6)});
  EXPECT_THAT(PlacementOf(r, "n"),
              ElementsAre(G("g1", 0), G("g1", 1), G("g1", 4), G("g1", 5), G("g1", 6), G("g1", 7)));
  s.Release("j");
  EXPECT_EQ(s.free_slots(), 2);
  EXPECT_THAT(s.AllocationOf("j"), IsEmpty());
  s.Release("j");  // no-op
  s.Release("never");
  EXPECT_EQ(s.free_slots(), 2);
  ASSERT_TRUE(s.Reserve("k", {G("g1", 3), G("g1", 2)}).ok());
  EXPECT_THAT(s.AllocationOf("k"), ElementsAre(G("g1", 3), G("g1", 2)));
  EXPECT_EQ(s.used_slots(), 8);
}

TEST(SchedulerTest, QueuedJobThatHoldsSlotsIsSkipped) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  ASSERT_TRUE(s.Reserve("running", {C("a", 0)}).ok());
  ScheduleResult r = s.Schedule({Job("running", 1), Job("new", 1), Job("new", 1)});
  EXPECT_THAT(PlacedIds(r), ElementsAre("new"));
  EXPECT_THAT(r.waiting, IsEmpty());
  EXPECT_EQ(s.free_slots(), 2);
}

TEST(SchedulerTest, UnschedulableNodeKeepsItsJobsButGetsNoNewOnes) {
  Scheduler s;
  s.UpsertNode(Gpu("a", 8));
  s.UpsertNode(Gpu("b", 8));
  ASSERT_TRUE(s.Reserve("x", {G("a", 0), G("a", 1)}).ok());
  NodeCapacity lost = Gpu("a", 8);
  lost.schedulable = false;
  s.UpsertNode(lost);
  EXPECT_THAT(s.AllocationOf("x"), ElementsAre(G("a", 0), G("a", 1)));
  EXPECT_EQ(s.free_slots(), 8);
  EXPECT_EQ(s.total_slots(), 16);

  // Best fit would pick a (6 free); it is not schedulable, so b.
  ScheduleResult r = s.Schedule({Job("four", 4, {}, 0, 1), Job("sixteen", 16, {}, 0, 2)});
  EXPECT_THAT(PlacementOf(r, "four"), ElementsAre(G("b", 0), G("b", 1), G("b", 2), G("b", 3)));
  EXPECT_THAT(r.waiting,
              ElementsAre(Pair("sixteen",
                               "waiting for 16 free GPU slots (cluster has 4 free); it does not "
                               "fit on the schedulable nodes even when they are empty (1 of 2 "
                               "nodes are not schedulable)")));
  EXPECT_TRUE(s.CheckFeasible(Job("sixteen", 16)).ok());  // it could run once a is back

  s.UpsertNode(Gpu("a", 8));  // back: its allocation is still there
  EXPECT_EQ(s.free_slots(), 10);
  r = s.Schedule({Job("six", 6)});
  EXPECT_THAT(PlacementOf(r, "six"),
              ElementsAre(G("a", 2), G("a", 3), G("a", 4), G("a", 5), G("a", 6), G("a", 7)));
}

TEST(SchedulerTest, RemovedNodeAndShrunkNode) {
  Scheduler s;
  s.UpsertNode(Cpu("a", 4));
  s.UpsertNode(Cpu("b", 4));
  ASSERT_TRUE(s.Reserve("old", {C("a", 1)}).ok());
  s.RemoveNode("a");
  EXPECT_EQ(s.node_count(), 1);
  EXPECT_EQ(s.total_slots(), 4);
  EXPECT_THAT(s.AllocationOf("old"), ElementsAre(C("a", 1)));  // until released
  s.UpsertNode(Cpu("a", 4));                                   // registered again: empty
  EXPECT_EQ(s.free_slots(), 8);
  ASSERT_TRUE(s.Reserve("new", {C("a", 1)}).ok());
  s.Release("old");  // must not free new's slot
  EXPECT_THAT(s.AllocationOf("new"), ElementsAre(C("a", 1)));
  EXPECT_EQ(s.free_slots(), 7);

  // b shrinks to 2 slots while slot 3 is held: it stays held until released, then goes.
  ASSERT_TRUE(s.Reserve("tail", {C("b", 3)}).ok());
  s.UpsertNode(Cpu("b", 2));
  EXPECT_EQ(s.total_slots(), 6);
  EXPECT_EQ(s.free_slots(), 5);
  EXPECT_EQ(s.used_slots(), 2);
  s.Release("tail");
  EXPECT_EQ(s.used_slots(), 1);
  EXPECT_EQ(s.free_slots(), 5);
  EXPECT_EQ(s.Reserve("x", {C("b", 3)}).message(),
            "reserve job x: slot b CPU slot 3: node b has 2 CPU slots");
}

TEST(SchedulerTest, GpuPreferredOverCpu) {
  Scheduler s;
  s.UpsertNode(Cpu("c", 8));
  s.UpsertNode(Gpu("g", 2));
  ScheduleResult r = s.Schedule({Job("first", 2, {}, 0, 1), Job("second", 2, {}, 0, 2),
                                 Job("third", 4, {{0, 1, 2, 3}}, 0, 3)});
  EXPECT_THAT(PlacementOf(r, "first"), ElementsAre(G("g", 0), G("g", 1)));
  EXPECT_THAT(PlacementOf(r, "second"), ElementsAre(C("c", 0), C("c", 1)));
  EXPECT_THAT(PlacementOf(r, "third"), ElementsAre(C("c", 2), C("c", 3), C("c", 4), C("c", 5)));
}

TEST(SchedulerTest, MemoryPerRank) {
  Scheduler s;
  s.UpsertNode(Gpu("small", 8, 24 * kGiB));
  absl::Status st = s.CheckFeasible(Job("j", 2, {}, 0, 0, 40 * kGiB));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "needs 40.0 GiB per rank; the largest device has 24.0 GiB");

  s.UpsertNode(Gpu("big", 4, 80 * kGiB));
  s.UpsertNode(Gpu("unknown", 2));  // memory not reported: not checked
  EXPECT_TRUE(s.CheckFeasible(Job("j", 2, {}, 0, 0, 40 * kGiB)).ok());
  EXPECT_EQ(s.CheckFeasible(Job("j8", 8, {}, 0, 0, 40 * kGiB)).message(),
            "needs 8 rank slots, 40.0 GiB per rank; the cluster has 6 slots with 40.0 GiB and "
            "its largest node 4");
  ScheduleResult r = s.Schedule(
      {Job("j", 2, {}, 0, 1, 40 * kGiB), Job("k", 3, {}, 0, 2), Job("m", 3, {}, 0, 3, 40 * kGiB)});
  // j: best fit among nodes with enough memory is "unknown" (2 free).
  EXPECT_THAT(PlacementOf(r, "j"), ElementsAre(G("unknown", 0), G("unknown", 1)));
  EXPECT_THAT(PlacementOf(r, "k"), ElementsAre(G("big", 0), G("big", 1), G("big", 2)));
  EXPECT_THAT(r.waiting,
              ElementsAre(Pair(
                  "m",
                  "waiting for 3 free GPU slots, 40.0 GiB per rank (cluster "
                  "has 1 free with enough memory); holds a reservation of 3 GPU slots on 1 node (1 "
                  "free now) until job k finishes")));
}

TEST(SchedulerTest, IdenticalShapesStopAtTheFirstFailure) {
  Scheduler s;
  s.UpsertNode(Gpu("a", 8));
  s.UpsertNode(Gpu("b", 8));
  std::vector<JobDemand> queue;
  for (int i = 0; i < 10; ++i)
    queue.push_back(Job("j" + std::to_string(i), 4, {{0, 1}, {2, 3}}, 0, i));
  ScheduleResult r = s.Schedule(queue);
  EXPECT_THAT(PlacedIds(r), ElementsAre("j0", "j1", "j2", "j3"));
  ASSERT_EQ(r.waiting.size(), 6u);
  EXPECT_EQ(r.waiting.at("j4"),
            "waiting for 4 free GPU slots with tensor-parallel groups of 2 on one node (cluster "
            "has 0 free); holds a reservation of 4 GPU slots on 1 node (0 free now) until job j0 "
            "finishes");
  EXPECT_EQ(r.waiting.at("j9"),
            "waiting for 4 free GPU slots with tensor-parallel groups of 2 on one node (cluster "
            "has 0 free)");
  EXPECT_EQ(s.free_slots(), 0);
  EXPECT_EQ(s.used_slots(), 16);
}

// Random clusters, queues, releases and node flips: every pass keeps the invariants.
TEST(SchedulerTest, RandomPassesKeepInvariants) {
  std::mt19937 rng(7);
  const auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  for (int round = 0; round < 40; ++round) {
    Scheduler s;
    std::map<std::string, NodeCapacity> nodes;
    for (int n = 0, count = uniform(1, 6); n < count; ++n) {
      NodeCapacity c{"n" + std::to_string(n), uniform(0, 1) == 1, uniform(1, 8),
                     uniform(0, 2) * 16 * kGiB, true};
      nodes[c.node_id] = c;
      s.UpsertNode(c);
    }
    std::map<std::string, JobDemand> all;
    std::vector<JobDemand> queue;
    std::set<std::string> running;
    int next = 0;
    for (int pass = 0; pass < 15; ++pass) {
      for (int k = uniform(0, 4); k > 0; --k) {
        const int world = uniform(1, 10), tp = std::min(world, 1 << uniform(0, 2));
        JobDemand j = Job("j" + std::to_string(next), world, {}, uniform(0, 2), next,
                          uniform(0, 3) == 0 ? 24 * kGiB : 0);
        ++next;
        for (int g = 0; g + tp <= world; g += tp) {
          std::vector<int> group(tp);
          std::iota(group.begin(), group.end(), g);
          j.same_node_groups.push_back(group);
        }
        if (world > 1 && uniform(0, 3) == 0) {  // elastic: also runs on half as many ranks
          JobDemand half = j;
          half.world_size = world / 2;
          half.same_node_groups.clear();
          j.alternatives.push_back(half);
        }
        all[j.job_id] = j;
        queue.push_back(j);
      }
      if (!running.empty() && uniform(0, 1) == 0) {
        auto it = std::next(running.begin(), uniform(0, static_cast<int>(running.size()) - 1));
        s.Release(*it);
        running.erase(it);
      }
      if (uniform(0, 4) == 0) {
        NodeCapacity& c =
            std::next(nodes.begin(), uniform(0, static_cast<int>(nodes.size()) - 1))->second;
        c.schedulable = !c.schedulable;
        s.UpsertNode(c);
      }
      const ScheduleResult r = s.Schedule(queue);
      std::set<std::string> placed;
      for (const PlacementDecision& d : r.placed) {
        SCOPED_TRACE(d.job_id);
        const JobDemand& job = all.at(d.job_id);
        ASSERT_LE(d.layout, static_cast<int>(job.alternatives.size()));
        const JobDemand& j = d.layout == 0 ? job : job.alternatives[d.layout - 1];
        ASSERT_EQ(static_cast<int>(d.ranks.size()), j.world_size);
        EXPECT_TRUE(s.CheckFeasible(j).ok());
        std::set<std::pair<std::string, int>> slots;
        for (const SlotRef& ref : d.ranks) {
          const NodeCapacity& c = nodes.at(ref.node_id);
          EXPECT_TRUE(c.schedulable);
          EXPECT_EQ(ref.gpu, c.gpu);
          EXPECT_EQ(ref.gpu, d.ranks[0].gpu);
          EXPECT_LT(ref.slot, c.slots);
          EXPECT_TRUE(j.memory_bytes_per_rank == 0 || c.memory_bytes_per_slot == 0 ||
                      c.memory_bytes_per_slot >= j.memory_bytes_per_rank);
          EXPECT_TRUE(slots.insert({ref.node_id, ref.slot}).second);
        }
        for (const auto& g : j.same_node_groups) {
          for (int rank : g) EXPECT_EQ(d.ranks[rank].node_id, d.ranks[g[0]].node_id);
        }
        EXPECT_EQ(s.AllocationOf(d.job_id), d.ranks);
        placed.insert(d.job_id);
        running.insert(d.job_id);
      }
      // Every job of the queue is placed or waiting, never both.
      for (const JobDemand& j : queue) {
        EXPECT_NE(placed.count(j.job_id) > 0, r.waiting.count(j.job_id) > 0) << j.job_id;
      }
      queue.erase(std::remove_if(queue.begin(), queue.end(),
                                 [&](const JobDemand& j) { return placed.count(j.job_id) > 0; }),
                  queue.end());
      // No slot is held twice, and the counts add up.
      std::set<std::pair<std::string, int>> held;
      int held_count = 0;
      for (const std::string& id : running) {
        for (const SlotRef& ref : s.AllocationOf(id)) {
          EXPECT_TRUE(held.insert({ref.node_id, ref.slot}).second) << id;
          ++held_count;
        }
      }
      EXPECT_EQ(s.used_slots(), held_count);
      int schedulable_free = 0;
      for (const auto& [id, c] : nodes) {
        if (!c.schedulable) continue;
        for (int slot = 0; slot < c.slots; ++slot) schedulable_free += held.count({id, slot}) == 0;
      }
      EXPECT_EQ(s.free_slots(), schedulable_free);
    }
  }
}

// ScheduleAppended decides exactly as a full pass over the whole queue would: two schedulers
// driven alike, one passing only the new jobs whenever it may, the other the whole queue.
TEST(SchedulerTest, AppendedJobsAreDecidedAsByAFullPass) {
  std::mt19937 rng(11);
  const auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  int appended_passes = 0, full_passes = 0, appended_placed = 0, appended_waiting = 0;
  int smaller_layouts = 0;  // elastic jobs placed on their other layout
  for (int round = 0; round < 60; ++round) {
    Scheduler quick, full;
    std::map<std::string, NodeCapacity> nodes;
    for (int n = 0, count = uniform(1, 5); n < count; ++n) {
      NodeCapacity c{"n" + std::to_string(n), uniform(0, 1) == 1, uniform(1, 8),
                     uniform(0, 2) * 16 * kGiB, true};
      nodes[c.node_id] = c;
      quick.UpsertNode(c);
      full.UpsertNode(c);
    }
    std::vector<JobDemand> queue;
    std::vector<std::string> running;
    int next = 0;
    for (int step = 0; step < 25; ++step) {
      std::vector<JobDemand> added;
      for (int k = uniform(1, 3); k > 0; --k) {
        const int world = uniform(1, 10), tp = std::min(world, 1 << uniform(0, 2));
        // Mostly the lowest priority, so that it comes last; sometimes one that outranks.
        JobDemand j = Job("j" + std::to_string(next), world, {}, uniform(0, 5) == 0 ? 2 : 0,
                          next, uniform(0, 3) == 0 ? 24 * kGiB : 0);
        ++next;
        for (int g = 0; g + tp <= world; g += tp) {
          std::vector<int> group(tp);
          std::iota(group.begin(), group.end(), g);
          j.same_node_groups.push_back(group);
        }
        if (world > 1 && uniform(0, 3) == 0) {  // elastic: also runs on half as many ranks
          JobDemand half = j;
          half.world_size = world / 2;
          half.same_node_groups.clear();
          j.alternatives.push_back(half);
        }
        added.push_back(j);
        queue.push_back(j);
      }
      if (!running.empty() && uniform(0, 3) == 0) {
        const int i = uniform(0, static_cast<int>(running.size()) - 1);
        quick.Release(running[i]);
        full.Release(running[i]);
        running.erase(running.begin() + i);
      }
      const ScheduleResult want = full.Schedule(queue);
      std::optional<ScheduleResult> got = quick.ScheduleAppended(added);
      if (got.has_value()) {
        ++appended_passes;
        // The full pass places only appended jobs, and decides them alike.
        ASSERT_EQ(got->placed.size(), want.placed.size()) << "round " << round << " step " << step;
        for (size_t i = 0; i < want.placed.size(); ++i) {
          EXPECT_EQ(got->placed[i].job_id, want.placed[i].job_id);
          EXPECT_EQ(got->placed[i].ranks, want.placed[i].ranks);
          EXPECT_EQ(got->placed[i].backfilled, want.placed[i].backfilled);
          EXPECT_EQ(got->placed[i].layout, want.placed[i].layout);
        }
        for (const auto& [id, why] : got->waiting) {
          ASSERT_TRUE(want.waiting.count(id) > 0) << id;
          EXPECT_EQ(why, want.waiting.at(id)) << id;
          ++appended_waiting;
        }
        EXPECT_EQ(got->placed.size() + got->waiting.size(), added.size());
        appended_placed += static_cast<int>(got->placed.size());
      } else {
        ++full_passes;
        const ScheduleResult r = quick.Schedule(queue);
        ASSERT_EQ(r.placed.size(), want.placed.size());
        for (size_t i = 0; i < want.placed.size(); ++i) {
          EXPECT_EQ(r.placed[i].ranks, want.placed[i].ranks);
        }
        EXPECT_EQ(r.waiting, want.waiting);
      }
      for (const PlacementDecision& d : want.placed) {
        smaller_layouts += d.layout > 0;
        running.push_back(d.job_id);
        queue.erase(std::remove_if(queue.begin(), queue.end(),
                                   [&](const JobDemand& j) { return j.job_id == d.job_id; }),
                    queue.end());
      }
    }
  }
  // Both paths were exercised, the quick one with placements and with waiting jobs.
  EXPECT_GT(appended_passes, 200);
  EXPECT_GT(full_passes, 100);
  EXPECT_GT(appended_placed, 10);
  EXPECT_GT(appended_waiting, 200);
  EXPECT_GT(smaller_layouts, 10);
}

// On a full cluster every submit waits behind the head. ScheduleAppended applies the head's
// reservation the last pass made instead of searching every node for it again (at 10,000 full
// nodes that search took ~4 ms of the controller's loop per submit), and decides as a full
// pass would.
TEST(SchedulerTest, AppendedJobsOnAFullClusterDoNotSearchForTheHeadsSlotsAgain) {
  Scheduler quick, full;
  std::vector<JobDemand> running;
  for (int n = 0; n < 200; ++n) {
    const NodeCapacity node = Gpu("n" + std::to_string(1000 + n), 8);
    quick.UpsertNode(node);
    full.UpsertNode(node);
    running.push_back(Job("r" + std::to_string(n), 8, {{0, 1, 2, 3, 4, 5, 6, 7}}, 0, n));
  }
  ASSERT_EQ(quick.Schedule(running).placed.size(), 200u);
  ASSERT_EQ(full.Schedule(running).placed.size(), 200u);
  ASSERT_EQ(quick.free_slots(), 0);

  std::vector<JobDemand> queue = {Job("head", 8, {{0, 1, 2, 3, 4, 5, 6, 7}}, 0, 1000)};
  const ScheduleResult first = quick.Schedule(queue);
  ASSERT_EQ(first.waiting.count("head"), 1u);
  EXPECT_NE(first.waiting.at("head").find("holds a reservation of 8 GPU slots on 1 node"),
            std::string::npos)
      << first.waiting.at("head");
  const int64_t searched = quick.reservation_searches();
  EXPECT_EQ(searched, 1);

  for (int k = 0; k < 50; ++k) {
    const JobDemand j = Job("q" + std::to_string(k), 1 + k % 8, {}, 0, 1001 + k);
    queue.push_back(j);
    std::optional<ScheduleResult> got = quick.ScheduleAppended({j});
    ASSERT_TRUE(got.has_value()) << k;
    const ScheduleResult want = full.Schedule(queue);
    EXPECT_TRUE(got->placed.empty());
    ASSERT_EQ(got->waiting.count(j.job_id), 1u);
    EXPECT_EQ(got->waiting.at(j.job_id), want.waiting.at(j.job_id));
    EXPECT_EQ(got->waiting.at(j.job_id).rfind("waiting for ", 0), 0u);
  }
  EXPECT_EQ(quick.reservation_searches(), searched);
  EXPECT_EQ(quick.free_slots(), 0);  // the reservation was lifted after every pass

  // The reservation is still the one a search finds: once the job it waits for ends, the
  // head is placed where it was reserved, as on the scheduler that searched every time.
  const std::string& reason = first.waiting.at("head");
  const size_t from = reason.find("until job ") + 10;
  const std::string waited = reason.substr(from, reason.find(' ', from) - from);
  ASSERT_EQ(waited, "r0");
  quick.Release(waited);
  full.Release(waited);
  const ScheduleResult a = quick.Schedule(queue), b = full.Schedule(queue);
  EXPECT_EQ(PlacementOf(a, "head"), PlacementOf(b, "head"));
  EXPECT_EQ(PlacementOf(a, "head").size(), 8u) << first.waiting.at("head");
}

}  // namespace
}  // namespace dhp::controller
