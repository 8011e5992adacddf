// The controller's /metrics, on prometheus-cpp (Debian's prometheus-cpp-dev; the core library
// only: our own HTTP server serves the text, civetweb's Exposer is not used).
//
// Two kinds of metrics, both in the text format 0.0.4:
//   - counters and histograms recorded as things happen: prometheus::Family<Counter|Histogram>
//     in a prometheus::Registry, created through AddCounter / AddHistogram, rendered by
//     prometheus::TextSerializer;
//   - gauges their owner recomputes wholesale at every scrape (jobs by state, per-rank stage
//     figures): ComputedGauges, whose families are declared up front and whose samples Set
//     replaces at once, so a scrape sees either the old set or the new one. Set renders them
//     itself, byte for byte as TextSerializer would (values as "%.16g", "Nan", "+Inf", "-Inf"):
//     with per-rank series, 80,000 GPU ranks make ~2.2 million, and building
//     prometheus::ClientMetric copies of every label and writing them through an ostream took
//     most of its CPU.
//
//   MetricsExposition metrics;
//   auto& requests = metrics.AddCounter("dhp_api_requests_total", "API requests.");
//   requests.Add({{"method", "SubmitJob"}, {"code", "OK"}}).Increment();
//   ComputedGauges& jobs = metrics.AddComputedGauges({{"dhp_jobs", "Jobs by state.", {"state"}}});
//   metrics.AddCollector([&] { jobs.Set({{"dhp_jobs", {{{"RUNNING"}, 3}, {{"QUEUED"}, 1}}}}); });
//   std::string text = metrics.RenderText();
//
// For large sets, write the samples' text as they are computed instead of building MetricRows:
//   GaugeTextWriter text(jobs);
//   text.Add(0, {"RUNNING"}, 3);           // family 0 of jobs' list: dhp_jobs
//   jobs.Set(std::move(text));
//
// Every family prints its HELP and TYPE from registration on, samples or not (prometheus-cpp
// alone skips families without samples): dashboards and tests/monitoring_test.py rely on it.
// Families render in registration order. Labels of registry families render sorted by name
// (prometheus::Labels is a map); those of computed gauges in their declared order.
//
// HELP text is escaped here (\ and newline): prometheus-cpp 1.0.1 writes it as given.
//
// Invalid metric or label names, a duplicate family name, an unknown family or a wrong number of
// label values passed to Set are programming errors and crash.
//
// Thread-safety: everything is thread-safe but a GaugeTextWriter or a GaugeRowsCollector, which
// one thread uses at a time. Collectors run before every RenderText, outside any lock this class
// holds.
#ifndef DHP_COMMON_METRICS_EXPOSITION_H_
#define DHP_COMMON_METRICS_EXPOSITION_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dhp {

// One gauge family's samples: label values (in the family's label order) and the value.
using GaugeRows = std::vector<std::pair<std::vector<std::string>, double>>;
// Family name -> its samples. A family that is absent has no samples.
using MetricRows = std::map<std::string, GaugeRows>;

struct GaugeFamilyDef {
  std::string name;
  std::string help;
  std::vector<std::string> labels;
};

// Receives gauge samples one at a time. `family`: the family's position in its list of
// GaugeFamilyDefs; `labels`: its label values, in the family's label order.
class GaugeSink {
 public:
  virtual ~GaugeSink() = default;
  virtual void Add(size_t family, std::initializer_list<std::string_view> labels,
                   double value) = 0;
};

class ComputedGauges;

// Writes each sample's line of text as it is added, into one buffer per family: what
// ComputedGauges::Set(const MetricRows&) renders for the same samples in the same order, without
// a vector of label strings per sample (a scrape can have millions). Hand it to
// the ComputedGauges it was made for: gauges.Set(std::move(writer)).
class GaugeTextWriter final : public GaugeSink {
 public:
  explicit GaugeTextWriter(const ComputedGauges& gauges);
  void Add(size_t family, std::initializer_list<std::string_view> labels, double value) override;
  // The same for labels held elsewhere (`n` of them at `labels`).
  void Add(size_t family, const std::string_view* labels, size_t n, double value);

 private:
  friend class ComputedGauges;
  const ComputedGauges* gauges_;
  std::vector<std::string> bodies_;  // per family: its sample lines
};

// Collects the samples as MetricRows, by family name (tests; sets of a few rows).
class GaugeRowsCollector final : public GaugeSink {
 public:
  explicit GaugeRowsCollector(const std::vector<GaugeFamilyDef>& families)
      : families_(families) {}
  void Add(size_t family, std::initializer_list<std::string_view> labels, double value) override;
  MetricRows Take() { return std::move(rows_); }

 private:
  const std::vector<GaugeFamilyDef>& families_;
  MetricRows rows_;
};

class ComputedGauges {
 public:
  explicit ComputedGauges(std::vector<GaugeFamilyDef> families);
  ComputedGauges(const ComputedGauges&) = delete;
  ComputedGauges& operator=(const ComputedGauges&) = delete;

  // Replaces every family's samples with those in `rows` (a family absent from rows is emptied).
  void Set(const MetricRows& rows);
  // Replaces every family's samples with those written into `text` (made for this object).
  void Set(GaugeTextWriter&& text);

  // Appends the families with their current samples in the text format.
  void AppendText(std::string& out) const;
  const std::vector<GaugeFamilyDef>& families() const { return defs_; }

 private:
  friend class GaugeTextWriter;
  const std::vector<GaugeFamilyDef> defs_;
  std::vector<std::string> heads_;       // each family's HELP and TYPE lines
  std::map<std::string, size_t> index_;  // name -> position in defs_
  mutable std::mutex mu_;
  // guarded by mu_: per family, its samples' lines (shared, never modified); null before Set
  std::shared_ptr<const std::vector<std::string>> bodies_;
};

class MetricsExposition {
 public:
  MetricsExposition();
  MetricsExposition(const MetricsExposition&) = delete;
  MetricsExposition& operator=(const MetricsExposition&) = delete;

  prometheus::Family<prometheus::Counter>& AddCounter(const std::string& name,
                                                      const std::string& help);
  // Children are added with their bucket bounds: family.Add(labels, LatencyBuckets()).
  prometheus::Family<prometheus::Histogram>& AddHistogram(const std::string& name,
                                                          const std::string& help);
  // The returned object lives as long as this one.
  ComputedGauges& AddComputedGauges(std::vector<GaugeFamilyDef> families);

  // Runs before every RenderText, so that computed gauges are fresh in each scrape.
  void AddCollector(std::function<void()> collector);

  // All families in registration order, in the Prometheus text exposition format 0.0.4.
  std::string RenderText() const;

 private:
  struct Entry {  // a registry family (computed == nullptr) or a set of computed gauges
    std::string name;
    std::string help;
    prometheus::MetricType type;
    const ComputedGauges* computed = nullptr;
  };
  void Register(Entry entry);

  prometheus::Registry registry_;
  mutable std::mutex mu_;  // guards entries_, computed_, collectors_, names_
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<ComputedGauges>> computed_;
  std::vector<std::shared_ptr<std::function<void()>>> collectors_;
  std::set<std::string> names_;  // every family name registered, to refuse duplicates
};

// Buckets for latencies in seconds: 0.5 ms .. 10 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

}  // namespace dhp

#endif  // DHP_COMMON_METRICS_EXPOSITION_H_
