#include "common/lock_file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, "-", ::getpid());
}

TEST(LockFileTest, ASecondHolderIsRefusedNamingTheFirstUntilItReleases) {
  const std::string path = TempPath("lock");
  absl::StatusOr<LockFile> first = LockFile::Acquire(path);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<LockFile> second = LockFile::Acquire(path);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            absl::StrCat(path, " is locked by another process (pid ", ::getpid(),
                         "): only one may use this directory at a time"));
  // Another process is refused too.
  const pid_t child = ::fork();
  if (child == 0) _exit(LockFile::Acquire(path).ok() ? 0 : 3);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 3);

  LockFile moved = *std::move(first);
  EXPECT_FALSE(LockFile::Acquire(path).ok());  // the moved-to object holds it
  { LockFile gone = std::move(moved); }
  EXPECT_TRUE(LockFile::Acquire(path).ok());  // released with its last holder
}

TEST(LockFileTest, AnUnopenableFileIsUnavailable) {
  EXPECT_EQ(LockFile::Acquire("/nonexistent-dir/x.lock").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dhp
