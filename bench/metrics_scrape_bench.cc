// What one /metrics scrape costs the controller with 100 jobs x 64 ranks of per-stage series:
// the hand-written registry dhp used until issue 16 (common/metrics.{h,cc} at the baseline
// commit) against prometheus-cpp (common/metrics_exposition), side by side in one process.
//
// Per scrape the controller replaces every computed family's samples (RunMetrics::Set, after
// ComputeRunMetrics, whose cost is the same either way and is not measured) and renders the
// text. Both are timed, interleaved (baseline, prometheus-cpp, baseline, ...) so that machine
// noise hits both alike. The two texts are parsed and compared sample by sample: same series,
// same values (to 1e-15 relative; the two print doubles differently).
//
// The baseline is not in the tree: bench/metrics_scrape.sh takes it from git and builds this
// file with -DDHP_METRICS_BASELINE. The Bazel target //bench:metrics_scrape_bench builds it
// without, and then measures prometheus-cpp alone (so that the file keeps compiling).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#ifdef DHP_METRICS_BASELINE
#include "common/metrics.h"  // the baseline, from git (see bench/metrics_scrape.sh)
#endif
#include "common/metrics_exposition.h"

namespace {

struct Family {
  const char* name;
  std::vector<std::string> labels;
};

// The per-job and per-rank families of controller/run_metrics.h, with the label shapes a rank
// reports (one stage per rank, four phases, four memory kinds, three process groups).
const std::vector<Family>& Families() {
  static const std::vector<Family> kFamilies = {
      {"dhp_job_step", {"job"}},
      {"dhp_job_total_steps", {"job"}},
      {"dhp_job_loss", {"job"}},
      {"dhp_job_learning_rate", {"job"}},
      {"dhp_job_grad_norm", {"job"}},
      {"dhp_job_restarts", {"job"}},
      {"dhp_job_tokens_per_second", {"job"}},
      {"dhp_job_step_seconds", {"job"}},
      {"dhp_job_state", {"job", "state"}},
      {"dhp_job_last_progress_timestamp_seconds", {"job"}},
      {"dhp_stage_tokens_per_second", {"job", "stage", "rank"}},
      {"dhp_stage_step_seconds", {"job", "stage", "rank", "phase"}},
      {"dhp_stage_memory_bytes", {"job", "stage", "rank", "kind"}},
      {"dhp_stage_mfu", {"job", "stage", "rank"}},
      {"dhp_collective_bytes", {"job", "rank", "group"}},
      {"dhp_rank_step", {"job", "rank"}},
      {"dhp_rank_last_report_timestamp_seconds", {"job", "rank"}},
      {"dhp_rank_memory_capacity_bytes", {"job", "rank"}},
  };
  return kFamilies;
}

// Samples for `jobs` jobs of `ranks` ranks; `round` changes every value.
dhp::MetricRows MakeRows(int jobs, int ranks, int round) {
  dhp::MetricRows rows;
  const double t = 1.7e9 + round * 0.5;
  for (int j = 0; j < jobs; ++j) {
    const std::string job = "job-" + std::to_string(100000 + j);
    const double step = 1000 + round;
    for (const char* f : {"dhp_job_step", "dhp_job_total_steps", "dhp_job_restarts"}) {
      rows[f].push_back({{job}, step});
    }
    rows["dhp_job_loss"].push_back({{job}, 2.0 / (1 + round + j)});
    rows["dhp_job_learning_rate"].push_back({{job}, 3e-4});
    rows["dhp_job_grad_norm"].push_back({{job}, 0.731 + j * 1e-3});
    rows["dhp_job_tokens_per_second"].push_back({{job}, 123456.75 + round});
    rows["dhp_job_step_seconds"].push_back({{job}, 1.234});
    rows["dhp_job_state"].push_back({{job, "RUNNING"}, 1});
    rows["dhp_job_last_progress_timestamp_seconds"].push_back({{job}, t});
    for (int r = 0; r < ranks; ++r) {
      const std::string rank = std::to_string(r);
      const std::string stage = r < ranks / 2 ? "vision" : "text";
      rows["dhp_stage_tokens_per_second"].push_back({{job, stage, rank}, 2048.5 + r});
      for (const char* phase : {"forward", "backward", "comm", "optimizer"}) {
        rows["dhp_stage_step_seconds"].push_back({{job, stage, rank, phase}, 0.1 + r * 1e-4});
      }
      for (const char* kind : {"allocated", "reserved", "peak", "rss"}) {
        rows["dhp_stage_memory_bytes"].push_back({{job, stage, rank, kind}, 6.8e10 + r * 4096});
      }
      rows["dhp_stage_mfu"].push_back({{job, stage, rank}, 0.4123});
      for (const char* group : {"vision", "text", "handoff"}) {
        rows["dhp_collective_bytes"].push_back({{job, rank, group}, 1.5e12 + round * 1e6 + r});
      }
      rows["dhp_rank_step"].push_back({{job, rank}, step});
      rows["dhp_rank_last_report_timestamp_seconds"].push_back({{job, rank}, t + r * 1e-3});
      rows["dhp_rank_memory_capacity_bytes"].push_back({{job, rank}, 85899345920.0});
    }
  }
  return rows;
}

// The API families: 2 transports x 20 methods, one code each (histogram + counter).
constexpr int kMethods = 20;

#ifdef DHP_METRICS_BASELINE
struct Baseline {
  dhp::MetricsRegistry registry;
  std::map<std::string, dhp::GaugeFamily*> gauges;
  Baseline() {
    auto& requests = registry.AddCounter("dhp_api_requests_total", "API requests.",
                                         {"transport", "method", "code"});
    auto& latency = registry.AddHistogram("dhp_api_request_duration_seconds", "API latency.",
                                          {"transport", "method", "code"});
    for (const Family& f : Families()) gauges[f.name] = &registry.AddGauge(f.name, "x", f.labels);
    for (const char* transport : {"grpc", "rest"}) {
      for (int m = 0; m < kMethods; ++m) {
        const std::string method = "Method" + std::to_string(m);
        requests.WithLabels({transport, method, "OK"}).Inc(1000);
        latency.WithLabels({transport, method, "OK"}).Observe(0.002);
      }
    }
  }
  void Set(const dhp::MetricRows& rows) {
    for (auto& [name, family] : gauges) family->SetAll(rows.at(name));
  }
  std::string Render() { return registry.RenderText(); }
};
#endif  // DHP_METRICS_BASELINE

struct PrometheusCpp {
  dhp::MetricsExposition exposition;
  dhp::ComputedGauges* gauges = nullptr;
  PrometheusCpp() {
    auto& requests = exposition.AddCounter("dhp_api_requests_total", "API requests.");
    auto& latency = exposition.AddHistogram("dhp_api_request_duration_seconds", "API latency.");
    std::vector<dhp::GaugeFamilyDef> defs;
    for (const Family& f : Families()) defs.push_back({f.name, "x", f.labels});
    gauges = &exposition.AddComputedGauges(defs);
    for (const char* transport : {"grpc", "rest"}) {
      for (int m = 0; m < kMethods; ++m) {
        const prometheus::Labels labels = {
            {"transport", transport}, {"method", "Method" + std::to_string(m)}, {"code", "OK"}};
        requests.Add(labels).Increment(1000);
        latency.Add(labels, dhp::LatencyBuckets()).Observe(0.002);
      }
    }
  }
  void Set(const dhp::MetricRows& rows) { gauges->Set(rows); }
  std::string Render() { return exposition.RenderText(); }
};

// Series key (name + labels sorted by name) -> value, from an exposition.
std::map<std::string, double> Parse(const std::string& text) {
  std::map<std::string, double> samples;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    std::string series = line.substr(0, space);
    const size_t brace = series.find('{');
    if (brace != std::string::npos) {
      std::vector<std::string> labels;
      std::string body = series.substr(brace + 1, series.size() - brace - 2);
      size_t start = 0;
      for (size_t i = 0, quoted = 0; i <= body.size(); ++i) {
        if (i < body.size() && body[i] == '"' && (i == 0 || body[i - 1] != '\\')) quoted ^= 1;
        if (i == body.size() || (body[i] == ',' && !quoted)) {
          labels.push_back(body.substr(start, i - start));
          start = i + 1;
        }
      }
      std::sort(labels.begin(), labels.end());
      series = series.substr(0, brace) + "{";
      for (const std::string& l : labels) series += l + ",";
      series += "}";
    }
    samples[series] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return samples;
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Timing {
  std::vector<double> set_ms, render_ms, total_ms;
  size_t bytes = 0;
};

template <typename Impl>
void Scrape(Impl& impl, const dhp::MetricRows& rows, Timing& t, std::string* text) {
  const auto t0 = std::chrono::steady_clock::now();
  impl.Set(rows);
  const auto t1 = std::chrono::steady_clock::now();
  *text = impl.Render();
  const auto t2 = std::chrono::steady_clock::now();
  t.set_ms.push_back(Ms(t1 - t0));
  t.render_ms.push_back(Ms(t2 - t1));
  t.total_ms.push_back(Ms(t2 - t0));
  t.bytes = text->size();
}

}  // namespace

#ifdef DHP_METRICS_BASELINE
int RunBoth(int jobs, int ranks, int rounds, const std::string& out) {
  Baseline baseline;
  PrometheusCpp prom;
  Timing tb, tp;
  std::string text_b, text_p;
  for (int round = 0; round < rounds; ++round) {
    const dhp::MetricRows rows = MakeRows(jobs, ranks, round);
    Scrape(baseline, rows, tb, &text_b);
    Scrape(prom, rows, tp, &text_p);
  }
  // The last round's two texts: the same series with the same values.
  const std::map<std::string, double> b = Parse(text_b), p = Parse(text_p);
  size_t mismatches = b.size() == p.size() ? 0 : 1;
  for (const auto& [series, value] : b) {
    auto it = p.find(series);
    if (it == p.end() || std::fabs(it->second - value) > 1e-15 * std::fabs(value)) {
      if (mismatches++ < 3) std::fprintf(stderr, "differs: %s\n", series.c_str());
    }
  }

  char table[2048];
  std::snprintf(table, sizeof(table),
                "| registry | Set ms | render ms | scrape ms (median of %d) | text MB |\n"
                "|---|---:|---:|---:|---:|\n"
                "| hand-written (baseline) | %.1f | %.1f | %.1f | %.2f |\n"
                "| prometheus-cpp 1.0.1 | %.1f | %.1f | %.1f | %.2f |\n\n"
                "%d jobs x %d ranks: %zu samples; prometheus-cpp / baseline scrape time: %.2fx; "
                "samples that differ: %zu\n",
                rounds, Median(tb.set_ms), Median(tb.render_ms), Median(tb.total_ms),
                tb.bytes / 1e6, Median(tp.set_ms), Median(tp.render_ms), Median(tp.total_ms),
                tp.bytes / 1e6, jobs, ranks, p.size(), Median(tp.total_ms) / Median(tb.total_ms),
                mismatches);
  std::fputs(table, stdout);
  if (!out.empty()) {
    std::ofstream json(out + ".json");
    json << "{\"jobs\": " << jobs << ", \"ranks\": " << ranks << ", \"samples\": " << p.size()
         << ", \"baseline_scrape_ms\": " << Median(tb.total_ms)
         << ", \"prometheus_cpp_scrape_ms\": " << Median(tp.total_ms)
         << ", \"baseline_set_ms\": " << Median(tb.set_ms)
         << ", \"prometheus_cpp_set_ms\": " << Median(tp.set_ms)
         << ", \"baseline_render_ms\": " << Median(tb.render_ms)
         << ", \"prometheus_cpp_render_ms\": " << Median(tp.render_ms)
         << ", \"mismatches\": " << mismatches << "}\n";
    std::ofstream(out + ".table") << table;
  }
  return mismatches == 0 ? 0 : 1;
}
#endif  // DHP_METRICS_BASELINE

// prometheus-cpp alone (a build without the baseline).
int RunAlone(int jobs, int ranks, int rounds) {
  PrometheusCpp prom;
  Timing t;
  std::string text;
  for (int round = 0; round < rounds; ++round) Scrape(prom, MakeRows(jobs, ranks, round), t, &text);
  std::printf(
      "| registry | Set ms | render ms | scrape ms (median of %d) | text MB |\n"
      "|---|---:|---:|---:|---:|\n"
      "| prometheus-cpp 1.0.1 | %.1f | %.1f | %.1f | %.2f |\n\n"
      "%d jobs x %d ranks: %zu samples (no baseline in this build: bench/metrics_scrape.sh)\n",
      rounds, Median(t.set_ms), Median(t.render_ms), Median(t.total_ms), t.bytes / 1e6, jobs, ranks,
      Parse(text).size());
  return 0;
}

int main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 100;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 64;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 15;
#ifdef DHP_METRICS_BASELINE
  return RunBoth(jobs, ranks, rounds, argc > 4 ? argv[4] : "");
#else
  return RunAlone(jobs, ranks, rounds);
#endif
}
