#include "worker/agent/resources.h"

#include "gtest/gtest.h"

namespace dhp::worker {
namespace {

TEST(ResourcesTest, ParsesNvidiaSmiCsv) {
  v1::NodeResources r = ParseNvidiaSmi(
      "0, NVIDIA H100 80GB HBM3, 81559, GPU-1111\n"
      "1, NVIDIA H100 80GB HBM3, 81559, GPU-2222\n"
      "garbage line\n");
  ASSERT_EQ(r.gpus_size(), 2);
  EXPECT_EQ(r.gpus(1).index(), 1);
  EXPECT_EQ(r.gpus(0).name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r.gpus(0).memory_bytes(), 81559LL * 1024 * 1024);
  EXPECT_EQ(r.gpus(1).uuid(), "GPU-2222");
}

TEST(ResourcesTest, BadNumbersAreSkipped) {
  v1::NodeResources r = ParseNvidiaSmi("x, H100, 80, GPU-1\n0, H100, [N/A], GPU-2\n");
  EXPECT_EQ(r.gpus_size(), 0);
}

TEST(ResourcesTest, ExplicitCpuSlotsAndMemory) {
  v1::NodeResources r = DetectResources(3);
  EXPECT_EQ(r.cpu_slots(), 3);
  EXPECT_GT(r.memory_bytes(), 0);
}

}  // namespace
}  // namespace dhp::worker
