#include "api/auth.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace dhp::api {
namespace {

TEST(TokenAuthTest, DisabledAllowsEverything) {
  TokenAuth auth;
  EXPECT_FALSE(auth.enabled());
  EXPECT_TRUE(auth.Check("").ok());
  EXPECT_TRUE(auth.Check("Bearer whatever").ok());
}

TEST(TokenAuthTest, RequiresTheExactBearerToken) {
  TokenAuth auth("s3cret");
  EXPECT_TRUE(auth.Check("Bearer s3cret").ok());
  EXPECT_EQ(auth.Check("").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("").message(),
            "missing credentials: send 'authorization: Bearer <token>' (dhpctl: --token-file "
            "or DHP_TOKEN)");
  EXPECT_EQ(auth.Check("Bearer s3cre").message(), "invalid credentials: the token is wrong");
  EXPECT_EQ(auth.Check("Bearer s3cret2").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("s3cret").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("Basic s3cret").code(), absl::StatusCode::kUnauthenticated);
}

TEST(TokenAuthTest, ReadsAndTrimsTokenFiles) {
  std::string path = testing::TempDir() + "/token";
  std::ofstream(path) << "  abc123\n";
  EXPECT_EQ(*ReadTokenFile(path), "abc123");
  std::ofstream(path) << "\n \n";
  EXPECT_EQ(ReadTokenFile(path).status().message(), "the token file " + path + " is empty");
  EXPECT_EQ(ReadTokenFile(path + ".missing").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RankKeyTest, CreatedOnceKeptAndCheckedBeforeReading) {
  const std::string path = testing::TempDir() + "/rank.key";
  std::remove(path.c_str());
  absl::StatusOr<std::string> key = LoadOrCreateRankKey(path);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->size(), 32u);
  EXPECT_EQ(*LoadOrCreateRankKey(path), *key);  // a restart reads the same key
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  // Paths that are not a key are refused without reading them to the end.
  EXPECT_EQ(LoadOrCreateRankKey("/dev/zero").status().message(),
            "the rank key /dev/zero is not a regular file");
  EXPECT_EQ(LoadOrCreateRankKey(testing::TempDir()).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string big = testing::TempDir() + "/big.key";
  std::ofstream(big) << std::string(5000, 'k');
  EXPECT_EQ(LoadOrCreateRankKey(big).status().message(),
            "the rank key " + big + " holds 5000 bytes; a key is 32 to 4096");
  const std::string small = testing::TempDir() + "/small.key";
  std::ofstream(small) << "short";
  EXPECT_EQ(LoadOrCreateRankKey(small).status().message(),
            "the rank key " + small + " holds 5 bytes; a key is 32 to 4096");
}

}  // namespace
}  // namespace dhp::api
