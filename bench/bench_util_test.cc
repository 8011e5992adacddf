#include "bench/bench_util.h"

#include <string>

#include "gtest/gtest.h"

namespace dhp::bench {
namespace {

TEST(ParseChannelArgTest, ReadsANameAndAnIntWithOrWithoutALabel) {
  absl::StatusOr<ChannelArg> a = ParseChannelArg("grpc.http2.bdp_probe=0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->label, "");
  EXPECT_EQ(a->name, "grpc.http2.bdp_probe");
  EXPECT_EQ(a->value, 0);
  a = ParseChannelArg("new:grpc.http2.lookahead_bytes=1048576");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->label, "new");
  EXPECT_EQ(a->name, "grpc.http2.lookahead_bytes");
  EXPECT_EQ(a->value, 1048576);
  a = ParseChannelArg("x=-2147483648");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->value, -2147483648LL);
}

TEST(ParseChannelArgTest, RefusesWhatIsNotNameEqualsInt) {
  for (const std::string bad :
       {"", "=", "name", "name=", "=1", "new:=1", "new:name", "a=1=2", "a=1x", "a= 1x",
        "a=2147483648", "a=-2147483649", "a=99999999999999999999999", "a=\xff\xfe"}) {
    absl::StatusOr<ChannelArg> a = ParseChannelArg(bad);
    EXPECT_FALSE(a.ok()) << "\"" << bad << "\" read as " << a->name << "=" << a->value;
    if (!a.ok()) EXPECT_NE(a.status().message().find(bad), std::string::npos) << a.status();
  }
}

TEST(ArgsAreUtf8Test, NamesTheFirstArgumentThatIsNotUtf8) {
  const char* good[] = {"bench", "--controller", "new:/tmp/dhp-controller", "--label",
                        "\xc3\xa9t\xc3\xa9"};
  EXPECT_TRUE(ArgsAreUtf8(5, good));
  const char* bad[] = {"bench", "--controller", "b\xff" "ad:/bin/false", "--x", "\xc0"};
  testing::internal::CaptureStderr();
  EXPECT_FALSE(ArgsAreUtf8(5, bad));
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("argument 2, \"b\\xFFad:/bin/false\", is not valid UTF-8: byte 0xFF"),
            std::string::npos)
      << said;
  EXPECT_EQ(said.find("argument 4"), std::string::npos) << said;  // the first only
}

}  // namespace
}  // namespace dhp::bench
