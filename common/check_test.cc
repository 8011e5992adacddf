#include "common/check.h"

#include <gtest/gtest.h>

#include <thread>

namespace dhp {
namespace {

TEST(CheckTest, APassingCheckDoesNotEvaluateItsMessage) {
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  DHP_CHECK(1 + 1 == 2) << count();
  DHP_CHECK_OK(absl::OkStatus());
  EXPECT_EQ(evaluated, 0);
}

TEST(CheckDeathTest, AFailingCheckNamesWhereWhatAndWhy) {
  const int rank = 3, world = 2;
  EXPECT_DEATH(DHP_CHECK(rank < world) << "rank " << rank << " of " << world,
               "check_test.cc:[0-9]+: check failed: rank < world: rank 3 of 2");
  EXPECT_DEATH(DHP_CHECK(false), "check failed: false\n");
  EXPECT_DEATH(DHP_CHECK_OK(absl::InternalError("disk on fire")),
               "absl::InternalError\\(\"disk on fire\"\\): INTERNAL: disk on fire");
}

TEST(ThreadCheckerTest, BindsToTheFirstThreadAndRebindsAfterDetach) {
  ThreadChecker checker;
  bool other = true;
  std::thread([&] { other = checker.CalledOnValidThread(); }).join();  // binds that thread
  EXPECT_TRUE(other);
  EXPECT_FALSE(checker.CalledOnValidThread());
  checker.Detach();
  EXPECT_TRUE(checker.CalledOnValidThread());  // bound to this one now
  std::thread([&] { other = checker.CalledOnValidThread(); }).join();
  EXPECT_FALSE(other);
}

TEST(ThreadCheckerDeathTest, UseOffTheBoundThreadCrashes) {
  EXPECT_DEATH(
      {
        ThreadChecker loop;
        std::thread([&] { DHP_CHECK_ON_THREAD(loop); }).join();
        DHP_CHECK_ON_THREAD(loop);
      },
      "called off the thread loop is bound to");
}

}  // namespace
}  // namespace dhp
