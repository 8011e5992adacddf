#include "worker/rank/device_stats.h"

#include <gtest/gtest.h>

namespace dhp {
namespace {

TEST(DeviceStatsTest, PeakOfKnownGpusByTheirCudaNames) {
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA H100 80GB HBM3"), 989e12);
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA H100 NVL"), 835e12);
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA H200"), 989e12);
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA H200 NVL"), 835e12);
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA GH200 480GB"), 989e12);
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA L40S"), 362e12);
  EXPECT_DOUBLE_EQ(KnownGpuPeakFlops("NVIDIA B200"), 2250e12);
}

TEST(DeviceStatsTest, UnknownNamesHaveNoPeak) {
  EXPECT_EQ(KnownGpuPeakFlops("Tesla V100-SXM2-16GB"), 0);
  EXPECT_EQ(KnownGpuPeakFlops(""), 0);
  EXPECT_EQ(KnownGpuPeakFlops("NVIDIA L40"), 0);  // not the L40S
}

TEST(DeviceStatsTest, QueriesMatchTheBuild) {
  if (BuiltWithCuda()) {
    // A CUDA build on a GPU machine: the allocator answers for device 0.
    std::optional<DeviceMemory> m = CudaAllocatorMemory(0);
    if (!m.has_value()) GTEST_SKIP() << "CUDA build, but no GPU visible";
    EXPECT_GE(m->reserved, m->allocated);
    EXPECT_GE(m->peak, m->allocated);
    EXPECT_FALSE(CudaDeviceName(0).empty());
  } else {
    EXPECT_FALSE(CudaAllocatorMemory(0).has_value());
    EXPECT_EQ(CudaDeviceName(0), "");
  }
  EXPECT_FALSE(CudaAllocatorMemory(-1).has_value());
}

}  // namespace
}  // namespace dhp
