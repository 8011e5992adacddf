#include "bench/metrics_histogram.h"

#include <limits>

#include "gtest/gtest.h"

namespace dhp::bench {
namespace {

std::string Page(int ok_fast, int ok_slow, int failed_slow) {
  const auto n = [](int v) { return std::to_string(v); };
  return "# TYPE dhp_api_request_duration_seconds histogram\n"
         "dhp_api_request_duration_seconds_bucket{code=\"OK\",method=\"GetJob\","
         "transport=\"grpc\",le=\"0.005\"} " + n(ok_fast) + "\n"
         "dhp_api_request_duration_seconds_bucket{code=\"OK\",method=\"GetJob\","
         "transport=\"grpc\",le=\"0.025\"} " + n(ok_fast + ok_slow) + "\n"
         "dhp_api_request_duration_seconds_bucket{code=\"OK\",method=\"GetJob\","
         "transport=\"grpc\",le=\"+Inf\"} " + n(ok_fast + ok_slow) + "\n"
         "dhp_api_request_duration_seconds_bucket{code=\"NOT_FOUND\",method=\"GetJob\","
         "transport=\"grpc\",le=\"0.005\"} 0\n"
         "dhp_api_request_duration_seconds_bucket{code=\"NOT_FOUND\",method=\"GetJob\","
         "transport=\"grpc\",le=\"0.025\"} 0\n"
         "dhp_api_request_duration_seconds_bucket{code=\"NOT_FOUND\",method=\"GetJob\","
         "transport=\"grpc\",le=\"+Inf\"} " + n(failed_slow) + "\n"
         "dhp_api_request_duration_seconds_bucket{code=\"OK\",method=\"GetJob\","
         "transport=\"rest\",le=\"0.005\"} 1000\n"
         "dhp_api_request_duration_seconds_count{code=\"OK\",method=\"GetJob\","
         "transport=\"grpc\"} 5\n";
}

TEST(MetricsHistogramTest, SumsTheMatchingSeriesByBound) {
  const HistogramBuckets b = ParseHistogram(Page(90, 9, 1), "dhp_api_request_duration_seconds",
                                            {"method=\"GetJob\"", "transport=\"grpc\""});
  ASSERT_EQ(b.le.size(), 3u);
  EXPECT_EQ(b.le[0], 0.005);
  EXPECT_EQ(b.le[2], std::numeric_limits<double>::infinity());
  EXPECT_EQ(b.count[0], 90);
  EXPECT_EQ(b.count[1], 99);
  EXPECT_EQ(b.count[2], 100);
  EXPECT_TRUE(ParseHistogram(Page(1, 1, 1), "dhp_api_request_duration_seconds",
                             {"method=\"KvGet\""})
                  .le.empty());
}

// Between the scrapes: 90 -> 180 fast, 9 -> 18 slow, 1 -> 2 past every bound (100 new calls).
TEST(MetricsHistogramTest, TheQuantileOfWhatWasObservedBetweenTwoScrapes) {
  const std::vector<std::string> grpc = {"method=\"GetJob\"", "transport=\"grpc\""};
  const char* const name = "dhp_api_request_duration_seconds";
  const HistogramBuckets before = ParseHistogram(Page(90, 9, 1), name, grpc);
  const HistogramBuckets after = ParseHistogram(Page(180, 18, 2), name, grpc);
  EXPECT_EQ(QuantileBound(before, after, 0.5), 0.005);
  EXPECT_EQ(QuantileBound(before, after, 0.9), 0.005);
  EXPECT_EQ(QuantileBound(before, after, 0.95), 0.025);
  EXPECT_EQ(QuantileBound(before, after, 0.995), std::numeric_limits<double>::infinity());
  EXPECT_EQ(QuantileBound(after, after, 0.5), -1);  // nothing observed between them
  EXPECT_EQ(QuantileBound(HistogramBuckets(), after, 0.99), 0.025);  // 198 of 200
}

TEST(MetricsHistogramTest, CounterSamplesAreSummedOverMatchingSeries) {
  const std::string page =
      "# TYPE dhp_busy_seconds_total counter\n"
      "dhp_busy_seconds_total{work=\"calls\"} 1.5\n"
      "dhp_busy_seconds_total{work=\"persist\"} 0.25\n"
      "dhp_busy_seconds_total_more{work=\"calls\"} 100\n"
      "dhp_plain 7\n";
  EXPECT_DOUBLE_EQ(SumSamples(page, "dhp_busy_seconds_total", {"work=\"calls\""}), 1.5);
  EXPECT_DOUBLE_EQ(SumSamples(page, "dhp_busy_seconds_total", {}), 1.75);
  EXPECT_DOUBLE_EQ(SumSamples(page, "dhp_plain", {}), 7);
  EXPECT_EQ(SumSamples(page, "dhp_busy_seconds_total", {"work=\"scrape\""}), -1);
  EXPECT_EQ(SumSamples(page, "dhp_absent", {}), -1);
}

}  // namespace
}  // namespace dhp::bench
