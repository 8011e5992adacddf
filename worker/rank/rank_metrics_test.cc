#include "worker/rank/rank_metrics.h"

#include <gtest/gtest.h>

namespace dhp {
namespace {

TEST(RankMetricsTest, StageThroughputPhasesMemoryAndBytesPerGroup) {
  comm::CommStats stats;
  stats.Record("text.tp0", "all_reduce", comm::Volume{100, 100});
  stats.Record("text.tp0", "all_gather", comm::Volume{10, 30});
  stats.Record("world", "all_reduce", comm::Volume{8, 8});
  RankStepTimes t{2.0, 0.5, 0.7, 0.3, 0.1};
  std::map<std::string, double> m = RankStepMetrics(t, {1000, 400, false, true}, stats);
  EXPECT_EQ(m.count("vision_tokens_per_s"), 0u);  // no vision role
  EXPECT_DOUBLE_EQ(m["text_tokens_per_s"], 500.0);
  EXPECT_DOUBLE_EQ(m["forward_s"], 0.5);
  EXPECT_DOUBLE_EQ(m["backward_s"], 0.7);
  EXPECT_DOUBLE_EQ(m["comm_s"], 0.3);
  EXPECT_DOUBLE_EQ(m["optimizer_s"], 0.1);
  EXPECT_DOUBLE_EQ(m["comm_bytes:text.tp0"], 240.0);
  EXPECT_DOUBLE_EQ(m["comm_bytes:world"], 16.0);
  EXPECT_GT(m["memory_rss_bytes"], 1 << 20);  // a test binary is more than 1 MiB resident

  m = RankStepMetrics(t, {1000, 400, true, true}, stats);
  EXPECT_DOUBLE_EQ(m["vision_tokens_per_s"], 200.0);
  // No device memory and no MFU without a GPU and a peak.
  EXPECT_EQ(m.count("memory_allocated_bytes"), 0u);
  EXPECT_EQ(m.count("mfu_vision"), 0u);
  EXPECT_EQ(m.count("mfu_text"), 0u);
}

TEST(RankMetricsTest, StageMfuIsTheRanksShareOfTrainingFlopsOverStepTimesPeak) {
  // 1e12 forward FLOPs -> 3e12 training FLOPs over 4 ranks = 0.75e12 per rank, in 0.5 s on a
  // 3e12 FLOP/s device: 0.75 / 1.5 = 0.5.
  EXPECT_DOUBLE_EQ(StageMfu(1'000'000'000'000, 4, 0.5, 3e12), 0.5);
  EXPECT_DOUBLE_EQ(StageMfu(1'000'000'000'000, 1, 1.0, 3e12), 1.0);
  EXPECT_EQ(StageMfu(1'000'000'000'000, 4, 0.0, 3e12), 0);
  EXPECT_EQ(StageMfu(1'000'000'000'000, 4, 0.5, 0), 0);
  EXPECT_EQ(StageMfu(1'000'000'000'000, 0, 0.5, 3e12), 0);
}

TEST(RankMetricsTest, GpuRankReportsAllocatorMemoryAndMfuPerHostedStage) {
  comm::CommStats stats;
  RankStepTimes t{2.0, 0.5, 0.7, 0.3, 0.1};
  RankStepCounts c{1000, 400, true, true};
  StepFlops f;
  f.vision_linear = 300;
  f.vision_attention = 100;  // vision: 400 forward -> 1200 training / 2 ranks = 600 per rank
  f.text_linear = 900;
  f.text_attention = 300;    // text: 1200 forward -> 3600 training / 4 ranks = 900 per rank
  c.flops = f;
  c.vision_ranks = 2;
  c.text_ranks = 4;
  RankDevice d;
  d.peak_flops = 1000;  // per second; the step takes 2 s: 2000 FLOPs of capacity
  d.memory = DeviceMemory{100, 300, 200};
  std::map<std::string, double> m = RankStepMetrics(t, c, stats, d);
  EXPECT_DOUBLE_EQ(m["mfu_vision"], 0.3);
  EXPECT_DOUBLE_EQ(m["mfu_text"], 0.45);
  EXPECT_DOUBLE_EQ(m["memory_allocated_bytes"], 100);
  EXPECT_DOUBLE_EQ(m["memory_reserved_bytes"], 300);
  EXPECT_DOUBLE_EQ(m["memory_peak_bytes"], 200);
  EXPECT_GT(m["memory_rss_bytes"], 0);  // the host process's, reported on GPU too

  c.has_vision = false;  // a text-only rank (separate placement)
  m = RankStepMetrics(t, c, stats, d);
  EXPECT_EQ(m.count("mfu_vision"), 0u);
  EXPECT_DOUBLE_EQ(m["mfu_text"], 0.45);
}

}  // namespace
}  // namespace dhp
