#include "common/path_inside.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace dhp {
namespace {

TEST(PathInsideTest, ResolvesDotsAndLinksBeforeComparing) {
  namespace fs = std::filesystem;
  const std::string root = ::testing::TempDir() + "/inside-" + std::to_string(::getpid());
  fs::create_directories(root + "/run/ckpt");
  fs::create_directories(root + "/elsewhere");
  fs::create_symlink(root + "/elsewhere", root + "/run/escape");

  EXPECT_TRUE(PathInside(root + "/run", root + "/run"));
  EXPECT_TRUE(PathInside(root + "/run/ckpt/step-5", root + "/run"));  // need not exist yet
  EXPECT_TRUE(PathInside(root + "/run/./ckpt/../ckpt", root + "/run/"));
  EXPECT_FALSE(PathInside(root + "/run/../elsewhere", root + "/run"));
  EXPECT_FALSE(PathInside(root + "/run/escape/step-5", root + "/run"));  // a link out
  EXPECT_FALSE(PathInside(root + "/running", root + "/run"));            // not a prefix match
  EXPECT_FALSE(PathInside("/etc/passwd", root + "/run"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace dhp
