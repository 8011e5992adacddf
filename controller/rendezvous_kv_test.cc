#include "controller/rendezvous_kv.h"

#include <thread>

#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using std::chrono::milliseconds;

const KvScopeKey kRun1{"j-1", 1};
const KvScopeKey kRun2{"j-1", 2};

TEST(RendezvousKvTest, SetGetIsScopedByAttempt) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "addr", "10.0.0.1:2900").ok());
  EXPECT_EQ(*kv.Get(kRun1, "addr", milliseconds(0)), "10.0.0.1:2900");
  absl::StatusOr<std::string> other = kv.Get(kRun2, "addr", milliseconds(0));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(other.status().message(), "key \"addr\" is not set in job j-1 attempt 2");
}

TEST(RendezvousKvTest, GetBlocksUntilAnotherThreadSets) {
  RendezvousKv kv;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(kv.Set(kRun1, "rank0", "ready").ok());
  });
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> v = kv.Get(kRun1, "rank0", milliseconds(5000));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "ready");
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(40));
}

TEST(RendezvousKvTest, WaitTimesOutNamingMissingKeys) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "rank/0", "x").ok());
  absl::Status s = kv.Wait(kRun1, {"rank/0", "rank/1", "rank/2"}, milliseconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "rendezvous of job j-1 attempt 1: still missing \"rank/1\", \"rank/2\" after 30 ms");
}

TEST(RendezvousKvTest, AddCountsFromManyThreads) {
  RendezvousKv kv;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) ASSERT_TRUE(kv.Add(kRun1, "arrived", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*kv.Add(kRun1, "arrived", 0), 800);
  EXPECT_EQ(*kv.Get(kRun1, "arrived", milliseconds(0)), "800");
}

TEST(RendezvousKvTest, AddOnNonIntegerIsRefused) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "k", "abc").ok());
  EXPECT_EQ(kv.Add(kRun1, "k", 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*kv.Get(kRun1, "k", milliseconds(0)), "abc");
}

TEST(RendezvousKvTest, CheckDeleteAndDropScope) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "a", "1").ok());
  EXPECT_TRUE(kv.Check(kRun1, {"a"}));
  EXPECT_FALSE(kv.Check(kRun1, {"a", "b"}));
  EXPECT_TRUE(kv.Delete(kRun1, "a"));
  EXPECT_FALSE(kv.Delete(kRun1, "a"));
  ASSERT_TRUE(kv.Set(kRun1, "b", "2").ok());
  ASSERT_TRUE(kv.Set(kRun2, "b", "2").ok());
  kv.DropScope(kRun1);
  EXPECT_EQ(kv.KeyCount(kRun1), 0u);
  EXPECT_EQ(kv.KeyCount(kRun2), 1u);
}

TEST(RendezvousKvTest, DropScopeWakesWaitersWithCancelled) {
  RendezvousKv kv;
  std::thread dropper([&] {
    std::this_thread::sleep_for(milliseconds(50));
    kv.DropScope(kRun1);
  });
  absl::Status s = kv.Wait(kRun1, {"never"}, milliseconds(5000));
  dropper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

TEST(RendezvousKvTest, RejectsEmptyAndOversizedKeys) {
  RendezvousKv kv;
  EXPECT_EQ(kv.Set(kRun1, "", "v").message(), "key: must not be empty");
  EXPECT_EQ(kv.Set(kRun1, std::string(2000, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set(kRun1, "k", std::string(5 << 20, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dhp::controller
