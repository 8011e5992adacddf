#include "worker/comm/comm_stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "worker/comm/split_sizes.h"

namespace dhp::comm {
namespace {

using ::testing::ElementsAre;

TEST(CommStatsTest, VolumeFormulas) {
  // Ring all-reduce: 2N(P-1)/P.
  EXPECT_EQ(AllReduceVolume(1024, 4), (Volume{1536, 1536}));
  EXPECT_EQ(AllReduceVolume(1000, 3), (Volume{1333, 1333}));  // floor(2*1000*2/3)
  EXPECT_EQ(AllReduceVolume(1024, 1), (Volume{0, 0}));
  // All-gather of N per rank: N(P-1).
  EXPECT_EQ(AllGatherVolume(100, 4), (Volume{300, 300}));
  // Reduce-scatter and all-to-all of an N-byte input: N(P-1)/P.
  EXPECT_EQ(ReduceScatterVolume(1024, 4), (Volume{768, 768}));
  EXPECT_EQ(AllToAllVolume(1024, 2), (Volume{512, 512}));
  // Broadcast: the root sends to every peer.
  EXPECT_EQ(BroadcastVolume(10, 4, true), (Volume{30, 0}));
  EXPECT_EQ(BroadcastVolume(10, 4, false), (Volume{0, 10}));
  EXPECT_EQ(BroadcastVolume(10, 1, true), (Volume{0, 0}));
}

TEST(CommStatsTest, RecordsPerGroupAndOp) {
  CommStats stats;
  stats.Record("text.tp0", kOpAllReduce, {10, 10});
  stats.Record("text.tp0", kOpAllReduce, {5, 5});
  stats.Record("text.tp0", kOpAllGather, {1, 2});
  stats.Record("vision.sp0", kOpAllToAll, {100, 200});
  EXPECT_EQ(stats.Get("text.tp0", kOpAllReduce), (CommCounters{2, 15, 15}));
  EXPECT_EQ(stats.Get("text.tp0", kOpBarrier), (CommCounters{}));
  EXPECT_EQ(stats.GroupTotal("text.tp0"), (CommCounters{3, 16, 17}));
  EXPECT_EQ(stats.OpTotal(kOpAllToAll), (CommCounters{1, 100, 200}));
  EXPECT_EQ(stats.Total(), (CommCounters{4, 116, 217}));
  EXPECT_EQ(stats.Snapshot().size(), 3u);
  stats.Reset();
  EXPECT_EQ(stats.Total(), (CommCounters{}));
}

TEST(SplitSizesTest, EvenAndUneven) {
  EXPECT_THAT(*EvenRows(12, 4, "x"), ElementsAre(3, 3, 3, 3));
  EXPECT_THAT(std::string(EvenRows(10, 4, "all_gather").status().message()),
              ::testing::HasSubstr("all_gather: 10 rows do not split evenly over 4 ranks"));
  EXPECT_THAT(*ResolveGatherRows({}, 3, 1, 5, "g"), ElementsAre(5, 5, 5));
  EXPECT_THAT(*ResolveGatherRows({2, 5, 1}, 3, 1, 5, "g"), ElementsAre(2, 5, 1));
  EXPECT_FALSE(ResolveGatherRows({2, 4, 1}, 3, 1, 5, "g").ok());  // own entry disagrees
  EXPECT_FALSE(ResolveGatherRows({2, 5}, 3, 1, 5, "g").ok());     // wrong length
  EXPECT_THAT(*ResolveScatterRows({1, 0, 3}, 3, 4, "s"), ElementsAre(1, 0, 3));
  EXPECT_FALSE(ResolveScatterRows({1, 0, 2}, 3, 4, "s").ok());  // does not sum to 4
  EXPECT_FALSE(ResolveScatterRows({5, -1}, 2, 4, "s").ok());    // negative
  AllToAllRows even = *ResolveAllToAllRows({}, {}, 2, 6, "a");
  EXPECT_TRUE(even.even);
  EXPECT_THAT(even.send, ElementsAre(3, 3));
  AllToAllRows uneven = *ResolveAllToAllRows({1, 5}, {2, 2}, 2, 6, "a");
  EXPECT_FALSE(uneven.even);
  EXPECT_FALSE(ResolveAllToAllRows({1, 5}, {}, 2, 6, "a").ok());
  EXPECT_THAT(RowOffsets({2, 0, 3}), ElementsAre(0, 2, 2, 5));
  EXPECT_TRUE(AllEqual({}));
  EXPECT_FALSE(AllEqual({1, 2}));
}

}  // namespace
}  // namespace dhp::comm
