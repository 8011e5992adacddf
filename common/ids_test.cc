#include "common/ids.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace dhp {
namespace {

TEST(NewIdTest, IdsAreThirteenHexDigitsAndIncreaseAsStrings) {
  std::set<std::string> seen;
  std::string previous;
  for (int i = 0; i < 20000; ++i) {
    const std::string id = NewId("j");
    ASSERT_EQ(id.size(), 15u) << id;  // inline in a std::string
    ASSERT_EQ(id.substr(0, 2), "j-");
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef", 2), std::string::npos) << id;
    ASSERT_GT(id, previous);  // sorted by creation: within a millisecond too
    ASSERT_TRUE(seen.insert(id).second) << id;
    previous = id;
  }
}

TEST(NewIdTest, TheFirstTenDigitsAreMillisecondsSince2024) {
  uint64_t last = 0;
  // 2026-11-29T00:00:00Z = 1795910400000 ms since the Unix epoch.
  const uint64_t bits = NextIdBits(1795910400000, 0xfabc, &last);  // 12 random bits: 0xabc
  EXPECT_EQ(bits >> 12, uint64_t{1795910400000 - 1704067200000});
  EXPECT_EQ(bits & 0xfff, 0xabcu);
  EXPECT_EQ(last, bits);
}

TEST(NewIdTest, ASmallerDrawOrAClockStepBackStillGivesALargerId) {
  uint64_t last = 0;
  const uint64_t first = NextIdBits(1795910400000, 0x800, &last);
  EXPECT_EQ(NextIdBits(1795910400000, 0x001, &last), first + 1);  // same ms, drawn lower
  EXPECT_EQ(NextIdBits(1795910399000, 0xfff, &last), first + 2);  // a second back in time
  const uint64_t later = NextIdBits(1795910400001, 0, &last);     // the next ms: its own
  EXPECT_EQ(later >> 12, (first >> 12) + 1);
}

TEST(NewIdTest, TimesBefore2024CountAsItsStart) {
  uint64_t last = 0;
  EXPECT_EQ(NextIdBits(0, 5, &last), 5u);
}

}  // namespace
}  // namespace dhp
