#include "common/mutex_mode.h"

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

void LockInOrder(absl::Mutex& first, absl::Mutex& second) {
  absl::MutexLock a(&first);
  absl::MutexLock b(&second);
}

// With Abseil in debug mode (Debian's build) and its default mode, taking two locks in both
// orders aborts the process: "Potential Mutex deadlock". Once the checks are off it does not.
TEST(MutexModeDeathTest, AnInvertedLockOrderAbortsUntilTheChecksAreOff) {
  const auto invert = [] {
    absl::Mutex a;
    absl::Mutex b;
    LockInOrder(a, b);
    LockInOrder(b, a);
  };
  // The death test's child starts with Abseil's default mode, as any process does.
  EXPECT_DEATH(invert(), "Potential Mutex deadlock");
  SkipMutexOrderChecks();
  invert();  // would abort here
  SUCCEED();
}

}  // namespace
}  // namespace dhp
