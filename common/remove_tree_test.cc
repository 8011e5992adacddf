#include "common/remove_tree.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace dhp {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(RemoveTreeTest, RemovesNestedFilesAndDirectoriesAndToleratesMissing) {
  const std::string root = ::testing::TempDir() + "/remove-tree-" + std::to_string(getpid());
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((root + "/a").c_str(), 0755), 0);
  std::ofstream(root + "/a/f.txt") << "x";
  std::ofstream(root + "/g.txt") << "y";
  ASSERT_EQ(::symlink("/", (root + "/link").c_str()), 0);  // removed, not followed
  RemoveTree(root);
  EXPECT_FALSE(Exists(root));
  EXPECT_TRUE(Exists("/"));
  RemoveTree(root);  // gone already: nothing happens
  EXPECT_FALSE(Exists(root));
}

}  // namespace
}  // namespace dhp
