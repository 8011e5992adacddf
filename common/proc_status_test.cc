#include "common/proc_status.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace dhp {
namespace {

TEST(ProcStatusTest, ResidentMemoryRisesWithTouchedPagesAndTheHighWaterMarkStays) {
  const int64_t before = ProcSelfStatusBytes("VmRSS");
  ASSERT_GT(before, 0);
  {
    std::vector<char> block(64 << 20);
    std::memset(block.data(), 1, block.size());
    EXPECT_GE(ProcSelfStatusBytes("VmRSS"), before + (60 << 20));
  }
  EXPECT_GE(ProcSelfStatusBytes("VmHWM"), before + (60 << 20));
  EXPECT_EQ(ProcSelfStatusBytes("NoSuchField"), -1);
  EXPECT_EQ(ProcSelfStatusBytes("VmRSS:"), -1);  // the colon is ours to add
}

}  // namespace
}  // namespace dhp
