#include "common/metrics_exposition.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>
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

// Computed gauges are rendered by ComputedGauges itself: the text must be what
// prometheus::TextSerializer makes of the same samples, byte for byte.
TEST(MetricsExpositionTest, ComputedGaugesRenderAsPrometheusCppWould) {
  const double values[] = {0, -0.0, 1, 3.5, 0.1, 20.003, 1.0 / 3, 80e9, 1796001376.0245101,
                           1e-7, 2.5e-5, 1e15, 1e16, 1e21, 123456789012345678.0, 6.02214076e23,
                           -42.125, std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::min(),
                           std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()};
  const std::vector<GaugeFamilyDef> defs = {
      {"plain", "No labels.", {}},
      {"labelled", "Three\\ labels\nhere.", {"job", "stage", "rank"}},
      {"empty", "Never set.", {"x"}},
      {"no_help", "", {"k"}}};
  const std::vector<std::string> escaped_help = {"No labels.", "Three\\\\ labels\\nhere.",
                                                 "Never set.", ""};
  MetricRows rows;
  std::vector<prometheus::MetricFamily> expected;
  for (size_t f = 0; f < defs.size(); ++f) {
    expected.push_back({defs[f].name, escaped_help[f], prometheus::MetricType::Gauge, {}});
  }
  for (double v : values) {
    rows["plain"].push_back({{}, v});
    expected[0].metric.emplace_back().gauge.value = v;
  }
  const std::vector<std::string> label_values = {"j-1", "a\"b\\c\nd", "", "visión ✓", "7"};
  for (size_t i = 0; i < label_values.size(); ++i) {
    const std::vector<std::string> labels = {label_values[i], "text", std::to_string(i)};
    rows["labelled"].push_back({labels, values[i]});
    prometheus::ClientMetric& m = expected[1].metric.emplace_back();
    for (size_t l = 0; l < labels.size(); ++l) m.label.push_back({defs[1].labels[l], labels[l]});
    m.gauge.value = values[i];
  }
  rows["no_help"].push_back({{"v"}, 2});
  prometheus::ClientMetric& m = expected[3].metric.emplace_back();
  m.label.push_back({"k", "v"});
  m.gauge.value = 2;

  MetricsExposition exposition;
  exposition.AddComputedGauges(defs).Set(rows);
  std::ostringstream serialized;
  prometheus::TextSerializer().Serialize(serialized, expected);
  // prometheus-cpp skips HELP when there is none, and writes TYPE for a family without samples.
  EXPECT_EQ(exposition.RenderText(), serialized.str());

  // The same samples written as they come, the families' samples interleaved, after a set
  // that a writer's Set replaces whole.
  MetricsExposition written;
  ComputedGauges& gauges = written.AddComputedGauges(defs);
  gauges.Set({{"empty", {{{"stale"}, 1}}}});
  GaugeTextWriter text(gauges);
  const GaugeRows& labelled = rows.at("labelled");
  for (size_t i = 0; i < std::size(values); ++i) {
    text.Add(0, {}, values[i]);
    if (i >= labelled.size()) continue;
    const std::vector<std::string>& l = labelled[i].first;
    const std::string_view views[] = {l[0], l[1], l[2]};
    text.Add(1, views, 3, labelled[i].second);
  }
  text.Add(3, {"v"}, 2);
  gauges.Set(std::move(text));
  EXPECT_EQ(written.RenderText(), serialized.str());
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
  EXPECT_DEATH(GaugeTextWriter(g).Add(0, {"only one"}, 1), "1 label values for 2 labels");
  EXPECT_DEATH(GaugeTextWriter(g).Add(1, {"a", "b"}, 1), "no family 1");
  ComputedGauges other({{"g", "x", {"a", "b"}}});
  EXPECT_DEATH(g.Set(GaugeTextWriter(other)), "a writer made for other gauges");
}

}  // namespace
}  // namespace dhp
