#include "common/metrics.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dhp {
namespace {

TEST(MetricsTest, CounterWithoutLabelsRendersZeroFromTheStart) {
  MetricsRegistry registry;
  Counter& c = registry.AddCounter("dhp_things_total", "Things seen.").WithLabels();
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_things_total Things seen.\n"
            "# TYPE dhp_things_total counter\n"
            "dhp_things_total 0\n");
  c.Inc();
  c.Inc(2.5);
  EXPECT_EQ(c.Value(), 3.5);
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_things_total Things seen.\n"
            "# TYPE dhp_things_total counter\n"
            "dhp_things_total 3.5\n");
}

TEST(MetricsTest, CounterChildrenSortedByLabelValues) {
  MetricsRegistry registry;
  CounterFamily& f = registry.AddCounter("dhp_requests_total", "Requests.", {"method", "code"});
  f.WithLabels({"SubmitJob", "OK"}).Inc(3);
  f.WithLabels({"GetJob", "NOT_FOUND"}).Inc();
  f.WithLabels({"SubmitJob", "OK"}).Inc();
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_requests_total Requests.\n"
            "# TYPE dhp_requests_total counter\n"
            "dhp_requests_total{method=\"GetJob\",code=\"NOT_FOUND\"} 1\n"
            "dhp_requests_total{method=\"SubmitJob\",code=\"OK\"} 4\n");
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry registry;
  GaugeFamily& f = registry.AddGauge("dhp_odd", "Help with \\ and\nnewline \"quoted\".", {"v"});
  f.WithLabels({"a\\b\"c\nd"}).Set(-2);
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_odd Help with \\\\ and\\nnewline \"quoted\".\n"
            "# TYPE dhp_odd gauge\n"
            "dhp_odd{v=\"a\\\\b\\\"c\\nd\"} -2\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInf) {
  MetricsRegistry registry;
  HistogramFamily& f =
      registry.AddHistogram("dhp_latency_seconds", "Latency.", {"method"}, {0.1, 0.5, 1});
  Histogram& h = f.WithLabels({"Get"});
  h.Observe(0.05);
  h.Observe(0.1);  // le is inclusive
  h.Observe(0.7);
  h.Observe(3);
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_latency_seconds Latency.\n"
            "# TYPE dhp_latency_seconds histogram\n"
            "dhp_latency_seconds_bucket{method=\"Get\",le=\"0.1\"} 2\n"
            "dhp_latency_seconds_bucket{method=\"Get\",le=\"0.5\"} 2\n"
            "dhp_latency_seconds_bucket{method=\"Get\",le=\"1\"} 3\n"
            "dhp_latency_seconds_bucket{method=\"Get\",le=\"+Inf\"} 4\n"
            "dhp_latency_seconds_sum{method=\"Get\"} 3.85\n"
            "dhp_latency_seconds_count{method=\"Get\"} 4\n");
}

TEST(MetricsTest, HistogramWithoutLabelsAndDefaultBuckets) {
  MetricsRegistry registry;
  HistogramFamily& f = registry.AddHistogram("dhp_step_seconds", "Step time.");
  EXPECT_EQ(f.bounds(), DefaultLatencyBuckets());
  EXPECT_EQ(f.bounds().front(), 0.0005);
  EXPECT_EQ(f.bounds().back(), 10);
  f.WithLabels().Observe(0.003);
  const std::string text = registry.RenderText();
  EXPECT_NE(text.find("dhp_step_seconds_bucket{le=\"0.0005\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dhp_step_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dhp_step_seconds_bucket{le=\"+Inf\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dhp_step_seconds_sum 0.003\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dhp_step_seconds_count 1\n"), std::string::npos) << text;
}

TEST(MetricsTest, GaugeSetAllReplacesChildrenWholesale) {
  MetricsRegistry registry;
  GaugeFamily& jobs = registry.AddGauge("dhp_jobs", "Jobs by state.", {"state"});
  jobs.SetAll({{{"running"}, 3}, {{"queued"}, 1}});
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_jobs Jobs by state.\n"
            "# TYPE dhp_jobs gauge\n"
            "dhp_jobs{state=\"queued\"} 1\n"
            "dhp_jobs{state=\"running\"} 3\n");
  Gauge& running = jobs.WithLabels({"running"});
  jobs.SetAll({{{"succeeded"}, 4}});
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_jobs Jobs by state.\n"
            "# TYPE dhp_jobs gauge\n"
            "dhp_jobs{state=\"succeeded\"} 4\n");
  running.Inc();  // a held reference stays valid and shows again once set
  jobs.Reset();
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_jobs Jobs by state.\n"
            "# TYPE dhp_jobs gauge\n");
  running.Set(7);
  EXPECT_EQ(registry.RenderText(),
            "# HELP dhp_jobs Jobs by state.\n"
            "# TYPE dhp_jobs gauge\n"
            "dhp_jobs{state=\"running\"} 7\n");
}

TEST(MetricsTest, CollectorsRunBeforeEachRender) {
  MetricsRegistry registry;
  GaugeFamily& g = registry.AddGauge("dhp_scrapes", "Scrapes so far.");
  int calls = 0;
  registry.AddCollector([&] { g.WithLabels().Set(++calls); });
  EXPECT_NE(registry.RenderText().find("dhp_scrapes 1\n"), std::string::npos);
  EXPECT_NE(registry.RenderText().find("dhp_scrapes 2\n"), std::string::npos);
}

TEST(MetricsTest, FamiliesRenderInRegistrationOrder) {
  MetricsRegistry registry;
  registry.AddGauge("zz_first", "First.");
  registry.AddCounter("aa_second_total", "Second.");
  const std::string text = registry.RenderText();
  EXPECT_LT(text.find("zz_first"), text.find("aa_second_total"));
}

TEST(MetricsTest, FormatMetricValue) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "0");
  EXPECT_EQ(FormatMetricValue(42), "42");
  EXPECT_EQ(FormatMetricValue(1e15), "1e+15");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(0.0005), "0.0005");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
}

TEST(MetricsTest, NameValidation) {
  EXPECT_TRUE(IsValidMetricName("dhp_api:rate5m"));
  EXPECT_TRUE(IsValidMetricName("_x9"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9x"));
  EXPECT_FALSE(IsValidMetricName("dhp-jobs"));
  EXPECT_FALSE(IsValidMetricName("dhp jobs"));
  EXPECT_TRUE(IsValidLabelName("state"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("1a"));
}

TEST(MetricsDeathTest, ProgrammingErrorsCrash) {
  EXPECT_DEATH(
      {
        MetricsRegistry r;
        r.AddCounter("bad-name", "x");
      },
      "invalid metric name");
  EXPECT_DEATH(
      {
        MetricsRegistry r;
        r.AddCounter("ok_total", "x", {"bad-label"});
      },
      "invalid label name");
  EXPECT_DEATH(
      {
        MetricsRegistry r;
        r.AddCounter("dup_total", "x");
        r.AddGauge("dup_total", "y");
      },
      "registered twice");
  EXPECT_DEATH(
      {
        MetricsRegistry r;
        r.AddCounter("ok_total", "x", {"a"}).WithLabels({"1", "2"});
      },
      "expected 1 label values, got 2");
  EXPECT_DEATH(
      {
        MetricsRegistry r;
        r.AddCounter("ok_total", "x").WithLabels().Inc(-1);
      },
      "must be >= 0");
  EXPECT_DEATH(
      {
        MetricsRegistry r;
        r.AddHistogram("h", "x", {}, {1, 0.5});
      },
      "strictly increasing");
  EXPECT_DEATH(
      {
        MetricsRegistry r;
        r.AddHistogram("h", "x", {"le"});
      },
      "label named le");
}

TEST(MetricsTest, ConcurrentRecordingIsExact) {
  MetricsRegistry registry;
  CounterFamily& c = registry.AddCounter("dhp_c_total", "C.", {"t"});
  HistogramFamily& h = registry.AddHistogram("dhp_h_seconds", "H.", {"t"}, {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.WithLabels({"x"}).Inc();
        h.WithLabels({"x"}).Observe(0.5);
        if (i % 1000 == 0) registry.RenderText();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.WithLabels({"x"}).Value(), 40000);
  const Histogram::Snapshot s = h.WithLabels({"x"}).Read();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative[0], 40000u);
  EXPECT_EQ(s.sum, 20000);
}

// Runs `promtool check metrics` on a registry with every kind of family; promtool is part of
// the toolchain (tools/setup.sh installs the prometheus package), so its absence is a failure
// unless DHP_NO_PROMTOOL is set.
TEST(MetricsTest, PromtoolAcceptsRenderedText) {
  if (std::getenv("DHP_NO_PROMTOOL") != nullptr) GTEST_SKIP() << "DHP_NO_PROMTOOL is set";
  const char* promtool = "/usr/bin/promtool";
  ASSERT_EQ(access(promtool, X_OK), 0)
      << promtool << " is missing: run tools/setup.sh (or set DHP_NO_PROMTOOL=1 to skip)";

  MetricsRegistry registry;
  CounterFamily& requests = registry.AddCounter("dhp_api_requests_total",
                                                "API requests by method and code.",
                                                {"method", "code"});
  requests.WithLabels({"SubmitJob", "OK"}).Inc(12);
  requests.WithLabels({"GetJob", "NOT_FOUND"}).Inc();
  HistogramFamily& latency = registry.AddHistogram(
      "dhp_api_request_duration_seconds", "API request latency.", {"method"});
  latency.WithLabels({"SubmitJob"}).Observe(0.0031);
  latency.WithLabels({"GetJob"}).Observe(0.7);
  registry.AddGauge("dhp_jobs", "Jobs by state.", {"state"})
      .SetAll({{{"running"}, 2}, {{"queued"}, 0}});
  registry.AddGauge("dhp_odd_labels", "Escaping \\ and\nnewlines.", {"value"})
      .WithLabels({"quote \" backslash \\ newline \n end"})
      .Set(1.5);
  registry.AddGauge("dhp_up", "Whether the controller is up.").WithLabels().Set(1);
  const std::string text = registry.RenderText();

  const char* tmpdir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmpdir ? tmpdir : "/tmp") + "/metrics_test_" +
                           std::to_string(getpid()) + ".prom";
  {
    std::ofstream out(path);
    out << text;
  }
  const std::string command = std::string(promtool) + " check metrics < " + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int status = pclose(pipe);
  std::remove(path.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "promtool rejected the exposition:\n"
      << output << "\n--- text ---\n"
      << text;
}

}  // namespace
}  // namespace dhp
