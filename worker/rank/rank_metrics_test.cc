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
}

}  // namespace
}  // namespace dhp
