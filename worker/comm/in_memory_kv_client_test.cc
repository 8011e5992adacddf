#include "worker/comm/in_memory_kv_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace dhp::comm {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST(InMemoryKvClientTest, SetGetCheckDelete) {
  InMemoryKvClient kv;
  ASSERT_TRUE(kv.Set("a", "1").ok());
  EXPECT_EQ(*kv.Get("a", 0ms), "1");
  EXPECT_TRUE(*kv.Check({"a"}));
  EXPECT_FALSE(*kv.Check({"a", "b"}));
  EXPECT_TRUE(*kv.Delete("a"));
  EXPECT_FALSE(*kv.Delete("a"));
  EXPECT_TRUE(absl::IsNotFound(kv.Get("a", 0ms).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(kv.Set("", "x")));
}

TEST(InMemoryKvClientTest, AddCountsAndRejectsNonIntegers) {
  InMemoryKvClient kv;
  EXPECT_EQ(*kv.Add("n", 2), 2);
  EXPECT_EQ(*kv.Add("n", -5), -3);
  EXPECT_EQ(*kv.Get("n", 0ms), "-3");
  ASSERT_TRUE(kv.Set("s", "abc").ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(kv.Add("s", 1).status()));
}

TEST(InMemoryKvClientTest, GetWaitsForTheKey) {
  InMemoryKvClient kv;
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(kv.Set("late", "v").ok());
  });
  absl::StatusOr<std::string> v = kv.Get("late", 5000ms);
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
}

TEST(InMemoryKvClientTest, WaitTimesOutNamingMissingKeys) {
  InMemoryKvClient kv;
  ASSERT_TRUE(kv.Set("here", "1").ok());
  auto start = std::chrono::steady_clock::now();
  absl::Status s = kv.Wait({"here", "gone1", "gone2"}, 50ms);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("\"gone1\", \"gone2\""));
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("\"here\"")));
  EXPECT_GE(elapsed, 50ms);
  EXPECT_LT(elapsed, 2000ms);
}

}  // namespace
}  // namespace dhp::comm
