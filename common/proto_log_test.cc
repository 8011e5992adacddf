#include "common/proto_log.h"

#include <string>

#include "dhp/v1/service.pb.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

using Clock = LogRateLimit::Clock;

TEST(LogRateLimitTest, AdmitsSoManyAWindowAndCountsTheRest) {
  LogRateLimit limit(3, std::chrono::seconds(60));
  const Clock::time_point t0 = Clock::now();
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(limit.Admit(t0 + std::chrono::seconds(i), &suppressed));
    EXPECT_EQ(suppressed, 0);
  }
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(limit.Admit(t0 + std::chrono::seconds(59), &suppressed));
  ASSERT_TRUE(limit.Admit(t0 + std::chrono::seconds(60), &suppressed));  // a new window
  EXPECT_EQ(suppressed, 4);
  ASSERT_TRUE(limit.Admit(t0 + std::chrono::seconds(61), &suppressed));
  EXPECT_EQ(suppressed, 0);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Protobuf logs an ERROR line for each parse of a string that is not UTF-8: 40 such parses
// write 5 lines through DHP_LOG, not 40.
TEST(RouteProtobufLogsTest, ALineAParseOfBadUtf8IsCappedPerMinute) {
  RouteProtobufLogs(5);
  const std::string bad("\x0a\x03" "a\xff" "b");  // HeartbeatRequest.node_id = "a\xffb"
  testing::internal::CaptureStderr();
  for (int i = 0; i < 40; ++i) {
    v1::HeartbeatRequest hb;
    EXPECT_FALSE(hb.ParseFromString(bad));
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(err, "] protobuf: String field 'dhp.v1.HeartbeatRequest.node_id' contains "
                       "invalid UTF-8"),
            5)
      << err;
  EXPECT_EQ(Count(err, "\n"), 5) << err;
  EXPECT_EQ(err.rfind("E ", 0), 0u) << err;  // protobuf's ERROR is ours
}

}  // namespace
}  // namespace dhp
