#include "api/auth.h"

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

}  // namespace
}  // namespace dhp::api
