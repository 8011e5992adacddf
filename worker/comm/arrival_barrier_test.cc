#include "worker/comm/arrival_barrier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "worker/comm/in_memory_kv_client.h"

namespace dhp::comm {
namespace {

using namespace std::chrono_literals;

TEST(ArrivalBarrierTest, AllMembersPass) {
  InMemoryKvClient kv;
  GroupSpec g{"text.tp0", {4, 5, 6}};
  std::vector<absl::Status> results(3);
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back(
        [&, k] { results[k] = ArrivalBarrier(kv, "ns/", g, g.world_ranks[k], 5000ms); });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(*kv.Get("ns/text.tp0/arrived/1", 0ms), "5");
}

TEST(ArrivalBarrierTest, TimeoutNamesTheMissingRankAndGroup) {
  InMemoryKvClient kv;
  GroupSpec g{"text.tp0", {2, 3}};
  auto start = std::chrono::steady_clock::now();
  absl::Status s = ArrivalBarrier(kv, "", g, 2, 200ms);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_EQ(s.message(),
            "group text.tp0 (size 2): rank 1 (world rank 3) did not arrive within 200 ms");
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 3000ms);
}

TEST(ArrivalBarrierTest, TimeoutListsEveryMissingRankWithTheDisplayName) {
  InMemoryKvClient kv;
  GroupSpec g{"world", {0, 1, 2, 3}};
  ASSERT_TRUE(kv.Set(ArrivalKey("", "world", 1), "1").ok());
  absl::Status s = ArrivalBarrier(kv, "", g, 0, 50ms, "world (also vision)");
  EXPECT_EQ(s.message(),
            "group world (also vision) (size 4): ranks 2 (world rank 2), 3 (world rank 3) did "
            "not arrive within 50 ms");
}

TEST(ArrivalBarrierTest, ConnectedBarrierNamesTheMemberThatDidNotFinishConnecting) {
  InMemoryKvClient kv;
  GroupSpec g{"vision.sp0", {4, 5, 6}};
  ASSERT_TRUE(kv.Set(ConnectedKey("ns/", "vision.sp0", 1), "5").ok());
  absl::Status s = ConnectedBarrier(kv, "ns/", g, 4, 50ms);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_EQ(s.message(),
            "group vision.sp0 (size 3): rank 2 (world rank 6) did not finish connecting within "
            "50 ms");
  // Its own report is under connected/, not arrived/: the two barriers never satisfy each other.
  EXPECT_TRUE(*kv.Check({"ns/vision.sp0/connected/0"}));
  EXPECT_FALSE(*kv.Check({"ns/vision.sp0/arrived/0"}));
}

TEST(ArrivalBarrierTest, NonMemberIsRejected) {
  InMemoryKvClient kv;
  absl::Status s = ArrivalBarrier(kv, "", GroupSpec{"text.tp1", {2, 3}}, 0, 50ms);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("world rank 0 is not a member"));
}

}  // namespace
}  // namespace dhp::comm
