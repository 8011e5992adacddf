#include "common/metrics_exposition.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

namespace dhp {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(MetricsExpositionTest, EveryFamilyPrintsHelpAndTypeBeforeItHasSamples) {
  MetricsExposition m;
  m.AddCounter("x_total", "Xs.");
  m.AddHistogram("x_seconds", "X time.");
  m.AddComputedGauges({{"x_gauge", "A gauge.", {"state"}}});
  const std::string text = m.RenderText();
  EXPECT_EQ(text,
            "# HELP x_total Xs.\n# TYPE x_total counter\n"
            "# HELP x_seconds X time.\n# TYPE x_seconds histogram\n"
            "# HELP x_gauge A gauge.\n# TYPE x_gauge gauge\n");
}

TEST(MetricsExpositionTest, CountersAndHistogramsRenderTheirSamples) {
  MetricsExposition m;
  auto& requests = m.AddCounter("req_total", "Requests.");
  auto& latency = m.AddHistogram("req_seconds", "Latency.");
  requests.Add({{"method", "Get"}, {"code", "OK"}}).Increment();
  requests.Add({{"method", "Get"}, {"code", "OK"}}).Increment(2.5);
  latency.Add({{"method", "Get"}}, LatencyBuckets()).Observe(0.003);
  latency.Add({{"method", "Get"}}, LatencyBuckets()).Observe(20);
  const std::string text = m.RenderText();
  EXPECT_TRUE(HasLine(text, R"(req_total{code="OK",method="Get"} 3.5)")) << text;
  EXPECT_TRUE(HasLine(text, R"(req_seconds_bucket{method="Get",le="0.0025"} 0)")) << text;
  EXPECT_TRUE(HasLine(text, R"(req_seconds_bucket{method="Get",le="0.005"} 1)")) << text;
  EXPECT_TRUE(HasLine(text, R"(req_seconds_bucket{method="Get",le="10"} 1)")) << text;
  EXPECT_TRUE(HasLine(text, R"(req_seconds_bucket{method="Get",le="+Inf"} 2)")) << text;
  EXPECT_TRUE(HasLine(text, R"(req_seconds_count{method="Get"} 2)")) << text;
  EXPECT_TRUE(HasLine(text, R"(req_seconds_sum{method="Get"} 20.003)")) << text;
}

TEST(MetricsExpositionTest, ComputedGaugesReplaceTheirSamplesWholesale) {
  MetricsExposition m;
  ComputedGauges& g = m.AddComputedGauges(
      {{"jobs", "Jobs.", {"state"}}, {"slots", "Slots.", {"node", "kind"}}, {"queued", "Q.", {}}});
  g.Set({{"jobs", {{{"RUNNING"}, 3}, {{"QUEUED"}, 1}}},
         {"slots", {{{"n1", "total"}, 8}}},
         {"queued", {{{}, 2}}}});
  std::string text = m.RenderText();
  EXPECT_TRUE(HasLine(text, R"(jobs{state="RUNNING"} 3)")) << text;
  EXPECT_TRUE(HasLine(text, R"(jobs{state="QUEUED"} 1)")) << text;
  EXPECT_TRUE(HasLine(text, R"(slots{node="n1",kind="total"} 8)")) << text;  // declared order
  EXPECT_TRUE(HasLine(text, "queued 2")) << text;

  g.Set({{"jobs", {{{"RUNNING"}, 4}}}});  // QUEUED and the other families go
  text = m.RenderText();
  EXPECT_TRUE(HasLine(text, R"(jobs{state="RUNNING"} 4)")) << text;
  EXPECT_EQ(text.find("QUEUED"), std::string::npos) << text;
  EXPECT_EQ(text.find("n1"), std::string::npos) << text;
  EXPECT_FALSE(HasLine(text, "queued 2")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE slots gauge")) << text;
}

TEST(MetricsExpositionTest, LabelValuesAndHelpAreEscaped) {
  MetricsExposition m;
  ComputedGauges& g = m.AddComputedGauges({{"g", "Back\\slash\nnewline.", {"v"}}});
  g.Set({{"g", {{{"a\"b\\c\nd"}, 1}}}});
  const std::string text = m.RenderText();
  EXPECT_TRUE(HasLine(text, R"(# HELP g Back\\slash\nnewline.)")) << text;
  EXPECT_TRUE(HasLine(text, R"(g{v="a\"b\\c\nd"} 1)")) << text;
}

TEST(MetricsExpositionTest, FamiliesRenderInRegistrationOrderAndCollectorsRunFirst) {
  MetricsExposition m;
  ComputedGauges& first = m.AddComputedGauges({{"a_first", "A.", {}}});
  m.AddCounter("b_total", "B.").Add({}).Increment();
  m.AddComputedGauges({{"c_last", "C.", {}}});
  int scrapes = 0;
  m.AddCollector([&] { first.Set({{"a_first", {{{}, static_cast<double>(++scrapes)}}}}); });
  m.RenderText();
  const std::string text = m.RenderText();
  EXPECT_TRUE(HasLine(text, "a_first 2")) << text;
  const size_t a = text.find("# TYPE a_first"), b = text.find("# TYPE b_total"),
               c = text.find("# TYPE c_last");
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

TEST(MetricsExpositionTest, ScrapesSeeWholeSetsWhileTheOwnerReplacesThem) {
  MetricsExposition m;
  ComputedGauges& g = m.AddComputedGauges({{"g", "G.", {"i"}}});
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int round = 0; !stop.load(); ++round) {
      GaugeRows rows;
      for (int i = 0; i < 50; ++i) rows.push_back({{std::to_string(i)}, double(round)});
      g.Set({{"g", rows}});
    }
  });
  for (int scrape = 0; scrape < 200; ++scrape) {
    const std::string text = m.RenderText();
    size_t samples = 0;
    std::string value;
    bool same = true;
    for (size_t pos = text.find("\ng{"); pos != std::string::npos; pos = text.find("\ng{", pos)) {
      const size_t space = text.find(' ', pos), end = text.find('\n', space);
      const std::string v = text.substr(space + 1, end - space - 1);
      if (samples++ > 0 && v != value) same = false;
      value = v;
      pos = end;
    }
    EXPECT_TRUE(samples == 0 || samples == 50) << samples;
    EXPECT_TRUE(same) << "a scrape mixed two sets";
  }
  stop = true;
  writer.join();
}

TEST(MetricsExpositionDeathTest, MisuseIsAProgrammingError) {
  EXPECT_DEATH(MetricsExposition().AddCounter("bad name", "x"), "invalid metric name");
  EXPECT_DEATH(
      {
        MetricsExposition m;
        m.AddCounter("dup_total", "x");
        m.AddComputedGauges({{"dup_total", "y", {}}});
      },
      "duplicate metric family dup_total");
  EXPECT_DEATH(ComputedGauges({{"g", "x", {"__reserved"}}}), "invalid label name");
  ComputedGauges g({{"g", "x", {"a", "b"}}});
  EXPECT_DEATH(g.Set({{"g", {{{"only one"}, 1}}}}), "1 label values for 2 labels");
  EXPECT_DEATH(g.Set({{"nope", {}}}), "unknown family nope");
}

}  // namespace
}  // namespace dhp
